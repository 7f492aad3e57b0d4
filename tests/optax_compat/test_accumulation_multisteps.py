"""MultiSteps, skip_not_finite and skip_large_updates against real Optax."""

import functools

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


def _multi_steps_pair(case, every_k, ours_kwargs=None, theirs_kwargs=None):
    ours, theirs = INNER_CASES[case]
    return (ox.MultiSteps(ours(), every_k, **(ours_kwargs or {})),
            lambda: optax.MultiSteps(theirs(), every_k, **(theirs_kwargs or {})))


def _growing_k(step):
    """2 mini-steps for the first two gradient steps, then 3 (a schedule of the step)."""
    return 2 + (step >= 2)


@pytest.mark.parametrize(("case", "dtype", "use_grad_mean"), [
    (case, dtype, mean) for (case, dtype), mean in zip(CASES_AND_DTYPES, [True, False, True])])
def test_multi_steps_k3_over_10_steps_matches_optax(case, dtype, use_grad_mean):
    kwargs = {"use_grad_mean": use_grad_mean}
    ours, theirs = _multi_steps_pair(case, 3, kwargs, kwargs)
    ours_state, _ = compare_with_optax(ours.gradient_transformation(),
                                       lambda: jitted(theirs().gradient_transformation()),
                                       dtype, steps=10)
    assert int(ours_state.gradient_step) == 3
    assert int(ours_state.mini_step) == 1


@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES[:2])
def test_multi_steps_with_a_schedule_matches_optax(case, dtype):
    ours, theirs = _multi_steps_pair(case, _growing_k)
    ours_state, _ = compare_with_optax(ours.gradient_transformation(),
                                       lambda: jitted(theirs().gradient_transformation()),
                                       dtype, steps=10)
    # 2 + 2 + 3 + 3 = 10 mini-steps make 4 gradient steps.
    assert int(ours_state.gradient_step) == 4


@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES[:2])
def test_multi_steps_skips_non_finite_mini_steps_like_optax(case, dtype):
    grads = [make_tree(dtype, seed=step + 1) for step in range(9)]
    grads[2]["layer"]["w"][0, 0] = float("nan")
    grads[4]["bias"] = torch.tensor(float("inf"), dtype=dtype)
    ours, theirs = _multi_steps_pair(case, 3,
                                     {"should_skip_update_fn": ox.skip_not_finite},
                                     {"should_skip_update_fn": optax.skip_not_finite})
    ours_state, _ = compare_with_optax(ours.gradient_transformation(),
                                       lambda: jitted(theirs().gradient_transformation()),
                                       dtype, steps=9, grads=grads)
    assert int(ours_state.skip_state["num_not_finite"]) == 0
    assert int(ours_state.gradient_step) == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_multi_steps_skips_large_updates_like_optax(dtype):
    grads = [make_tree(dtype, seed=step + 1, scale=3.0 if step in (1, 5) else 0.3)
             for step in range(8)]
    skip = functools.partial(ox.skip_large_updates, max_squared_norm=12.0)
    ours = ox.MultiSteps(INNER_CASES["trace_scale"][0](), 2, should_skip_update_fn=skip)
    ours_state, _ = compare_with_optax(
        ours.gradient_transformation(),
        lambda: jitted(optax.MultiSteps(
            INNER_CASES["trace_scale"][1](), 2,
            should_skip_update_fn=functools.partial(optax.skip_large_updates,
                                                    max_squared_norm=12.0)
        ).gradient_transformation()),
        dtype, steps=8, grads=grads)
    # Steps 1 and 5 are skipped: 6 accepted mini-steps make 3 gradient steps.
    assert int(ours_state.gradient_step) == 3


def test_has_updated_is_true_exactly_after_each_emitting_step():
    tx = ox.MultiSteps(ox.trace(0.9), every_k_schedule=3)
    params = make_tree()
    state = tx.init(params)
    flags = []
    for seed in range(7):
        _, state = tx.update(make_tree(seed=seed), state, params)
        flags.append(bool(tx.has_updated(state)))
    assert flags == [False, False, True, False, False, True, False]
    assert isinstance(tx.gradient_transformation(), ox.GradientTransformation)
    assert isinstance(tx.inner_opt, ox.GradientTransformationExtraArgs)


def test_multi_steps_forwards_extra_args_to_the_inner_optimizer():
    received = []

    def update_fn(updates, state, params=None, **extra_args):
        received.append(extra_args)
        return updates, state

    tx = ox.MultiSteps(ox.GradientTransformationExtraArgs(ox.init_empty_state, update_fn), 2)
    params = make_tree()
    tx.update(make_tree(seed=1), tx.init(params), params, value=torch.tensor(1.0))
    assert set(received[0]) == {"value"}


@pytest.mark.parametrize("every_k", [0, -3])
def test_every_k_schedule_below_one_fails_at_construction(every_k):
    with pytest.raises(ValueError, match="every_k_schedule"):
        ox.MultiSteps(ox.trace(0.9), every_k)


def test_every_k_schedule_of_a_wrong_type_fails_at_construction():
    with pytest.raises(TypeError, match="every_k_schedule"):
        ox.MultiSteps(ox.trace(0.9), 2.5)


def test_should_skip_update_fn_must_return_a_boolean_scalar():
    tx = ox.MultiSteps(ox.trace(0.9), 2,
                       should_skip_update_fn=lambda u, s, p: (torch.tensor(1.0), ()))
    params = make_tree()
    with pytest.raises(ValueError, match="boolean scalar"):
        tx.update(params, tx.init(params), params)


def test_acc_grads_mismatch_names_the_path():
    tx = ox.MultiSteps(ox.trace(0.9), 2)
    state = tx.init(make_tree())
    updates = make_tree()
    updates["layer"]["extra"] = torch.ones(2)
    with pytest.raises(ValueError, match="extra"):
        tx.update(updates, state)


@settings(max_examples=20)
@given(strategies.params_and_grads(steps=3), inner_transforms())
def test_multi_steps_of_one_is_the_transform(params_and_grads, t):
    params, grads = params_and_grads
    t = t.transformation
    params = tree_math.tree_map(lambda x: x.to(torch.float32), params)
    grads = [tree_math.tree_map(lambda x: x.to(torch.float32), g) for g in grads]
    # Up to rounding: like Optax, MultiSteps casts the new inner state to the dtypes of the
    # old one, which differ for inner states whose dtype changes at the first update.
    assert_same_runs(ox.MultiSteps(t, 1).gradient_transformation(), t, params, grads,
                     rtol=1e-6, atol=1e-7)
