"""trace and ema against real Optax; trace's in-place path, gradients and bad input."""

import jax.numpy as jnp
import optax
import pytest
import torch

import optax_compat as ox
from optax_compat.testing import (
    assert_inplace_matches_pure,
    compare_with_optax,
    jit_optax,
    make_tree,
)

DTYPES = [torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nesterov", [False, True])
def test_trace_matches_optax(dtype, nesterov):
    compare_with_optax(ox.trace(0.9, nesterov=nesterov),
                       lambda: jit_optax(optax.trace(0.9, nesterov=nesterov)), dtype, steps=6)


@pytest.mark.parametrize("nesterov", [False, True])
def test_trace_accumulator_dtype_matches_optax(nesterov):
    ours, _ = compare_with_optax(
        ox.trace(0.9, nesterov=nesterov, accumulator_dtype=torch.float16),
        lambda: jit_optax(optax.trace(0.9, nesterov=nesterov, accumulator_dtype=jnp.float16)),
        torch.float32, steps=5)
    assert all(t.dtype == torch.float16 for t in ox.tree_utils._tree_math.tm.leaves(ours))


@pytest.mark.parametrize("dtype", DTYPES)
def test_trace_with_tensor_decay_matches_optax(dtype):
    compare_with_optax(ox.trace(torch.tensor(0.7, dtype=dtype), nesterov=True),
                       lambda: jit_optax(optax.trace(0.7, nesterov=True)), dtype, steps=5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("debias", [True, False])
def test_ema_matches_optax(dtype, debias):
    compare_with_optax(ox.ema(0.8, debias=debias), lambda: jit_optax(optax.ema(0.8, debias=debias)),
                       dtype, steps=6)


def test_ema_accumulator_dtype_matches_optax():
    compare_with_optax(ox.ema(0.8, accumulator_dtype=torch.float16),
                       lambda: jit_optax(optax.ema(0.8, accumulator_dtype=jnp.float16)),
                       torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nesterov", [False, True])
def test_trace_inplace_matches_pure(dtype, nesterov):
    assert_inplace_matches_pure(ox.trace(0.9, nesterov=nesterov), dtype)


def test_trace_inplace_with_tensor_decay_matches_pure():
    assert_inplace_matches_pure(ox.trace(torch.tensor(0.9), nesterov=True))


def test_trace_inplace_with_other_accumulator_dtype_falls_back_to_pure_numbers():
    tx = ox.trace(0.9, accumulator_dtype=torch.float64)
    grads = make_tree(torch.float32, 1)
    pure, _ = tx.update(grads, tx.init(grads))
    inplace, state = tx.update(ox.tree_utils._tree_math.tm.tree_map(torch.clone, grads),
                               tx.init(grads), inplace=True)
    assert ox.tree.allclose(pure, inplace, rtol=0, atol=0)
    assert all(t.dtype == torch.float64 for t in ox.tree_utils._tree_math.tm.leaves(state))


def test_trace_gradient_wrt_decay_and_updates():
    decay = torch.tensor(0.6, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(3, dtype=torch.float64, requires_grad=True)

    def two_steps(decay, grad):
        tx = ox.trace(decay, nesterov=True)
        state = tx.init({"w": grad})
        updates, state = tx.update({"w": grad}, state)
        updates, state = tx.update({"w": grad * 2}, state)
        return updates["w"]

    assert torch.autograd.gradcheck(two_steps, (decay, grad))


def test_trace_structure_mismatch_names_the_path():
    tx = ox.trace(0.9)
    state = tx.init({"a": torch.zeros(2), "b": {"c": torch.zeros(3)}})
    with pytest.raises(ValueError, match=r"\['b'\]"):
        tx.update({"a": torch.zeros(2), "b": {"d": torch.zeros(3)}}, state)


def test_ema_structure_mismatch_names_the_path():
    tx = ox.ema(0.9)
    state = tx.init({"a": torch.zeros(2)})
    with pytest.raises(ValueError, match=r"key 'x'|key 'a'"):
        tx.update({"x": torch.zeros(2)}, state)
