"""optax_compat.losses regression losses against real Optax, values and gradients."""

from __future__ import annotations

import optax
import pytest
import torch

import optax_compat.losses as losses
from optax_compat.testing import compare_function_with_optax, seeded_randn

DTYPES = [torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["squared_error", "l2_loss", "log_cosh"])
@pytest.mark.parametrize("shape, with_targets", [((), True), ((3, 4), True), ((5,), False)])
def test_elementwise_losses(dtype, name, shape, with_targets):
    predictions = seeded_randn(*shape, dtype=dtype, scale=3.0)
    args = (predictions, seeded_randn(*shape, dtype=dtype, seed=1)) if with_targets else (
        predictions,)
    compare_function_with_optax(getattr(losses, name), getattr(optax.losses, name), args,
                                dtype=dtype, grad_argnums=tuple(range(len(args))))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("delta, target_shape", [(1.0, (3, 4)), (0.5, (4,)), (2.0, None)])
def test_huber_loss(dtype, delta, target_shape):
    predictions = seeded_randn(3, 4, dtype=dtype, scale=2.0)
    args = (predictions,) if target_shape is None else (
        predictions, seeded_randn(*target_shape, dtype=dtype, seed=1))
    compare_function_with_optax(losses.huber_loss, optax.losses.huber_loss, args,
                                {"delta": delta}, dtype=dtype, grad_argnums=(0,))


def test_huber_loss_gradient_is_the_clipped_error():
    errors = torch.tensor([-3.0, -0.5, 0.0, 0.25, 2.0], requires_grad=True)
    losses.huber_loss(errors, delta=1.0).sum().backward()
    assert torch.equal(errors.grad, errors.detach().clamp(-1.0, 1.0))


def test_log_cosh_is_finite_for_large_errors():
    errors = torch.tensor([-1e4, 1e4], dtype=torch.float32)
    compare_function_with_optax(losses.log_cosh, optax.losses.log_cosh, (errors,))
    assert torch.isfinite(losses.log_cosh(errors)).all()


@pytest.mark.parametrize("name", ["squared_error", "l2_loss"])
def test_squared_error_refuses_to_broadcast(name):
    with pytest.raises(ValueError, match="Shape mismatch"):
        getattr(losses, name)(torch.ones(3), torch.ones(3, 1))
    with pytest.raises(TypeError, match="floating"):
        getattr(losses, name)(torch.ones(3, dtype=torch.int64))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, options", [
    ("cosine_similarity", {}), ("cosine_similarity", {"epsilon": 0.1}),
    ("cosine_similarity", {"axis": 0}), ("cosine_similarity", {"axis": (0, 2)}),
    ("cosine_similarity", {"axis": None}), ("cosine_similarity", {"where": "mask"}),
    ("cosine_distance", {}), ("cosine_distance", {"axis": 1, "where": "mask"})])
def test_cosine_losses(dtype, name, options):
    predictions = seeded_randn(2, 3, 4, dtype=dtype)
    targets = seeded_randn(2, 3, 4, dtype=dtype, seed=1)
    if "where" in options:
        options = {**options, "where": seeded_randn(2, 3, 4, seed=2) > -0.5}
    compare_function_with_optax(getattr(losses, name), getattr(optax.losses, name),
                                (predictions, targets), options, dtype=dtype,
                                grad_argnums=(0, 1))


def test_cosine_similarity_epsilon_bounds_the_norm():
    zero, other = torch.zeros(1, 3), torch.ones(1, 3)
    assert torch.isnan(losses.cosine_similarity(zero, other)).all()
    assert torch.equal(losses.cosine_similarity(zero, other, epsilon=1e-8), torch.zeros(1))
    compare_function_with_optax(losses.cosine_distance, optax.losses.cosine_distance,
                                (zero, other), {"epsilon": 1e-8}, grad_argnums=(0, 1))
