"""The conformance cases of this project's models (see onnx-conformance's README)."""

import torch
from mymodels import TinyCNN, TinyTagger

from torch_onnx_conformance.conformance.user_cases import ModelCase


def build_cnn():
    return TinyCNN(), (torch.randn(2, 3, 8, 8),), {}


def build_tagger():
    return TinyTagger(), (), {"ids": torch.randint(0, 16, (2, 5))}


def model_cases():
    return [
        ModelCase("example/cnn", build_cnn, dynamic_shapes=({0: "batch", 3: "width"},)),
        ModelCase(
            "example/tagger",
            build_tagger,
            dynamic_shapes={"ids": {0: "batch", 1: "tokens"}},
            grow={"tokens": 3},
            family="text",
        ),
    ]
