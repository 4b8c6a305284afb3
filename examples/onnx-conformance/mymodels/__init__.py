"""A tiny model package standing in for an adopter's own models."""

import torch


class TinyCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, images):
        return self.head(torch.relu(self.conv(images)).mean(dim=(2, 3)))


class TinyTagger(torch.nn.Module):
    def __init__(self, vocab: int = 16):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, 8)
        self.out = torch.nn.Linear(8, 3)

    def forward(self, ids):
        return self.out(torch.tanh(self.embed(ids))).softmax(-1)
