"""freeze, selective_transform, flatten, snapshot, monitor, measure_with_ema, apply_every."""

import optax
import pytest
import torch

import optax_compat as ox
from optax_compat._src import tree_math
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


@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES[:2])
def test_flatten_matches_optax_and_the_unflattened_transform(case, dtype):
    ours, theirs = INNER_CASES[case]
    compare_with_optax(ox.flatten(ours()), lambda: jitted(optax.flatten(theirs())), dtype,
                       steps=3)
    params = make_tree(dtype)
    grads = make_tree(dtype, seed=1)
    flat_tx, tx = ox.flatten(ours()), ours()
    flat_updates, _ = flat_tx.update(grads, flat_tx.init(params), params)
    updates, _ = tx.update(grads, tx.init(params), params)
    ox.testing.assert_trees_all_close(flat_updates, updates, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_snapshot_and_monitor_match_optax(dtype):
    def measures(lib):
        return {"norm": lib.tree.norm,
                "norm_ema": lib.measure_with_ema(lib.tree.norm, decay=0.8),
                "max_ema": lib.measure_with_ema(lib.tree.max, decay=0.5, debias=False)}

    ours_state, _ = compare_with_optax(
        ox.chain(ox.trace(0.9), ox.snapshot("before_clip", ox.tree.norm), ox.monitor(measures(ox)),
                 ox.clip_by_global_norm(1.0)),
        lambda: jitted(optax.chain(optax.trace(0.9), optax.snapshot("before_clip", optax.tree.norm),
                                   optax.monitor(measures(optax)),
                                   optax.clip_by_global_norm(1.0))),
        dtype, steps=4)
    monitor_state = ours_state[2]
    assert set(monitor_state.measurements) == {"norm", "norm_ema", "max_ema"}
    assert float(ours_state[1].measurement["before_clip"]) == pytest.approx(
        float(monitor_state.measurements["norm"]))


@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES[:2])
def test_apply_every_matches_optax(case, dtype):
    ours, theirs = INNER_CASES[case]
    compare_with_optax(ox.chain(ours(), ox.apply_every(3)),
                       lambda: jitted(optax.chain(theirs(), optax.apply_every(3))), dtype,
                       steps=7)
