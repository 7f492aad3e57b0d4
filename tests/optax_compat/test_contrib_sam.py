"""sam and normalize against real Optax, in transparent and opaque modes."""

import jax
import jax.numpy as jnp
import optax
import pytest
import torch

import optax_compat as ox
from optax_compat.contrib import _sam
from optax_compat.testing import (
    assert_leaves_close,
    assert_same_state_types,
    compare_with_optax,
    jax_precision,
    jit_optax,
    make_tree,
    to_jax,
)


def _adversary(lib, name, normalize):
    inner = lib.sgd(0.05) if name == "sgd" else lib.adam(0.02)
    return lib.chain(normalize(), inner)


CASES = [
    ("sgd", 2, True, torch.float32),
    ("sgd", 3, False, torch.float64),
    ("adam", 3, True, torch.float32),
    ("adam", 2, False, torch.float64),
]
IDS = ["sgd_2", "sgd_3_keep", "adam_3", "adam_2_keep"]


@pytest.mark.parametrize(("adversary", "sync_period", "reset_state", "dtype"), CASES, ids=IDS)
def test_transparent_sam_matches_optax(adversary, sync_period, reset_state, dtype):
    ours = _sam.sam(ox.adam(0.1), _adversary(ox, adversary, _sam.normalize),
                    sync_period=sync_period, reset_state=reset_state)
    state, _ = compare_with_optax(ours, lambda: jit_optax(optax.contrib.sam(
        optax.adam(0.1), _adversary(optax, adversary, optax.contrib.normalize),
        sync_period=sync_period, reset_state=reset_state)), dtype, steps=7)
    assert state.steps_since_sync.dtype == torch.int32
    assert int(state.steps_since_sync) == 7 % sync_period


TARGET = [1.0, -1.0, 0.5]


def _torch_grad(params, step):
    del step
    target = torch.tensor(TARGET, dtype=params["x"].dtype)
    return {"x": 2 * (params["x"] - target) + torch.sin(params["x"])}


def _jax_grad(params, step):
    del step
    target = jnp.asarray(TARGET, dtype=params["x"].dtype)
    return {"x": 2 * (params["x"] - target) + jnp.sin(params["x"])}


@pytest.mark.parametrize(("adversary", "sync_period", "reset_state", "dtype"), CASES, ids=IDS)
def test_opaque_sam_matches_optax(adversary, sync_period, reset_state, dtype):
    ours_tx = _sam.sam(ox.sgd(0.1), _adversary(ox, adversary, _sam.normalize),
                       sync_period=sync_period, reset_state=reset_state, opaque_mode=True)
    params = {"x": torch.tensor([-1.0, 10.0, 1.0], dtype=dtype)}
    with jax_precision(dtype):
        theirs_tx = optax.contrib.sam(
            optax.sgd(0.1), _adversary(optax, adversary, optax.contrib.normalize),
            sync_period=sync_period, reset_state=reset_state, opaque_mode=True)
        theirs_update = jax.jit(lambda g, s, p: theirs_tx.update(g, s, p, grad_fn=_jax_grad))
        theirs_params = to_jax(params)
        ours_state, theirs_state = ours_tx.init(params), theirs_tx.init(theirs_params)
        assert ours_state.cache is None
        for step in range(5):
            ours_updates, ours_state = ours_tx.update(_torch_grad(params, 0), ours_state,
                                                      params, grad_fn=_torch_grad)
            theirs_updates, theirs_state = theirs_update(_jax_grad(theirs_params, 0),
                                                         theirs_state, theirs_params)
            assert_leaves_close(ours_updates, theirs_updates, what=f"updates step {step}")
            assert_leaves_close(ours_state, theirs_state, what=f"state step {step}")
            assert_same_state_types(ours_state, theirs_state)
            params = ox.apply_updates(params, ours_updates)
            theirs_params = optax.apply_updates(theirs_params, theirs_updates)


def test_normalize_matches_optax():
    compare_with_optax(_sam.normalize(), lambda: jit_optax(optax.contrib.normalize()),
                       torch.float64, steps=2)


def test_sam_is_pure_and_checks_its_arguments():
    tx = _sam.sam(ox.sgd(0.1), ox.chain(_sam.normalize(), ox.sgd(0.05)))
    params, grads = make_tree(), make_tree(seed=1)
    state = tx.init(params)
    assert state.cache["layer"]["w"].data_ptr() != params["layer"]["w"].data_ptr()
    copies = [torch.clone(params["layer"]["w"]), torch.clone(grads["layer"]["w"])]
    tx.update(grads, state, params)
    assert torch.equal(params["layer"]["w"], copies[0])
    assert torch.equal(grads["layer"]["w"], copies[1])
    with pytest.raises(ValueError, match="Synchronization period"):
        _sam.sam(ox.sgd(0.1), ox.sgd(0.1), sync_period=0)
    with pytest.raises(ValueError, match="pmap"):
        _sam.sam(ox.sgd(0.1), ox.sgd(0.1), opaque_mode=True, batch_axis_name="batch")
    opaque = _sam.sam(ox.sgd(0.1), ox.sgd(0.1), opaque_mode=True)
    with pytest.raises(ValueError, match="grad_fn"):
        opaque.update(grads, opaque.init(params), params)
