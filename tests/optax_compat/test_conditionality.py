"""apply_if_finite, conditionally_mask, conditionally_transform against real Optax."""

import functools

import optax
import pytest
import torch

import optax_compat as ox
from optax_compat._runtime import tree_math
from optax_compat.testing import compare_with_optax, make_tree
from tests.optax_compat.combinator_cases import CASES_AND_DTYPES, INNER_CASES, jitted


def _grads_with_non_finite(dtype, steps, bad_steps):
    """Random gradients where the steps in ``bad_steps`` carry a NaN or an Inf."""
    grads = [make_tree(dtype, seed=step + 1) for step in range(steps)]
    for step in bad_steps:
        if step % 2:
            grads[step]["layer"]["w"][1, 2] = float("nan")
        else:
            grads[step]["pair"][0][0] = float("-inf") if step % 4 else float("inf")
    return grads


@pytest.fixture
def no_host_sync(monkeypatch):
    """Fails the test if a tensor is read on the host (``bool()``, ``.item()``)."""

    def refuse(self, *args):
        raise AssertionError("host sync in update")

    for name in ("__bool__", "item", "tolist"):
        monkeypatch.setattr(torch.Tensor, name, refuse)


@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES)
def test_apply_if_finite_skips_isolated_non_finite_updates_like_optax(case, dtype):
    ours, theirs = INNER_CASES[case]
    grads = _grads_with_non_finite(dtype, steps=8, bad_steps=[1, 2, 5])
    ours_state, _ = compare_with_optax(ox.apply_if_finite(ours(), 2),
                                       lambda: jitted(optax.apply_if_finite(theirs(), 2)), dtype,
                                       steps=8, grads=grads)
    assert int(ours_state.total_notfinite) == 3
    assert int(ours_state.notfinite_count) == 0
    assert bool(ours_state.last_finite)


@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES)
def test_apply_if_finite_gives_up_after_max_consecutive_errors_like_optax(case, dtype):
    ours, theirs = INNER_CASES[case]
    grads = _grads_with_non_finite(dtype, steps=7, bad_steps=[2, 3, 4, 5])
    ours_state, _ = compare_with_optax(ox.apply_if_finite(ours(), 2),
                                       lambda: jitted(optax.apply_if_finite(theirs(), 2)), dtype,
                                       steps=7, grads=grads, apply=False)
    assert int(ours_state.total_notfinite) == 4
    assert int(ours_state.notfinite_count) == 0


def test_apply_if_finite_does_not_read_tensors_on_the_host(no_host_sync):
    params = make_tree()
    tx = ox.apply_if_finite(ox.chain(ox.trace(0.9), ox.ema(0.5)), 1)
    state = tx.init(params)
    for grads in _grads_with_non_finite(torch.float32, steps=4, bad_steps=[1, 2]):
        _, state = tx.update(grads, state, params)
    assert isinstance(state.total_notfinite, torch.Tensor)


def test_apply_if_finite_keeps_the_inner_state_of_an_inplace_inner_transform():
    params = make_tree()
    grads = _grads_with_non_finite(torch.float32, steps=3, bad_steps=[1])
    tx = ox.apply_if_finite(ox.trace(0.9), 3)
    pure_state = inplace_state = tx.init(params)
    for grad in grads:
        pure_updates, pure_state = tx.update(grad, pure_state, params)
        inplace_updates, inplace_state = tx.update(tree_math.tree_map(torch.clone, grad),
                                                   inplace_state, params, inplace=True)
        ox.testing.assert_trees_all_close(inplace_updates, pure_updates, rtol=0, atol=0)
        ox.testing.assert_trees_all_close(inplace_state, pure_state, rtol=0, atol=0)


CONDITIONALS = [(ox.conditionally_mask, optax.conditionally_mask),
                (ox.conditionally_transform, optax.conditionally_transform)]


@pytest.mark.parametrize("wrappers", CONDITIONALS, ids=["mask", "transform"])
@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES[:2])
def test_conditional_wrappers_match_optax(wrappers, case, dtype):
    ours_wrapper, theirs_wrapper = wrappers
    ours, theirs = INNER_CASES[case]
    ours_state, _ = compare_with_optax(
        ours_wrapper(ours(), lambda step: step % 3 != 1),
        lambda: jitted(theirs_wrapper(theirs(), lambda step: step % 3 != 1)), dtype, steps=6)
    assert int(ours_state.step) == 6


@pytest.mark.parametrize("wrappers", CONDITIONALS, ids=["mask", "transform"])
def test_conditional_wrappers_forward_extra_args_to_the_condition(wrappers):
    ours_wrapper, theirs_wrapper = wrappers
    ours, theirs = INNER_CASES["trace_scale"]
    compare_with_optax(
        ours_wrapper(ours(), lambda step, limit: step < limit, forward_extra_args=True),
        lambda: jitted(theirs_wrapper(theirs(), lambda step, limit: step < limit,
                                      forward_extra_args=True)),
        steps=4, extra_args=lambda step: {"limit": torch.tensor(2, dtype=torch.int32)})


def test_conditionally_mask_with_a_static_condition_runs_one_branch():
    calls = []

    def counting_update(updates, state, params=None):
        calls.append(1)
        return updates, state

    inner = ox.GradientTransformation(ox.init_empty_state, counting_update)
    params = make_tree()
    tx = ox.conditionally_mask(inner, lambda step: False)
    updates, _ = tx.update(make_tree(seed=1), tx.init(params), params)
    assert not calls
    assert all(bool((leaf == 0).all()) for leaf in tree_math.leaves(updates))


def test_conditional_wrappers_do_not_read_tensors_on_the_host(no_host_sync):
    params = make_tree()
    for wrapper in (ox.conditionally_mask, ox.conditionally_transform):
        tx = wrapper(ox.trace(0.9), lambda step: step % 2 == 0)
        state = tx.init(params)
        for seed in range(3):
            _, state = tx.update(make_tree(seed=seed), state, params)


def test_selecting_wrappers_compile_to_one_graph():
    inner = ox.apply_if_finite(ox.chain(ox.scale_by_adam(), ox.scale(-0.1)), 2)
    skip = functools.partial(ox.skip_large_updates, max_squared_norm=1e4)
    tx = ox.MultiSteps(inner, 3, should_skip_update_fn=skip).gradient_transformation()
    grads = _grads_with_non_finite(torch.float32, steps=2, bad_steps=[1])[1]
    ox.testing.check_compilable(tx, make_tree(), grads, backend="eager")
