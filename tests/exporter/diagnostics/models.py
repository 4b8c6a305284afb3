"""Small modules the diagnostics tests export: one definition each."""

from __future__ import annotations

import torch


class LinearSigmoid(torch.nn.Module):
    """sigmoid(Linear(4, out_features)(x)): the smallest model with a weight and an activation."""

    def __init__(self, out_features: int = 3) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, out_features)

    def forward(self, x):
        return torch.sigmoid(self.lin(x))
