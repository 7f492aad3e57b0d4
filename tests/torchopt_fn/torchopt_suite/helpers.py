"""The ``helpers`` module that TorchOpt 0.7.3's tests import (absent from its source distribution).

Written for this project from how the tests call it: the same names, the same test model (an MLP
on MNIST-sized inputs with BatchNorm and one layer holding a parameter and a module the forward
never uses, so some gradients are ``None``), the same parametrization ids, and comparisons of the
change from the initial model with ``torch.testing`` tolerances scaled by the number of updates.
"""

from __future__ import annotations

import copy
import itertools
import os
import random
from collections.abc import Iterable

import numpy as np
import pytest
import torch
import torchopt
from torch import nn
from torch.testing._comparison import get_tolerances
from torch.utils import data

BATCH_SIZE = 64
NUM_UPDATES = 5
MODEL_NUM_INPUTS = 28 * 28
MODEL_NUM_CLASSES = 10
MODEL_HIDDEN_SIZE = 64


def dtype_torch2numpy(dtype: torch.dtype) -> np.dtype:
    """The NumPy dtype of a torch dtype."""
    return torch.empty((), dtype=dtype).numpy().dtype


def parametrize(**argvalues: list) -> pytest.MarkDecorator:
    """Cartesian product of the arguments; ``dtype`` varies only on the first combination."""
    names = list(argvalues)
    if 'dtype' in names:
        names.remove('dtype')
        names.insert(0, 'dtype')
        first, *others = argvalues['dtype']
        combos = [(first, *rest) for rest in itertools.product(*(argvalues[n] for n in names[1:]))]
        combos += [(dtype, *combos[0][1:]) for dtype in others]
    else:
        combos = list(itertools.product(*(argvalues[n] for n in names)))
    ids = ['-'.join(f'{n}({v!r})' for n, v in zip(names, combo)) for combo in combos]
    return pytest.mark.parametrize(names, combos, ids=ids)


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch, and ask torch for deterministic algorithms."""
    os.environ['PYTHONHASHSEED'] = str(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)


class _LinearWithUnused(nn.Module):
    """A linear layer beside a module and a parameter that the forward pass never uses."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.unused_module = nn.Linear(1, 1, bias=False)
        self.unused_parameter = nn.Parameter(torch.zeros(1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


@torch.no_grad()
def get_model() -> nn.Module:
    """The test classifier."""
    hidden = MODEL_HIDDEN_SIZE
    return nn.Sequential(
        _LinearWithUnused(MODEL_NUM_INPUTS, hidden),
        nn.BatchNorm1d(hidden, track_running_stats=True),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.BatchNorm1d(hidden, track_running_stats=True),
        nn.ReLU(),
        nn.Linear(hidden, MODEL_NUM_CLASSES, bias=False),
        nn.Softmax(dim=-1),
    )


@torch.no_grad()
def get_models(
    device: torch.types.Device | None = None, dtype: torch.dtype = torch.float32
) -> tuple[nn.Module, nn.Module, nn.Module, data.DataLoader]:
    """Three identical models (under test, reference, initial); a loader of NUM_UPDATES batches."""
    seed_everything(42)
    base = get_model().to(dtype=dtype)
    for name, param in base.named_parameters():
        if name.endswith('weight') and param.ndim >= 2:
            nn.init.orthogonal_(param)
        elif name.endswith('bias'):
            param.normal_(0.0, 0.1)
    if device is not None:
        base = base.to(device=torch.device(device))
    n = BATCH_SIZE * NUM_UPDATES
    dataset = data.TensorDataset(
        torch.randint(0, 1, (n, MODEL_NUM_INPUTS)), torch.randint(0, MODEL_NUM_CLASSES, (n,))
    )
    loader = data.DataLoader(dataset, BATCH_SIZE, shuffle=False)
    return copy.deepcopy(base), copy.deepcopy(base), base, loader


@torch.no_grad()
def assert_all_close(
    actual: torch.Tensor,
    expected: torch.Tensor,
    base: torch.Tensor | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
) -> None:
    """Compare the changes from ``base``; default tolerances are torch's, times 5 * NUM_UPDATES."""
    if base is not None:
        actual, expected = actual - base, expected - base
    if rtol is None or atol is None:
        rtol, atol = get_tolerances(actual, expected, rtol=rtol, atol=atol)
        rtol, atol = rtol * 5 * NUM_UPDATES, atol * 5 * NUM_UPDATES
    torch.testing.assert_close(
        actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, check_dtype=True
    )


@torch.no_grad()
def assert_model_all_close(
    model: nn.Module | tuple[Iterable[torch.Tensor], Iterable[torch.Tensor]],
    model_ref: nn.Module,
    model_base: nn.Module,
    dtype: torch.dtype = torch.float32,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
) -> None:
    """Compare parameters and buffers (integer buffers cast to ``dtype``) against the reference."""
    if isinstance(model, nn.Module):
        params, buffers = model.parameters(), model.buffers()
    else:
        params, buffers = model
    kwargs = {'rtol': rtol, 'atol': atol, 'equal_nan': equal_nan}
    for p, p_ref, p_base in zip(params, model_ref.parameters(), model_base.parameters()):
        assert_all_close(p, p_ref, base=p_base, **kwargs)
    for triple in zip(buffers, model_ref.buffers(), model_base.buffers()):
        b, b_ref, b_base = (t if t.is_floating_point() else t.to(dtype) for t in triple)
        assert_all_close(b, b_ref, base=b_base, **kwargs)


@torch.no_grad()
def assert_pytree_all_close(
    actual: object,
    expected: object,
    base: object | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
) -> None:
    """Same tree structure, and every leaf close (changes from ``base`` when given)."""
    actual_leaves, spec = torchopt.pytree.tree_flatten(actual)
    expected_leaves, expected_spec = torchopt.pytree.tree_flatten(expected)
    assert spec == expected_spec
    if base is None:
        base_leaves = [None] * len(actual_leaves)
    else:
        base_leaves, base_spec = torchopt.pytree.tree_flatten(base)
        assert base_spec == expected_spec
    for a, e, b in zip(actual_leaves, expected_leaves, base_leaves):
        assert_all_close(a, e, base=b, rtol=rtol, atol=atol, equal_nan=equal_nan)
