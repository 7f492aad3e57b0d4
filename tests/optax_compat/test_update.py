"""apply_updates, incremental_update and periodic_update against real Optax."""

import numpy as np
import optax
import pytest
import torch

import optax_compat as ox
from optax_compat.testing import assert_leaves_close, jax_precision, make_tree, to_jax

DTYPES = [torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_apply_updates_matches_optax_and_keeps_param_dtype(dtype):
    params, updates = make_tree(dtype, 0), make_tree(torch.float64, 1)
    with jax_precision(dtype):
        theirs = optax.apply_updates(to_jax(params), to_jax(updates))
    ours = ox.apply_updates(params, updates)
    assert_leaves_close(ours, theirs)
    assert all(leaf.dtype == dtype for leaf in ox.tree_utils._tree_math.tm.leaves(ours))


def test_apply_updates_is_pure():
    params, updates = make_tree(seed=0), make_tree(seed=1)
    before = {k: v for k, v in ox.tree_utils._tree_math.tm.tree_map(torch.clone, params).items()}
    ox.apply_updates(params, updates)
    assert ox.tree.allclose(params, before, rtol=0, atol=0)


def test_apply_updates_mismatch_names_path():
    params = {"a": torch.ones(2), "b": {"c": torch.ones(1)}}
    with pytest.raises(ValueError, match=r"\['b'\]\['d'\]|\['b'\]\['c'\]"):
        ox.apply_updates(params, {"a": torch.ones(2), "b": {"d": torch.ones(1)}})


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("step_size", [0.1, 0.9])
def test_incremental_update_matches_optax(dtype, step_size):
    new, old = make_tree(dtype, 0), make_tree(dtype, 1)
    with jax_precision(dtype):
        theirs = optax.incremental_update(to_jax(new), to_jax(old), step_size)
    assert_leaves_close(ox.incremental_update(new, old, step_size), theirs)


@pytest.mark.parametrize("steps", [0, 3, 4, 8])
def test_periodic_update_matches_optax(steps):
    new, old = make_tree(seed=0), make_tree(seed=1)
    theirs = optax.periodic_update(to_jax(new), to_jax(old), np.int32(steps), 4)
    ours = ox.periodic_update(new, old, torch.tensor(steps, dtype=torch.int32), 4)
    assert_leaves_close(ours, theirs)
