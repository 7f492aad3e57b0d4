"""keep_params_nonnegative and zero_nans against real Optax."""

import math

import optax
import pytest
import torch

import optax_compat as ox
from optax_compat.testing import compare_with_optax, jit_optax, make_tree

DTYPES = [torch.float32, torch.float64]
tm = ox.tree_utils._tree_math.tm


@pytest.mark.parametrize("dtype", DTYPES)
def test_keep_params_nonnegative_matches_optax(dtype):
    params = tm.tree_map(lambda p: p.abs() * 0.3, make_tree(dtype, 0))
    compare_with_optax(ox.keep_params_nonnegative(),
                       lambda: jit_optax(optax.keep_params_nonnegative()), dtype, params=params)


def test_keep_params_nonnegative_lands_on_zero_and_keeps_other_updates():
    params = {"w": torch.tensor([1.0, 0.5, 2.0])}
    updates, _ = ox.keep_params_nonnegative().update({"w": torch.tensor([-3.0, 0.1, -2.0])},
                                                     ox.EmptyState(), params)
    assert torch.equal(updates["w"], torch.tensor([-1.0, 0.1, -2.0]))
    assert torch.equal(ox.apply_updates(params, updates)["w"], torch.tensor([0.0, 0.6, 0.0]))


def test_keep_params_nonnegative_needs_params_and_matching_structure():
    tx = ox.keep_params_nonnegative()
    with pytest.raises(ValueError, match="keep_params_nonnegative"):
        tx.update(make_tree(), tx.init(make_tree()))
    with pytest.raises(ValueError, match=r"key 'b'|key 'c'"):
        tx.update({"a": torch.ones(1), "b": torch.ones(1)}, ox.EmptyState(),
                  {"a": torch.ones(1), "c": torch.ones(1)})


def with_nans(tree, every):
    def poison(x):
        flat = x.clone().reshape(-1)
        flat[::every] = math.nan
        return flat.reshape(x.shape)

    return tm.tree_map(poison, tree)


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_nans_matches_optax(dtype):
    grads = [make_tree(dtype, 1), with_nans(make_tree(dtype, 2), 3),
             {**make_tree(dtype, 3), "layer": with_nans(make_tree(dtype, 3)["layer"], 2)},
             make_tree(dtype, 4), with_nans(make_tree(dtype, 5), 1)]
    ours, _ = compare_with_optax(ox.zero_nans(), lambda: jit_optax(optax.zero_nans()), dtype,
                                 grads=grads)
    assert all(flag.dtype == torch.bool and bool(flag) for flag in tm.leaves(ours))


def test_zero_nans_is_pure_and_differentiable():
    grad = torch.tensor([1.0, math.nan, 3.0], dtype=torch.float64, requires_grad=True)
    cleaned, state = ox.zero_nans().update({"g": grad}, ox.zero_nans().init({"g": grad}))
    assert torch.isnan(grad[1]) and bool(state.found_nan["g"])
    (gradient,) = torch.autograd.grad(cleaned["g"].sum(), grad)
    assert torch.equal(gradient, torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64))
