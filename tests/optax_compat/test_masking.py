"""masked and MaskedNode: against real Optax, laws, extra-args masking, errors."""

import jax
import optax
import pytest
import torch
from hypothesis import given, settings

import optax_compat as ox
from optax_compat._runtime import tree_math
from optax_compat.testing import compare_with_optax, make_tree, strategies
from tests.optax_compat.combinator_cases import (
    CASES_AND_DTYPES,
    INNER_CASES,
    assert_same_runs,
    inner_transforms,
    jitted,
)

DTYPES = [torch.float32, torch.float64]
FULL_MASK = {"bias": True, "layer": {"w": False, "b": True}, "pair": (False, True), "empty": None}
PREFIX_MASK = {"bias": False, "layer": True, "pair": False, "empty": None}


@pytest.mark.parametrize("mask", [FULL_MASK, PREFIX_MASK], ids=["full", "prefix"])
@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES)
def test_masked_with_a_mask_tree_matches_optax(case, mask, dtype):
    ours, theirs = INNER_CASES[case]
    compare_with_optax(ox.masked(ours(), mask), lambda: jitted(optax.masked(theirs(), mask)),
                       dtype, steps=4)


@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES)
def test_masked_with_a_callable_on_ndim_matches_optax(case, dtype):
    ours, theirs = INNER_CASES[case]
    compare_with_optax(
        ox.masked(ours(), lambda p: tree_math.tree_map(lambda x: x.ndim != 1, p)),
        lambda: jitted(optax.masked(theirs(),
                                    lambda p: jax.tree.map(lambda x: x.ndim != 1, p))),
        dtype, steps=4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nested_masks_match_optax(dtype):
    outer = {"bias": True, "layer": True, "pair": False, "empty": None}
    inner = {"bias": False, "layer": {"w": True, "b": False}, "pair": True, "empty": None}
    ours, theirs = INNER_CASES["trace_scale"]
    compare_with_optax(
        ox.chain(ox.masked(ox.masked(ours(), inner), outer), ox.ema(0.5)),
        lambda: jitted(optax.chain(optax.masked(optax.masked(theirs(), inner), outer),
                                   optax.ema(0.5))),
        dtype, steps=4)


def test_inner_state_only_holds_masked_in_leaves():
    state = ox.masked(ox.trace(0.9), PREFIX_MASK).init(make_tree())
    trace = state.inner_state.trace
    assert isinstance(trace["bias"], ox.MaskedNode)
    assert isinstance(trace["pair"], ox.MaskedNode)
    assert trace["layer"]["w"].shape == (3, 4)
    assert tree_math.leaves(ox.MaskedNode()) == []


def test_mask_compatible_extra_args_masks_params_shaped_extra_args():
    received = []

    def update_fn(updates, state, params=None, **extra_args):
        received.append(extra_args)
        return updates, state

    recorder = ox.GradientTransformationExtraArgs(ox.init_empty_state, update_fn)
    params = make_tree()
    tags = tree_math.tree_map(lambda x: x * 0, params)
    for compatible in (True, False):
        tx = ox.masked(recorder, PREFIX_MASK, mask_compatible_extra_args=compatible)
        tx.update(make_tree(seed=1), tx.init(params), params, tags=tags, value=1.0)
    masked_tags, plain_tags = received[0]["tags"], received[1]["tags"]
    assert isinstance(masked_tags["bias"], ox.MaskedNode)
    assert masked_tags["layer"]["w"] is tags["layer"]["w"]
    assert plain_tags is tags
    assert received[0]["value"] == 1.0


@pytest.mark.parametrize("mask", [
    {"bias": True, "layer": {"w": True}, "pair": True, "empty": None},
    {"bias": True, "layer": [True, True], "pair": True, "empty": None},
])
def test_mask_that_does_not_match_the_params_names_the_path(mask):
    tx = ox.masked(ox.trace(0.9), mask)
    with pytest.raises(ValueError, match=r"mask\['layer'\]"):
        tx.init(make_tree())
    with pytest.raises(ValueError, match=r"mask\['layer'\]"):
        tx.update(make_tree(), None, None)


def test_masked_is_pure():
    params, grads = make_tree(), make_tree(seed=1)
    before = tree_math.tree_map(torch.clone, grads)
    tx = ox.masked(ox.trace(0.9), FULL_MASK)
    tx.update(grads, tx.init(params), params)
    ox.testing.assert_trees_all_close(grads, before, rtol=0, atol=0)


LAW_SETTINGS = settings(max_examples=20)


@LAW_SETTINGS
@given(strategies.params_and_grads(steps=3), inner_transforms())
def test_masked_with_all_true_is_the_transform(params_and_grads, t):
    params, grads = params_and_grads
    t = t.transformation
    all_true = tree_math.tree_map(lambda _: True, params)
    assert_same_runs(ox.masked(t, all_true), t, params, grads, rtol=0, atol=0)


@LAW_SETTINGS
@given(strategies.params_and_grads(steps=3), inner_transforms())
def test_masked_with_all_false_is_identity(params_and_grads, t):
    params, grads = params_and_grads
    t = t.transformation
    all_false = tree_math.tree_map(lambda _: False, params)
    assert_same_runs(ox.masked(t, all_false), ox.identity(), params, grads, rtol=0, atol=0)
