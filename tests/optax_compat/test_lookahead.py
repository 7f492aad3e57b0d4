"""lookahead and LookaheadParams against real Optax."""

import logging

import optax
import pytest
import torch

import optax_compat as ox
from optax_compat.testing import assert_leaves_close, jax_precision, make_tree, to_jax
from tests.optax_compat.combinator_cases import CASES_AND_DTYPES, INNER_CASES, jitted


@pytest.mark.parametrize("reset_state", [False, True], ids=["keep", "reset"])
@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES[:2])
def test_lookahead_matches_optax_across_synchronisations(case, dtype, reset_state):
    ours_fast, theirs_fast = INNER_CASES[case]
    ours_tx = ox.lookahead(ours_fast(), sync_period=3, slow_step_size=0.4,
                           reset_state=reset_state)
    params = ox.LookaheadParams.init_synced(make_tree(dtype))
    with jax_precision(dtype):
        theirs_tx = jitted(optax.lookahead(theirs_fast(), sync_period=3, slow_step_size=0.4,
                                           reset_state=reset_state))
        theirs_params = optax.LookaheadParams.init_synced(to_jax(params.fast))
        ours_state, theirs_state = ours_tx.init(params), theirs_tx.init(theirs_params)
        assert_leaves_close(ours_state, theirs_state, what="init state")
        for step in range(8):
            grads = make_tree(dtype, seed=step + 1)
            ours_updates, ours_state = ours_tx.update(grads, ours_state, params)
            theirs_updates, theirs_state = theirs_tx.update(to_jax(grads), theirs_state,
                                                            theirs_params)
            assert type(ours_updates) is ox.LookaheadParams
            assert_leaves_close(ours_updates, theirs_updates, what=f"updates step {step}")
            assert_leaves_close(ours_state, theirs_state, what=f"state step {step}")
            params = ox.apply_updates(params, ours_updates)
            theirs_params = optax.apply_updates(theirs_params, theirs_updates)
            assert_leaves_close(params, theirs_params, what=f"params step {step}")
    # After 8 steps (synchronised at 3 and 6) the step counter is 8 mod 3.
    assert int(ours_state.steps_since_sync) == 2


def test_synchronisation_puts_fast_params_on_the_slow_ones():
    tx = ox.lookahead(ox.chain(ox.trace(0.0), ox.scale(-0.5)), sync_period=2,
                      slow_step_size=0.5)
    params = ox.LookaheadParams.init_synced(make_tree())
    state = tx.init(params)
    for seed in range(2):
        updates, state = tx.update(make_tree(seed=seed + 1), state, params)
        params = ox.apply_updates(params, updates)
    ox.testing.assert_trees_all_close(params.fast, params.slow, rtol=1e-6, atol=1e-6)


def test_init_with_plain_params_warns_and_uses_them_as_fast(caplog):
    with caplog.at_level(logging.WARNING):
        state = ox.lookahead(ox.trace(0.9), 2, 0.5).init(make_tree())
    assert "no attribute `fast`" in caplog.text
    assert state.fast_state.trace["layer"]["w"].shape == (3, 4)


def test_sync_period_below_one_fails_at_construction():
    with pytest.raises(ValueError, match="Synchronization period"):
        ox.lookahead(ox.trace(0.9), 0, 0.5)


def test_update_without_params_says_so():
    tx = ox.lookahead(ox.trace(0.9), 2, 0.5)
    params = ox.LookaheadParams.init_synced(make_tree())
    with pytest.raises(ValueError, match="params"):
        tx.update(make_tree(), tx.init(params))


def test_lookahead_does_not_read_tensors_on_the_host(monkeypatch):
    tx = ox.lookahead(ox.trace(0.9), 2, 0.5, reset_state=True)
    params = ox.LookaheadParams.init_synced(make_tree())
    state = tx.init(params)

    def refuse(self, *args):
        raise AssertionError("host sync in update")

    monkeypatch.setattr(torch.Tensor, "__bool__", refuse)
    monkeypatch.setattr(torch.Tensor, "item", refuse)
    for seed in range(3):
        updates, state = tx.update(make_tree(seed=seed), state, params)
        params = ox.apply_updates(params, updates)
