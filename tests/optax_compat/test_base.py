"""Base types and stateless constructors against real Optax."""

import optax
import pytest
import torch

import optax_compat as ox
from optax_compat.testing import compare_with_optax, make_tree

DTYPES = [torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["identity", "set_to_zero"])
def test_stateless_constructors_match_optax(name, dtype):
    compare_with_optax(getattr(ox, name)(), lambda: getattr(optax, name)(), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_stateless_matches_optax(dtype):
    ours = ox.stateless(lambda u, p: ox.tree.add_scale(u, 0.5, p))
    compare_with_optax(ours, lambda: optax.stateless(
        lambda u, p: optax.tree.add_scale(u, 0.5, p)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_stateless_with_tree_map_matches_optax(dtype):
    ours = ox.stateless_with_tree_map(lambda g, p: g * 2 - p)
    compare_with_optax(ours, lambda: optax.stateless_with_tree_map(lambda g, p: g * 2 - p),
                       dtype)


def test_stateless_with_tree_map_without_params_passes_none():
    seen = []
    tx = ox.stateless_with_tree_map(lambda g, p: seen.append(p) or -g)
    updates, state = tx.update({"a": torch.ones(2)}, tx.init(None))
    assert seen == [None]
    assert torch.equal(updates["a"], -torch.ones(2))
    assert state == ox.EmptyState()


def test_with_extra_args_support_drops_extra_args_and_keeps_extra_args_transforms():
    tx = ox.with_extra_args_support(ox.identity())
    assert isinstance(tx, ox.GradientTransformationExtraArgs)
    updates, _ = tx.update(make_tree(), tx.init(None), None, loss=1.0)
    assert ox.tree.allclose(updates, make_tree())
    assert ox.with_extra_args_support(tx) is tx


def test_types_and_states():
    assert ox.GradientTransformation._fields == ("init", "update")
    assert issubclass(ox.GradientTransformationExtraArgs, ox.GradientTransformation)
    assert ox.init_empty_state({"a": torch.ones(1)}) == ox.EmptyState()
    assert isinstance(ox.schedules.StatefulSchedule, type)


def test_updates_are_new_tensors():
    params = make_tree()
    updates, _ = ox.set_to_zero().update(params, ox.EmptyState())
    assert updates["layer"]["w"] is not params["layer"]["w"]
    assert torch.count_nonzero(params["layer"]["w"]) > 0
