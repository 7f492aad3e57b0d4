"""Numerically safe helpers against real Optax, including their gradients at the clip point."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

import optax_compat as ox
from optax_compat.testing import assert_leaves_close, jax_precision


@pytest.mark.parametrize("min_norm", [0.0, 0.5, 100.0])
@pytest.mark.parametrize("ord,axis,keepdims", [(None, None, False), (2, 1, True), (1, 0, False),
                                               ("fro", (0, 1), False), (np.inf, 1, False)])
def test_safe_norm_matches_optax(min_norm, ord, axis, keepdims):
    x = np.random.default_rng(0).normal(size=(3, 4))
    with jax_precision(torch.float64):
        theirs = optax.safe_norm(jnp.asarray(x), min_norm, ord=ord, axis=axis, keepdims=keepdims)
    ours = ox.safe_norm(torch.tensor(x), min_norm, ord=ord, axis=axis, keepdims=keepdims)
    assert_leaves_close(ours, theirs)


@pytest.mark.parametrize("fn", ["safe_norm", "safe_root_mean_squares"])
def test_gradient_is_zero_not_nan_at_zero(fn):
    x = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(getattr(ox, fn)(x, 0.1), x)
    assert torch.equal(grad, torch.zeros(3, dtype=torch.float64))
    with jax_precision(torch.float64):
        theirs = jax.grad(lambda v: getattr(optax, fn)(v, 0.1))(jnp.zeros(3))
    np.testing.assert_array_equal(grad.cpu().numpy(), np.asarray(theirs))


@pytest.mark.parametrize("min_rms", [0.0, 0.7, 10.0])
def test_safe_root_mean_squares_matches_optax(min_rms):
    x = np.random.default_rng(1).normal(size=(5,))
    with jax_precision(torch.float64):
        theirs = optax.safe_root_mean_squares(jnp.asarray(x), min_rms)
    assert_leaves_close(ox.safe_root_mean_squares(torch.tensor(x), min_rms), theirs)


@pytest.mark.parametrize("dtype,value", [(torch.int32, 5), (torch.int32, 2**31 - 1),
                                         (torch.int64, 2**63 - 1), (torch.float32, 1.5)])
def test_safe_increment_saturates(dtype, value):
    count = torch.tensor(value, dtype=dtype)
    result = ox.safe_increment(count)
    assert result.dtype == dtype
    expected = value if value in (2**31 - 1, 2**63 - 1) else value + 1
    assert result.item() == expected
    assert ox.safe_int32_increment is ox.safe_increment


def test_safe_increment_rejects_bool():
    with pytest.raises(ValueError, match="dtype"):
        ox.safe_increment(torch.tensor(True))


def test_scale_gradient_scales_backward_only():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = ox.scale_gradient({"x": x}, 0.25)["x"]
    assert torch.equal(y, x.detach())
    (grad,) = torch.autograd.grad(y.sum(), x)
    assert torch.equal(grad, torch.full((2,), 0.25))
    assert not ox.scale_gradient({"x": x}, 0.0)["x"].requires_grad
    assert ox.scale_gradient({"x": x}, 1.0)["x"] is x


def test_multi_normal_log_prob_matches_optax():
    loc, log_scale = np.array([0.5, -1.0]), np.array([0.1, -0.3])
    x = np.array([[0.2, 0.0], [1.0, -2.0]])
    with jax_precision(torch.float64):
        theirs = optax.multi_normal(jnp.asarray(loc), jnp.asarray(log_scale)).log_prob(
            jnp.asarray(x))
    ours = ox.multi_normal(torch.tensor(loc), torch.tensor(log_scale)).log_prob(torch.tensor(x))
    assert_leaves_close(ours, theirs)


def test_multi_normal_samples_have_the_right_moments():
    dist = ox.multi_normal(torch.tensor([1.0, -2.0]), torch.tensor([0.0, np.log(3.0)]))
    samples = dist.sample((20000,), key=0)
    assert samples.shape == (20000, 2)
    np.testing.assert_allclose(samples.mean(0).cpu().numpy(), [1.0, -2.0], atol=0.1)
    np.testing.assert_allclose(samples.std(0).cpu().numpy(), [1.0, 3.0], rtol=0.05)
    assert torch.equal(samples, dist.sample((20000,), key=0))


def test_global_norm_is_deprecated_and_correct():
    with pytest.warns(DeprecationWarning):
        norm = ox.global_norm({"a": torch.tensor([3.0]), "b": [torch.tensor([4.0])]})
    assert norm.item() == pytest.approx(5.0)
