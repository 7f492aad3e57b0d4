"""optax_compat.experimental.aggregating: against real Optax, step by step, plus errors."""

import inspect

import numpy as np
import optax
import optax.experimental
import pytest
import torch

import optax_compat as ox
from optax_compat._runtime import tree_math
from optax_compat.experimental import aggregating
from optax_compat.testing import (
    assert_leaves_close,
    compare_with_optax,
    jax_precision,
    jit_optax,
    make_tree,
)

theirs_aggregating = optax.experimental.aggregating
DTYPES = [torch.float32, torch.float64]
PUBLIC_NAMES = [
    "accumulate_avg_updates", "AccumulateAvgUpdatesState", "add_mean_variance_to_opt",
    "AggregatedUpdates", "Aggregator", "AggregatorUpdateFn", "average_incrementally_updates",
    "average_per_element_updates", "get_batch_size_from_per_elt_updates",
    "get_per_element_mean_and_sum_sq_diff_grads", "get_unbiased_mean_and_variance_ema",
    "MaybeAxis", "PerElementMeanAndSumSqDiffGradsState", "PerElementMeanAndVarianceEMAState",
    "PerElementUpdates", "process", "track_per_element_mean_and_variance_with_ema",
]


def per_element_tree(dtype, seed, batch_shape=(4,)):
    """A tree like :func:`make_tree` whose leaves have ``batch_shape`` in front."""
    generator = torch.Generator().manual_seed(seed)
    return tree_math.tree_map(
        lambda x: torch.randn((*batch_shape, *x.shape), generator=generator, dtype=x.dtype),
        make_tree(dtype, seed))


def per_element_grads(dtype, steps, batch_shape=(4,)):
    return [per_element_tree(dtype, seed=step + 1, batch_shape=batch_shape)
            for step in range(steps)]


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_public_names_and_signatures_match_optax(name):
    ours, theirs = getattr(aggregating, name), getattr(theirs_aggregating, name)
    if inspect.isfunction(theirs):
        ours_params = inspect.signature(ours).parameters
        theirs_params = inspect.signature(theirs).parameters
        assert [(p.name, p.kind) for p in ours_params.values()] == [
            (p.name, p.kind) for p in theirs_params.values()]
        for p in theirs_params.values():
            if isinstance(p.default, (int, float, bool, type(None), tuple)):
                assert ours_params[p.name].default == p.default, p.name
    if hasattr(theirs, "_fields"):
        assert ours._fields == theirs._fields
    if name in ("PerElementUpdates", "AggregatedUpdates"):
        assert ours is ox.Updates


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("per_elt_axis", [0, (0, 1)])
def test_average_per_element_updates_matches_optax(dtype, per_elt_axis):
    batch_shape = (3,) if per_elt_axis == 0 else (2, 3)
    compare_with_optax(
        aggregating.average_per_element_updates(per_elt_axis),
        lambda: theirs_aggregating.average_per_element_updates(per_elt_axis),
        dtype, steps=2, grads=per_element_grads(dtype, 2, batch_shape))


@pytest.mark.parametrize("dtype", DTYPES)
def test_accumulate_avg_updates_matches_optax(dtype):
    compare_with_optax(aggregating.accumulate_avg_updates(3),
                       lambda: jit_optax(theirs_aggregating.accumulate_avg_updates(3)),
                       dtype, steps=7)


def test_accumulate_avg_updates_state_dtypes_and_single_step_identity():
    state = aggregating.accumulate_avg_updates(2).init(make_tree())
    assert state.micro_step.dtype == torch.int32 and state.ready.dtype == torch.bool
    identity = aggregating.accumulate_avg_updates(1)
    grads = make_tree(seed=3)
    updates, _ = identity.update(grads, identity.init(make_tree()))
    assert updates is grads
    with pytest.raises(ValueError, match="accumulation_steps"):
        aggregating.accumulate_avg_updates(0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("per_elt_axis", "accumulation_steps"), [(0, 1), (0, 2), (None, 2)])
def test_process_average_incrementally_matches_optax(dtype, per_elt_axis, accumulation_steps):
    def build(lib, aggregating_module):
        return aggregating_module.process(
            lib.clip_by_global_norm(2.0) if per_elt_axis is None else lib.identity(),
            aggregating_module.average_incrementally_updates(per_elt_axis, accumulation_steps),
            lib.adam(0.1))

    grads = (per_element_grads(dtype, 5) if per_elt_axis is not None
             else [make_tree(dtype, seed=s + 1) for s in range(5)])
    ours = build(ox, aggregating)
    expected_type = (aggregating.Aggregator if per_elt_axis is not None
                     else ox.GradientTransformationExtraArgs)
    assert isinstance(ours, expected_type)
    compare_with_optax(ours, lambda: jit_optax(build(optax, theirs_aggregating)), dtype,
                       steps=5, grads=grads)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("accumulation_steps", [1, 3])
def test_mean_and_sum_sq_diff_aggregator_matches_optax(dtype, accumulation_steps):
    batch_shape = (2, 3)
    compare_with_optax(
        aggregating.get_per_element_mean_and_sum_sq_diff_grads((0, 1), accumulation_steps),
        lambda: jit_optax(theirs_aggregating.get_per_element_mean_and_sum_sq_diff_grads(
            (0, 1), accumulation_steps)),
        dtype, steps=4, apply=False, grads=per_element_grads(dtype, 4, batch_shape))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("ema_decay", "accumulation_steps"), [(0.0, 1), (0.9, 1), (0.9, 2)])
def test_add_mean_variance_to_opt_matches_optax_with_unbiased_statistics(
        dtype, ema_decay, accumulation_steps):
    steps = 4
    grads = per_element_grads(dtype, steps)
    params = make_tree(dtype)
    ours = aggregating.add_mean_variance_to_opt(ox.sgd(0.1), ema_decay,
                                                accumulation_steps=accumulation_steps)
    assert isinstance(ours, aggregating.Aggregator)
    ours_state, theirs_state = compare_with_optax(
        ours,
        lambda: jit_optax(theirs_aggregating.add_mean_variance_to_opt(
            optax.sgd(0.1), ema_decay, accumulation_steps=accumulation_steps)),
        dtype, steps=steps, grads=grads, params=params)
    with jax_precision(dtype):
        assert_leaves_close(aggregating.get_unbiased_mean_and_variance_ema(ours_state),
                            theirs_aggregating.get_unbiased_mean_and_variance_ema(theirs_state))


@pytest.mark.parametrize("dtype", DTYPES)
def test_mean_and_variance_are_the_batch_statistics(dtype):
    # With ema_decay=0 the debiased averages are the last batch's mean and unbiased variance,
    # and accumulating two half batches gives the statistics of the whole batch.
    grads = per_element_tree(dtype, seed=5, batch_shape=(6,))
    params = make_tree(dtype)
    whole = aggregating.add_mean_variance_to_opt(ox.sgd(0.1), 0.0)
    _, state = whole.update(grads, whole.init(params), params)
    mean, variance = aggregating.get_unbiased_mean_and_variance_ema(state)
    expected_mean = tree_math.tree_map(lambda g: g.mean(0), grads)
    expected_variance = tree_math.tree_map(lambda g: g.var(0, correction=1), grads)
    assert_leaves_close(mean, expected_mean)
    assert_leaves_close(variance, expected_variance)

    halves = aggregating.add_mean_variance_to_opt(ox.sgd(0.1), 0.0, accumulation_steps=2)
    state = halves.init(params)
    for half in (slice(0, 3), slice(3, 6)):
        _, state = halves.update(tree_math.tree_map(lambda g, h=half: g[h], grads), state,
                                 params)
    accumulated_mean, accumulated_variance = aggregating.get_unbiased_mean_and_variance_ema(
        state)
    assert_leaves_close(accumulated_mean, expected_mean)
    # Optax computes ``1 / (sample_size - 1)`` from an int32 sample size, in float32 even in
    # 64-bit mode (the comparison with Optax above checks that we do the same).
    assert_leaves_close(accumulated_variance, expected_variance, rtol=1e-6)


def test_process_keeps_the_postprocessor_state_until_ready_without_host_sync():
    opt = aggregating.process(ox.identity(), aggregating.average_incrementally_updates(0, 3),
                              ox.adam(0.1))
    params = make_tree()
    state = opt.init(params)
    for step, grads in enumerate(per_element_grads(torch.float32, 3)):
        updates, state = opt.update(grads, state, params)
        adam_count = state[2][0].count
        assert int(adam_count) == (1 if step == 2 else 0)
        is_zero = all(bool((u == 0).all()) for u in tree_math.leaves(updates))
        assert is_zero == (step < 2)


def test_updates_are_differentiable_through_aggregation():
    # Meta-gradient of the aggregated step with respect to the per-element gradients.
    grads = per_element_tree(torch.float64, seed=2)
    grads = tree_math.tree_map(lambda x: x.clone().requires_grad_(), grads)
    opt = aggregating.add_mean_variance_to_opt(ox.sgd(0.5), 0.5)
    params = make_tree(torch.float64)
    updates, state = opt.update(grads, opt.init(params), params)
    _, variance = aggregating.get_unbiased_mean_and_variance_ema(state)
    loss = sum(u.sum() for u in tree_math.leaves(updates)) + sum(
        v.sum() for v in tree_math.leaves(variance))
    loss.backward()
    w = grads["layer"]["w"]
    n = w.shape[0]
    # d/dg_i of -0.5 * mean(g) + var(g) (unbiased, per coordinate).
    expected = -0.5 / n + 2 * (w.detach() - w.detach().mean(0)) / (n - 1)
    np.testing.assert_allclose(w.grad.numpy(), expected.numpy(), rtol=1e-10)


def test_errors():
    updates = {"a": torch.zeros(3, 2), "b": torch.zeros(4)}
    with pytest.raises(ValueError, match="same batch size"):
        aggregating.get_batch_size_from_per_elt_updates(updates, 0)
    assert aggregating.get_batch_size_from_per_elt_updates({"a": torch.zeros(3, 2, 5)},
                                                           [0, 1]) == 6
    with pytest.raises(ValueError, match="PerElementMeanAndVarianceEMAState"):
        aggregating.get_unbiased_mean_and_variance_ema(ox.adam(0.1).init(make_tree()))
    opt = aggregating.accumulate_avg_updates(2)
    with pytest.raises(ValueError, match="avg_grad"):
        opt.update({"x": torch.zeros(2)}, opt.init(make_tree()))


def test_experimental_module_exposes_aggregating_like_optax():
    import optax_compat.experimental as ours_experimental

    assert ours_experimental.__all__ == optax.experimental.__all__ == ["aggregating"]
    assert ours_experimental.aggregating is aggregating
