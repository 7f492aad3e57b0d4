"""freeze and selective_transform (``transforms/_freezing.py``) against real Optax."""

import optax
import pytest
import torch

import optax_compat as ox
from optax_compat._runtime import tree_math
from optax_compat.testing import compare_with_optax, make_tree
from tests.optax_compat.combinator_cases import CASES_AND_DTYPES, INNER_CASES, jitted

FREEZE = {"bias": True, "layer": {"w": False, "b": True}, "pair": False, "empty": None}


@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES[:2])
def test_freeze_then_optimise_matches_optax(case, dtype):
    ours, theirs = INNER_CASES[case]
    compare_with_optax(ox.chain(ox.freeze(FREEZE), ours()),
                       lambda: jitted(optax.chain(optax.freeze(FREEZE), theirs())), dtype,
                       steps=3)


@pytest.mark.parametrize("frozen", [True, False])
def test_freeze_with_a_single_boolean(frozen):
    params = make_tree()
    tx = ox.freeze(frozen)
    updates, _ = tx.update(make_tree(seed=1), tx.init(params), params)
    expected = tree_math.tree_map(torch.zeros_like, params) if frozen else make_tree(seed=1)
    ox.testing.assert_trees_all_close(updates, expected, rtol=0, atol=0)


@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES[:2])
def test_selective_transform_matches_optax_and_keeps_no_state_for_frozen_leaves(case, dtype):
    ours, theirs = INNER_CASES[case]
    ours_state, _ = compare_with_optax(
        ox.selective_transform(ours(), freeze_mask=FREEZE),
        lambda: jitted(optax.selective_transform(theirs(), freeze_mask=FREEZE)), dtype,
        steps=3)
    trained = ours_state.inner_states["train"].inner_state
    nodes = tree_math.leaves(tree_math.tree_map(
        lambda x: isinstance(x, ox.MaskedNode), trained,
        is_leaf=lambda x: isinstance(x, ox.MaskedNode)))
    assert any(nodes), "the optimizer keeps state for frozen leaves"
