"""schedule_free, its SGD/AdamW shortcuts and schedule_free_eval_params against real Optax."""

import numpy as np
import optax
import pytest
import torch

import optax_compat as ox
from optax_compat.contrib import _schedule_free
from optax_compat.testing import (
    assert_leaves_close,
    compare_with_optax,
    jax_precision,
    jit_optax,
    make_tree,
    to_jax,
)

DTYPES = [torch.float32, torch.float64]


def _compare_with_eval_params(ours_tx, theirs_tx, dtype, steps=6):
    ours, theirs = compare_with_optax(ours_tx, lambda: jit_optax(theirs_tx()), dtype, steps)
    params = make_tree(dtype, seed=42)
    with jax_precision(dtype):
        assert_leaves_close(_schedule_free.schedule_free_eval_params(ours, params),
                            optax.contrib.schedule_free_eval_params(theirs, to_jax(params)),
                            what="eval params")
    return ours


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("base", "kwargs"), [
    ("sgd", {"learning_rate": 0.1}),
    ("sgd", {"learning_rate": 0.1, "b1": 0.5, "weight_lr_power": 1.0}),
    ("adam", {"learning_rate": 0.05, "b1": 0.95}),
], ids=["sgd", "sgd_b1_power", "adam"])
def test_schedule_free_wrapper_matches_optax(dtype, base, kwargs):
    def make(lib):
        inner = (lib.sgd(kwargs["learning_rate"]) if base == "sgd"
                 else lib.adam(kwargs["learning_rate"], b1=0.0))
        return lib.contrib.schedule_free(inner, **kwargs) if lib is optax else (
            _schedule_free.schedule_free(inner, **kwargs))

    state = _compare_with_eval_params(make(ox), lambda: make(optax), dtype)
    assert state.step_count.dtype == torch.int32 and int(state.step_count) == 7


def test_schedule_free_with_schedule_matches_optax():
    ours = _schedule_free.schedule_free(ox.sgd(ox.linear_schedule(0.0, 0.2, 3)),
                                        ox.linear_schedule(0.0, 0.2, 3))
    _compare_with_eval_params(ours, lambda: optax.contrib.schedule_free(
        optax.sgd(optax.linear_schedule(0.0, 0.2, 3)), optax.linear_schedule(0.0, 0.2, 3)),
        torch.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kwargs", [
    {}, {"learning_rate": 0.1, "warmup_steps": 3, "weight_decay": 0.1, "b1": 0.8},
], ids=["default", "warmup_decay"])
def test_schedule_free_sgd_matches_optax(dtype, kwargs):
    _compare_with_eval_params(_schedule_free.schedule_free_sgd(**kwargs),
                              lambda: optax.contrib.schedule_free_sgd(**kwargs), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kwargs", [
    {}, {"learning_rate": 0.05, "warmup_steps": 3, "weight_decay": 0.1, "b2": 0.9,
         "eps": 1e-3, "weight_lr_power": 1.5},
], ids=["default", "warmup_decay"])
def test_schedule_free_adamw_matches_optax(dtype, kwargs):
    _compare_with_eval_params(_schedule_free.schedule_free_adamw(**kwargs),
                              lambda: optax.contrib.schedule_free_adamw(**kwargs), dtype)


def test_state_dtype_keeps_z_in_that_dtype_and_matches_optax():
    import jax.numpy as jnp

    state = _compare_with_eval_params(
        _schedule_free.schedule_free_sgd(0.1, state_dtype=torch.float32),
        lambda: optax.contrib.schedule_free_sgd(0.1, state_dtype=jnp.float32), torch.float64)
    assert state.z["layer"]["w"].dtype == torch.float32


def test_schedule_free_is_pure_and_z_does_not_alias_params():
    tx = _schedule_free.schedule_free_adamw(0.1)
    params, grads = make_tree(), make_tree(seed=1)
    state = tx.init(params)
    assert state.z["layer"]["w"].data_ptr() != params["layer"]["w"].data_ptr()
    copies = [torch.clone(params["layer"]["w"]), torch.clone(grads["layer"]["w"]),
              torch.clone(state.z["layer"]["w"])]
    tx.update(grads, state, params)
    assert torch.equal(params["layer"]["w"], copies[0])
    assert torch.equal(grads["layer"]["w"], copies[1])
    assert torch.equal(state.z["layer"]["w"], copies[2])
    with pytest.raises(ValueError, match="params"):
        tx.update(grads, state)


def test_eval_params_needs_a_schedule_free_state():
    with pytest.raises(ValueError, match="ScheduleFreeState"):
        _schedule_free.schedule_free_eval_params(
            _schedule_free.ScheduleFreeState(None, None, None, None, None, None), make_tree())


def test_b1_zero_on_a_zero_scalar_is_nan_as_in_optax():
    """``b1 = 0`` (a draw the property tests leave out, as Optax divides by ``b1``) on a 0-d
    zero parameter: ``x = (y - (1 - b1) z) / b1`` is ``0 / 0``, NaN updates in Optax as here."""
    params = {"a": torch.zeros(())}
    grads = [{"a": torch.tensor(0.5)}, {"a": torch.tensor(-1.0)}]
    ours_tx, theirs_tx = (lib.contrib.schedule_free_sgd(0.1, b1=0.0) for lib in (ox, optax))
    ours_state, theirs_state = ours_tx.init(params), theirs_tx.init(to_jax(params))
    for grad in grads:
        ours, ours_state = ours_tx.update(grad, ours_state, params)
        theirs, theirs_state = theirs_tx.update(to_jax(grad), theirs_state, to_jax(params))
        assert bool(torch.isnan(torch.from_numpy(np.asarray(theirs["a"])))), "Optax's update"
        assert_leaves_close(ours, theirs)
        assert_leaves_close(ours_state, theirs_state)
