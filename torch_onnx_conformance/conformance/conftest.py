"""Registers the conformance plugin for runs of this directory (``pytest torch_onnx_conformance/conformance``): its
two module-level hooks register the objects that hold the others (``plugin.__all__``)."""

from torch_onnx_conformance.conformance.plugin import pytest_addoption, pytest_configure

__all__ = ["pytest_addoption", "pytest_configure"]
