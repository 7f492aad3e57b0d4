"""Gradient transformations that aggregate per-example gradients.

Mirrors ``optax/experimental/_aggregating.py``. An aggregator consumes per-element updates
(every leaf has batch axes in front of the parameter's shape) and returns one update shaped like
the parameters, possibly accumulated over several microbatches. Where Optax selects with
``lax.cond``/``tree.where`` this module selects with ``torch.where``, without a host sync.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional, Protocol, Union

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics
from optax_compat.transforms import _combining
from optax_compat.tree_utils import _state_utils

PerElementUpdates = base.ArrayTree
AggregatedUpdates = base.ArrayTree
MaybeAxis = Union[int, Sequence[int], None]


class AggregatorUpdateFn(Protocol):
    """Update function for aggregators."""

    def __call__(
        self,
        per_elt_updates: PerElementUpdates,
        state: base.OptState,
        params: Optional[base.Params] = None,
        **extra_args: Any,
    ) -> tuple[AggregatedUpdates, base.OptState]:
        """Transforms per-element updates into an aggregated update direction."""


class Aggregator(base.GradientTransformationExtraArgs):
    """A pair of pure functions that aggregate per-element gradients statefully.

    Unlike a :class:`GradientTransformation`, whose updates have the shapes of the parameters,
    an aggregator takes per-example gradients of shape ``[*batch_shape, *params_shape]`` and
    returns an update direction of shape ``params_shape``::

        grads = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0))(params, batch)
        updates, opt_state = aggregator.update(grads, opt_state)

    The signatures are those of a transformation; the distinct type tells users which gradient
    oracle (per-example or averaged) to feed it.

    Attributes:
      init: builds the state from the parameters.
      update: maps per-example gradients, the state and (optionally) the parameters to the
        aggregated updates and the new state.
    """

    init: base.TransformInitFn
    update: AggregatorUpdateFn


def _select(ready: Any, if_ready: Any, if_not_ready: Any) -> Any:
    """``if_ready`` when ``ready`` holds, else ``if_not_ready`` (``lax.cond``'s choice)."""
    if not isinstance(ready, torch.Tensor):
        return if_ready if ready else if_not_ready
    chosen, spec = tm.flatten(if_ready)
    others = tm.leaves_like(if_not_ready, spec, "postprocessor state", reference=if_ready)
    if all(isinstance(x, torch.Tensor) for x in chosen + others):
        return tm.unflatten(spec, tm.where(ready, chosen, others))
    # Leaves that are not tensors (generators, Python values) cannot be selected on device.
    return if_ready if bool(ready) else if_not_ready


def process(
    preprocessor: base.GradientTransformation,
    aggregator: base.GradientTransformation | Aggregator,
    postprocessor: base.GradientTransformation,
    aggregator_has_aux: bool = False,
) -> base.GradientTransformation | Aggregator:
    """Processes per-example gradients: preprocess, aggregate, then postprocess.

    The postprocessor (typically an optimizer) only advances on the steps where the
    aggregator's state says it is ``ready`` (after the last of its accumulation steps); on the
    other steps the updates are zeros and the postprocessor's state is kept.

    Args:
      preprocessor: maps per-example gradients to per-example updates (e.g. clipping).
      aggregator: aggregates the per-example updates into one update.
      postprocessor: maps the aggregated updates to the final updates.
      aggregator_has_aux: whether the aggregator returns ``(updates, aux)``, where ``aux`` is a
        dict of extra keyword arguments for the postprocessor.

    Returns:
      An :class:`Aggregator` if ``aggregator`` is one, else a
      :class:`GradientTransformationExtraArgs`.

    Examples:
      >>> import torch
      >>> from optax_compat.experimental import aggregating
      >>> import optax_compat as optax
      >>> opt = aggregating.process(
      ...     preprocessor=optax.identity(),
      ...     aggregator=aggregating.average_per_element_updates(),
      ...     postprocessor=optax.sgd(0.1),
      ... )
      >>> params = {"w": torch.zeros(2)}
      >>> state = opt.init(params)
      >>> per_example_grads = {"w": torch.tensor([[1.0, 2.0], [3.0, 6.0]])}
      >>> updates, state = opt.update(per_example_grads, state, params)
      >>> updates["w"]
      tensor([-0.2000, -0.4000])
    """

    def init_fn(params: base.Params) -> tuple[base.OptState, base.OptState, base.OptState]:
        return preprocessor.init(params), aggregator.init(params), postprocessor.init(params)

    def update_fn(indiv_grads: PerElementUpdates, states: tuple[Any, Any, Any],
                  params: Optional[base.Params] = None, **extra_args: Any):
        preprocess_state, aggregate_state, postprocess_state = states
        indiv_updates, new_preprocess_state = preprocessor.update(
            indiv_grads, preprocess_state, params, **extra_args)
        aggregated, new_aggregate_state = aggregator.update(
            indiv_updates, aggregate_state, params, **extra_args)
        if aggregator_has_aux:
            avg_updates, agg_aux = aggregated
            extra_args = extra_args | agg_aux
        else:
            avg_updates = aggregated

        ready = _state_utils.tree_get(new_aggregate_state, "ready", True)
        # ``lax.cond`` in Optax: the postprocessor always runs and its results are kept only
        # when ready, so that the step needs no host synchronisation.
        post_updates, post_state = postprocessor.update(
            avg_updates, postprocess_state, params, **extra_args)
        updates = _select(ready, post_updates, tm.tree_map(torch.zeros_like, post_updates))
        new_postprocess_state = _select(ready, post_state, postprocess_state)
        return updates, (new_preprocess_state, new_aggregate_state, new_postprocess_state)

    if isinstance(aggregator, Aggregator):
        return Aggregator(init_fn, update_fn)
    return base.GradientTransformationExtraArgs(init_fn, update_fn)


# ----------------------------------------------------------------------------------------------
# Averaging and accumulating.


def _dims(per_elt_axis: int | Sequence[int]) -> int | tuple[int, ...]:
    return per_elt_axis if isinstance(per_elt_axis, int) else tuple(per_elt_axis)


def average_per_element_updates(per_elt_axis: int | Sequence[int] = 0) -> Aggregator:
    """Averages per-element updates over their batch axes.

    Args:
      per_elt_axis: the axis (or axes) to average over.

    Returns:
      A stateless :class:`Aggregator`.

    Examples:
      >>> import torch
      >>> from optax_compat.experimental import aggregating
      >>> aggregator = aggregating.average_per_element_updates()
      >>> params = {"w": torch.zeros(2)}
      >>> state = aggregator.init(params)
      >>> per_example_grads = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}
      >>> updates, state = aggregator.update(per_example_grads, state)
      >>> updates["w"]
      tensor([2., 3.])
    """
    dims = _dims(per_elt_axis)

    def update_fn(per_elt_updates: PerElementUpdates, state: base.OptState,
                  params: Optional[base.Params] = None):
        del params
        return tm.tree_map(lambda x: x.mean(dim=dims), per_elt_updates), state

    return Aggregator(base.init_empty_state, update_fn)


class AccumulateAvgUpdatesState(NamedTuple):
    """State for the average gradient accumulator."""

    micro_step: torch.Tensor  # int32
    ready: torch.Tensor  # bool
    avg_grad: base.Updates


def _false_like(count: torch.Tensor) -> torch.Tensor:
    return torch.zeros([], dtype=torch.bool, device=count.device)


def accumulate_avg_updates(accumulation_steps: int) -> base.GradientTransformation:
    """Averages updates over ``accumulation_steps`` microbatches, then emits the average.

    The updates are zeros on the first ``accumulation_steps - 1`` calls; the last one returns
    the running average and resets the state (``ready`` is then True). Combined with
    :func:`process`, this gives an effective batch of ``accumulation_steps`` microbatches.

    Args:
      accumulation_steps: the number of microbatches to accumulate over (1: no accumulation).

    Returns:
      A :class:`GradientTransformation` (``identity()`` when ``accumulation_steps`` is 1).

    Raises:
      ValueError: if ``accumulation_steps`` is smaller than 1.

    Examples:
      >>> import torch
      >>> from optax_compat.experimental import aggregating
      >>> tx = aggregating.accumulate_avg_updates(accumulation_steps=2)
      >>> params = {"w": torch.zeros(2)}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([1.0, 2.0])}, state)
      >>> updates["w"]  # still accumulating
      tensor([0., 0.])
      >>> updates, state = tx.update({"w": torch.tensor([3.0, 4.0])}, state)
      >>> updates["w"]  # the average of both
      tensor([2., 3.])
    """
    if accumulation_steps < 1:
        raise ValueError("accumulation_steps must be larger than or equal to 1.")
    if accumulation_steps == 1:
        # Nothing to accumulate: no state to track.
        return base.identity()

    def init_fn(params: base.Params) -> AccumulateAvgUpdatesState:
        micro_step = bb.zero_count(params)
        return AccumulateAvgUpdatesState(micro_step=micro_step, ready=_false_like(micro_step),
                                         avg_grad=tm.tree_map(torch.zeros_like, params))

    def update_fn(updates: base.Updates, state: AccumulateAvgUpdatesState,
                  params: Optional[base.Params] = None):
        del params
        us, spec = tm.flatten(updates)
        avgs = tm.leaves_like(state.avg_grad, spec, "state.avg_grad", reference=updates)
        new_micro_step = state.micro_step + 1
        new_avgs = tm.add(avgs, tm.div(tm.sub(us, avgs), new_micro_step))
        ready = new_micro_step == accumulation_steps
        new_state = AccumulateAvgUpdatesState(
            micro_step=torch.where(ready, 0, new_micro_step),
            ready=ready,
            avg_grad=tm.unflatten(spec, _where_else_zeros(~ready, new_avgs)),
        )
        return tm.unflatten(spec, _where_else_zeros(ready, new_avgs)), new_state

    return base.GradientTransformation(init_fn, update_fn)


def _where_else_zeros(condition: torch.Tensor, xs: tm.Leaves) -> tm.Leaves:
    return [torch.where(condition, x, x.new_zeros(())) for x in xs]


def average_incrementally_updates(
    per_elt_axis: MaybeAxis, accumulation_steps: int,
) -> Aggregator | base.GradientTransformation:
    """Averages per-element updates and/or accumulates the averages over microbatches.

    Args:
      per_elt_axis: the axis (or axes) to average over, or None if the updates are already
        averaged.
      accumulation_steps: the number of microbatches to accumulate over.

    Returns:
      :func:`accumulate_avg_updates` when ``per_elt_axis`` is None, else an
      :class:`Aggregator` that averages then accumulates.

    Examples:
      >>> import torch
      >>> from optax_compat.experimental import aggregating
      >>> aggregator = aggregating.average_incrementally_updates(per_elt_axis=0,
      ...                                                          accumulation_steps=2)
      >>> params = {"w": torch.zeros(2)}
      >>> state = aggregator.init(params)
      >>> updates, state = aggregator.update({"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}, state)
      >>> updates, state = aggregator.update({"w": torch.tensor([[5.0, 6.0], [7.0, 8.0]])}, state)
      >>> updates["w"]  # the mean over both microbatches of two examples
      tensor([4., 5.])
    """
    if per_elt_axis is None:
        return accumulate_avg_updates(accumulation_steps)
    aggregator = _combining.chain(average_per_element_updates(per_elt_axis),
                                  accumulate_avg_updates(accumulation_steps))
    return Aggregator(aggregator.init, aggregator.update)


# ----------------------------------------------------------------------------------------------
# Mean and variance of the per-element gradients.


def get_batch_size_from_per_elt_updates(per_elt_updates: base.Updates,
                                        per_elt_axis: int | list[int]) -> int:
    """The number of elements in the per-element updates (the product of the batch axes).

    Args:
      per_elt_updates: the per-element updates.
      per_elt_axis: the batch axis (or axes).

    Returns:
      The batch size.

    Raises:
      ValueError: if the leaves disagree on the batch size.

    Examples:
      >>> import torch
      >>> from optax_compat.experimental import aggregating
      >>> per_example_grads = {"w": torch.zeros(8, 3, 2)}  # 8 x 3 elements of shape (2,)
      >>> aggregating.get_batch_size_from_per_elt_updates(per_example_grads, per_elt_axis=[0, 1])
      24
    """

    def batch_size(u: torch.Tensor) -> int:
        if isinstance(per_elt_axis, int):
            return u.shape[per_elt_axis]
        return math.prod([u.shape[i] for i in per_elt_axis])

    batch_sizes = [batch_size(u) for u in tm.leaves(per_elt_updates)]
    if not all(b == batch_sizes[0] for b in batch_sizes):
        raise ValueError(
            f"Per-element updates must have the same batch size. Got: {batch_sizes}")
    return batch_sizes[0]


def _mean_and_sum_sq_diff(xs: tm.Leaves, dims: int | tuple[int, ...]) -> tuple[tm.Leaves,
                                                                                tm.Leaves]:
    """Per leaf: the mean over ``dims`` and the sum of squared deviations from it."""
    means = [x.mean(dim=dims, keepdim=True) for x in xs]
    sum_sq_diffs = [torch.sum(torch.square(x - m), dim=dims) for x, m in zip(xs, means)]
    return [m.squeeze(dims) for m in means], sum_sq_diffs


class PerElementMeanAndSumSqDiffGradsState(NamedTuple):
    """State for the per-element mean and variance accumulator."""

    micro_step: torch.Tensor  # int32
    ready: torch.Tensor  # bool
    mean_grads: base.Updates
    sum_sq_diff_grads: base.Updates


def get_per_element_mean_and_sum_sq_diff_grads(
    per_elt_axis: int | Sequence[int] = 0,
    accumulation_steps: int = 1,
) -> Aggregator:
    """Mean of the per-element gradients and sum of squared deviations from it.

    The aggregator returns ``(mean_grads, aux)`` with ``aux = {'sum_sq_diff_grads': ...,
    'sample_size': ...}``, to be used with ``process(..., aggregator_has_aux=True)`` (see
    :func:`add_mean_variance_to_opt`). Over several microbatches the statistics are merged
    with Chan et al.'s parallel update of the mean and of the sum of squared deviations.

    Args:
      per_elt_axis: the axis (or axes) of the elements.
      accumulation_steps: the number of microbatches to accumulate over.

    Returns:
      An :class:`Aggregator`.

    Examples:
      >>> import torch
      >>> from optax_compat.experimental import aggregating
      >>> aggregator = aggregating.get_per_element_mean_and_sum_sq_diff_grads()
      >>> params = {"w": torch.zeros(2)}
      >>> state = aggregator.init(params)
      >>> per_example_grads = {"w": torch.tensor([[1.0, 2.0], [3.0, 6.0]])}
      >>> (mean, aux), state = aggregator.update(per_example_grads, state)
      >>> mean["w"], aux["sum_sq_diff_grads"]["w"], aux["sample_size"]
      (tensor([2., 4.]), tensor([2., 8.]), 2)
    """
    dims = _dims(per_elt_axis)

    def compute_avg_and_sum_sq_diff(per_elt_updates: base.Updates, state: base.OptState,
                                    params: Optional[base.Params] = None):
        del params
        batch_size = get_batch_size_from_per_elt_updates(per_elt_updates, per_elt_axis)
        xs, spec = tm.flatten(per_elt_updates)
        means, sum_sq_diffs = _mean_and_sum_sq_diff(xs, dims)
        aux_data = {"sum_sq_diff_grads": tm.unflatten(spec, sum_sq_diffs),
                    "sample_size": batch_size}
        return (tm.unflatten(spec, means), aux_data), state

    if accumulation_steps == 1:
        return Aggregator(base.init_empty_state, compute_avg_and_sum_sq_diff)

    def init_fn(params: base.Params) -> PerElementMeanAndSumSqDiffGradsState:
        micro_step = bb.zero_count(params)
        return PerElementMeanAndSumSqDiffGradsState(
            micro_step=micro_step, ready=_false_like(micro_step),
            mean_grads=tm.tree_map(torch.zeros_like, params),
            sum_sq_diff_grads=tm.tree_map(torch.zeros_like, params))

    def update_fn(per_elt_updates: base.Updates, state: PerElementMeanAndSumSqDiffGradsState,
                  params: Optional[base.Params] = None):
        del params
        batch_size = get_batch_size_from_per_elt_updates(per_elt_updates, per_elt_axis)
        xs, spec = tm.flatten(per_elt_updates)
        means = tm.leaves_like(state.mean_grads, spec, "state.mean_grads")
        sum_sq_diffs = tm.leaves_like(state.sum_sq_diff_grads, spec, "state.sum_sq_diff_grads")
        new_micro_step = state.micro_step + 1

        batch_means, batch_sum_sq_diffs = _mean_and_sum_sq_diff(xs, dims)
        deltas = tm.sub(batch_means, means)
        new_means = tm.add(means, tm.div(deltas, new_micro_step))
        # Chan et al.'s correction for merging the batch's deviations with the accumulated
        # ones: ``n_a * n_b / (n_a + n_b) * delta ** 2`` with ``n_a = micro_step * batch_size``.
        size_factor = state.micro_step * batch_size / new_micro_step
        new_sum_sq_diffs = tm.add(tm.add(sum_sq_diffs, batch_sum_sq_diffs),
                                  tm.mul(tm.square(deltas), size_factor))
        sample_size = batch_size * new_micro_step

        ready = new_micro_step == accumulation_steps
        not_ready = ~ready
        updates = (tm.unflatten(spec, _where_else_zeros(ready, new_means)),
                   {"sum_sq_diff_grads": tm.unflatten(spec,
                                                      _where_else_zeros(ready, new_sum_sq_diffs)),
                    "sample_size": torch.where(ready, sample_size, 0)})
        new_state = PerElementMeanAndSumSqDiffGradsState(
            micro_step=torch.where(ready, 0, new_micro_step),
            ready=ready,
            mean_grads=tm.unflatten(spec, _where_else_zeros(not_ready, new_means)),
            sum_sq_diff_grads=tm.unflatten(spec, _where_else_zeros(not_ready, new_sum_sq_diffs)),
        )
        return updates, new_state

    return Aggregator(init_fn, update_fn)


class PerElementMeanAndVarianceEMAState(NamedTuple):
    """State for the per-element mean and variance accumulator."""

    count: torch.Tensor  # int32
    ema_decay: torch.Tensor  # float
    mean_grads_ema: base.Updates
    variance_grads_ema: base.Updates


def track_per_element_mean_and_variance_with_ema(
    ema_decay: float | torch.Tensor = 0.9,
) -> base.GradientTransformationExtraArgs:
    """Tracks exponential moving averages of the gradients' mean and variance.

    Reads the ``sum_sq_diff_grads`` and ``sample_size`` extra arguments that
    :func:`get_per_element_mean_and_sum_sq_diff_grads` provides when both are combined with
    :func:`process` (see :func:`add_mean_variance_to_opt`); the updates pass through unchanged.
    :func:`get_unbiased_mean_and_variance_ema` reads the debiased averages from the state.

    Args:
      ema_decay: the decay of the moving averages.

    Returns:
      A :class:`GradientTransformationExtraArgs`.

    Examples:
      >>> import torch
      >>> from optax_compat.experimental import aggregating
      >>> import optax_compat as optax
      >>> opt = aggregating.add_mean_variance_to_opt(optax.sgd(0.1), ema_decay=0.5)
      >>> params = {"w": torch.zeros(2)}
      >>> state = opt.init(params)
      >>> per_example_grads = {"w": torch.tensor([[1.0, 2.0], [3.0, 6.0]])}
      >>> updates, state = opt.update(per_example_grads, state, params)
      >>> updates["w"]  # SGD on the mean gradient
      tensor([-0.2000, -0.4000])
      >>> mean, variance = aggregating.get_unbiased_mean_and_variance_ema(state)
      >>> mean["w"], variance["w"]
      (tensor([2., 4.]), tensor([2., 8.]))
    """

    def init_fn(params: base.Params) -> PerElementMeanAndVarianceEMAState:
        count = bb.zero_count(params)
        decay = (ema_decay if isinstance(ema_decay, torch.Tensor) else torch.tensor(
            ema_decay, dtype=tm.widest_real_dtype(tm.leaves(params)), device=count.device))
        return PerElementMeanAndVarianceEMAState(
            count=count, ema_decay=decay,
            mean_grads_ema=tm.tree_map(torch.zeros_like, params),
            variance_grads_ema=tm.tree_map(torch.zeros_like, params))

    def update_fn(updates: base.Updates, state: PerElementMeanAndVarianceEMAState,
                  params: Optional[base.Params] = None, *, sum_sq_diff_grads: base.Updates,
                  sample_size: int | torch.Tensor):
        del params
        us, spec = tm.flatten(updates)
        mean_emas = tm.leaves_like(state.mean_grads_ema, spec, "state.mean_grads_ema",
                                   reference=updates)
        variance_emas = tm.leaves_like(state.variance_grads_ema, spec,
                                       "state.variance_grads_ema", reference=updates)
        sum_sq_diffs = tm.leaves_like(sum_sq_diff_grads, spec, "sum_sq_diff_grads",
                                      reference=updates)
        variance_step = tm.mul(sum_sq_diffs, 1 / (sample_size - 1))
        new_state = state._replace(
            count=numerics.safe_increment(state.count),
            mean_grads_ema=tm.unflatten(spec, bb.moving_average(mean_emas, us, ema_decay)),
            variance_grads_ema=tm.unflatten(spec, bb.moving_average(variance_emas, variance_step,
                                                                   ema_decay)),
        )
        return updates, new_state

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


def get_unbiased_mean_and_variance_ema(state: base.OptState) -> tuple[base.Updates,
                                                                      base.Updates]:
    """The debiased moving averages of the gradients' mean and variance found in ``state``.

    Args:
      state: an optimizer state holding a :class:`PerElementMeanAndVarianceEMAState`.

    Returns:
      ``(mean_ema, variance_ema)``, each divided by ``1 - ema_decay ** count``.

    Raises:
      ValueError: if ``state`` has no :class:`PerElementMeanAndVarianceEMAState`.

    Examples:
      >>> import torch
      >>> from optax_compat.experimental import aggregating
      >>> import optax_compat as optax
      >>> opt = aggregating.add_mean_variance_to_opt(optax.sgd(0.1), ema_decay=0.5)
      >>> params = {"w": torch.zeros(2)}
      >>> state = opt.init(params)
      >>> per_example_grads = {"w": torch.tensor([[1.0, 2.0], [3.0, 6.0]])}
      >>> updates, state = opt.update(per_example_grads, state, params)
      >>> updates["w"]  # SGD on the mean gradient
      tensor([-0.2000, -0.4000])
      >>> mean, variance = aggregating.get_unbiased_mean_and_variance_ema(state)
      >>> mean["w"], variance["w"]
      (tensor([2., 4.]), tensor([2., 8.]))
    """
    ema_state = _state_utils.tree_get(state, "PerElementMeanAndVarianceEMAState", None)
    if ema_state is None:
        raise ValueError("State must have PerElementMeanAndVarianceEMAState to compute unbiased"
                         " mean and variance EMA.")
    bias_correction = 1 - ema_state.ema_decay ** ema_state.count

    def debiased(tree: base.Updates) -> base.Updates:
        xs, spec = tm.flatten(tree)
        return tm.unflatten(spec, tm.div(xs, bias_correction))

    return debiased(ema_state.mean_grads_ema), debiased(ema_state.variance_grads_ema)


def add_mean_variance_to_opt(
    opt: base.GradientTransformation,
    ema_decay: float | torch.Tensor = 0.9,
    per_elt_axis: int | list[int] = 0,
    accumulation_steps: int = 1,
) -> Aggregator:
    """Wraps ``opt`` to consume per-element gradients and track their mean and variance.

    The result takes per-element gradients, feeds their mean (accumulated over
    ``accumulation_steps`` microbatches) to ``opt``, and keeps moving averages of the
    gradients' mean and variance, read with :func:`get_unbiased_mean_and_variance_ema`.

    Args:
      opt: the optimizer.
      ema_decay: the decay of the moving averages.
      per_elt_axis: the axis (or axes) of the elements.
      accumulation_steps: the number of microbatches to accumulate over.

    Returns:
      An :class:`Aggregator`.

    Examples:
      >>> import torch
      >>> from optax_compat.experimental import aggregating
      >>> import optax_compat as optax
      >>> opt = aggregating.add_mean_variance_to_opt(optax.sgd(0.1), ema_decay=0.5)
      >>> params = {"w": torch.zeros(2)}
      >>> state = opt.init(params)
      >>> per_example_grads = {"w": torch.tensor([[1.0, 2.0], [3.0, 6.0]])}
      >>> updates, state = opt.update(per_example_grads, state, params)
      >>> updates["w"]  # SGD on the mean gradient
      tensor([-0.2000, -0.4000])
      >>> mean, variance = aggregating.get_unbiased_mean_and_variance_ema(state)
      >>> mean["w"], variance["w"]
      (tensor([2., 4.]), tensor([2., 8.]))
    """
    return process(
        preprocessor=base.identity(),
        aggregator=get_per_element_mean_and_sum_sq_diff_grads(per_elt_axis, accumulation_steps),
        postprocessor=_combining.chain(track_per_element_mean_and_variance_with_ema(ema_decay),
                                       opt),
        aggregator_has_aux=True,
    )
