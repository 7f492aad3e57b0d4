"""Meta-gradients: differentiating two optimizer steps with respect to the learning rate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optree
import pytest
import torch

import optax_compat
from optax_compat.testing import make_tree


def gradient(params: Any) -> Any:
    """The gradient of ``sum(0.5 * p ** 2 + sin(3 p))``, written out so it stays differentiable."""
    return optree.tree_map(lambda p: p + 3 * torch.cos(3 * p), params, none_is_leaf=False)


def objective(params: Any) -> torch.Tensor:
    leaves = optree.tree_leaves(params, none_is_leaf=False)
    return sum((0.5 * p ** 2 + torch.sin(3 * p)).sum() for p in leaves)


def loss_after_two_steps(make_tx: Callable[[Any], Any],
                         learning_rate: torch.Tensor) -> torch.Tensor:
    tx = make_tx(learning_rate)
    params = make_tree(torch.float64, seed=3)
    # Adafactor factors only dimensions of at least 2 here; give it a matrix worth factoring.
    params["layer"]["w"] = torch.linspace(-1.0, 2.0, 12, dtype=torch.float64).reshape(3, 4)
    state = tx.init(params)
    for _ in range(2):
        updates, state = tx.update(gradient(params), state, params)
        params = optax_compat.apply_updates(params, updates)
    return objective(params)


OPTIMIZERS = {
    "adam": lambda lr: optax_compat.adam(lr),
    "sgd_momentum": lambda lr: optax_compat.sgd(lr, momentum=0.9),
    "rmsprop": lambda lr: optax_compat.rmsprop(lr),
    "adafactor": lambda lr: optax_compat.adafactor(lr, min_dim_size_to_factor=2),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_learning_rate_gradient_matches_finite_differences(name: str) -> None:
    make_tx = OPTIMIZERS[name]
    learning_rate = torch.tensor(0.05, dtype=torch.float64, requires_grad=True)
    (analytic,) = torch.autograd.grad(loss_after_two_steps(make_tx, learning_rate),
                                      learning_rate)
    step = 1e-6
    with torch.no_grad():
        plus = loss_after_two_steps(make_tx, torch.tensor(0.05 + step, dtype=torch.float64))
        minus = loss_after_two_steps(make_tx, torch.tensor(0.05 - step, dtype=torch.float64))
    numeric = (plus - minus) / (2 * step)
    assert analytic.dtype == torch.float64
    assert abs(numeric.item()) > 1e-3  # the test is not vacuous
    torch.testing.assert_close(analytic, numeric, rtol=1e-6, atol=1e-9)
