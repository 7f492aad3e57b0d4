"""Small models and sine-regression tasks shared by the torchopt_fn tests."""

from __future__ import annotations

import math

import torch
from torch import nn


def mlp(dtype: torch.dtype = torch.float32, seed: int = 0, hidden: int = 8,
        activation: type[nn.Module] = nn.Tanh) -> nn.Module:
    """A 3 -> hidden -> 2 MLP with weights fixed by ``seed``."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, hidden), activation(), nn.Linear(hidden, 2)).to(dtype)


def sine_net(dtype: torch.dtype = torch.float64, seed: int = 0, hidden: int = 16) -> nn.Module:
    """A 1 -> hidden -> hidden -> 1 network for sine regression."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, 1)).to(dtype)


def sine_task(generator: torch.Generator, dtype: torch.dtype = torch.float64,
              shots: int = 10) -> tuple[torch.Tensor, ...]:
    """``(x_support, y_support, x_query, y_query)`` for a random amplitude and phase."""
    amplitude = 0.1 + 4.9 * torch.rand((), generator=generator, dtype=dtype)
    phase = math.pi * torch.rand((), generator=generator, dtype=dtype)
    x = 10.0 * torch.rand(2 * shots, 1, generator=generator, dtype=dtype) - 5.0
    y = amplitude * torch.sin(x + phase)
    return x[:shots], y[:shots], x[shots:], y[shots:]
