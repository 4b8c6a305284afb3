"""Registers the conformance plugin for runs of this directory (``pytest conformance``)."""

from conformance.plugin import *  # noqa: F403 - pytest finds the hooks and fixtures by name
