"""Accumulating updates over steps (mirrors ``optax/transforms/_accumulation.py``)."""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import control_flow
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics
from optax_compat.tree_utils import _casting, _tree_math


def _scaled_in_own_dtype(xs: list[torch.Tensor], scalar: float | torch.Tensor,
                        ) -> list[torch.Tensor]:
    """``scalar * x`` per leaf as JAX computes it for a Python ``scalar``: the scalar is first
    rounded to the leaf's dtype (weak typing), which matters for low-precision accumulators."""
    if isinstance(scalar, torch.Tensor):
        return tm.mul(xs, scalar)
    return [x * torch.tensor(scalar, dtype=x.dtype, device=x.device) for x in xs]


def _plus_decayed(grads: list[torch.Tensor], decay: float | torch.Tensor,
                  traces: list[torch.Tensor]) -> list[torch.Tensor]:
    """``grad + decay * trace`` per leaf; with an ``accumulator_dtype`` other than the updates'
    dtype, ``decay * trace`` is rounded in the trace's dtype first, as in JAX."""
    if tm.same_dtypes(grads, traces):
        return tm.add_scaled(grads, decay, traces)
    return tm.add(grads, _scaled_in_own_dtype(traces, decay))


class TraceState(NamedTuple):
    """Holds an aggregation of past updates."""

    trace: base.Params


def trace(
    decay: float | torch.Tensor,
    nesterov: bool = False,
    accumulator_dtype: Any | None = None,
) -> base.GradientTransformationExtraArgs:
    """Computes a trace of past updates: ``trace = updates + decay * trace`` (momentum).

    Args:
      decay: decay rate of the trace of past updates (a number or a 0-d tensor).
      nesterov: use Nesterov momentum, i.e. return ``updates + decay * new_trace``.
      accumulator_dtype: dtype of the stored trace; ``None`` keeps the dtype of the updates.

    Returns:
      A :class:`GradientTransformationExtraArgs`. Its ``update`` also takes a keyword-only
      ``inplace=False``: when true, the trace buffers of ``state`` are overwritten and the
      incoming ``updates`` tensors receive the result (same numbers as the pure path).

    .. note::
      ``trace = decay * trace + t`` while ``ema = decay * ema + (1 - decay) * t``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.trace(decay=0.9)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.5000, -1.0000])
    """
    accumulator_dtype = bb.canonical_dtype(accumulator_dtype)

    def init_fn(params: base.Params) -> TraceState:
        return TraceState(trace=_tree_math.tree_zeros_like(params, dtype=accumulator_dtype))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates: base.Updates, state: TraceState, params: base.Params | None = None,
                  *, inplace: bool = False, **extra_args: Any):
        del params, extra_args
        grads, spec = tm.flatten(updates)
        traces = tm.leaves_like(state.trace, spec, "state.trace", reference=updates)
        if inplace and tm.same_dtypes(grads, traces):
            if nesterov:
                tm.copy_(traces, tm.add_scaled(grads, decay, traces))
                tm.add_scaled_(grads, decay, traces)
            else:
                tm.copy_(traces, tm.add_scaled_(grads, decay, traces))
            return updates, state
        new_traces = _plus_decayed(grads, decay, traces)
        new_updates = tm.add_scaled(grads, decay, new_traces) if nesterov else new_traces
        # In place (dtypes that differ: parameters moved to float64 after init), the trace is
        # written into its buffer, so the update returned is never the state a chain's next
        # transformation would then scale in place.
        new_traces = bb.store(traces, tm.cast(new_traces, accumulator_dtype), inplace)
        new_updates = bb.emit(grads, new_updates, inplace)
        return tm.unflatten(spec, new_updates), TraceState(trace=tm.unflatten(spec, new_traces))

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


class EmaState(NamedTuple):
    """Holds an exponential moving average of past updates."""

    count: torch.Tensor  # 0-d int32
    ema: base.Params


def ema(
    decay: float | torch.Tensor,
    debias: bool = True,
    accumulator_dtype: Any | None = None,
) -> base.GradientTransformationExtraArgs:
    """Computes an exponential moving average of past updates.

    Args:
      decay: decay rate of the moving average.
      debias: divide by ``1 - decay ** count`` to remove the bias towards the zero init.
      accumulator_dtype: dtype of the stored average; ``None`` keeps the dtype of the updates.

    Returns:
      A :class:`GradientTransformationExtraArgs`. Its ``update`` also takes a keyword-only
      ``inplace=False``: when true, the average buffers of ``state`` are overwritten and the
      incoming ``updates`` tensors receive the result (same numbers as the pure path).

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.ema(decay=0.9)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.5000, -1.0000])
    """
    accumulator_dtype = bb.canonical_dtype(accumulator_dtype)

    def init_fn(params: base.Params) -> EmaState:
        return EmaState(count=bb.zero_count(params),
                        ema=_tree_math.tree_zeros_like(params, dtype=accumulator_dtype))

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates: base.Updates, state: EmaState, params: base.Params | None = None,
                  *, inplace: bool = False, **extra_args: Any):
        del params, extra_args
        grads, spec = tm.flatten(updates)
        moments = tm.leaves_like(state.ema, spec, "state.ema", reference=updates)
        count_inc = numerics.safe_increment(state.count)
        if (inplace and bb.is_number(decay) and all(map(tm.is_inexact, grads))
                and tm.same_dtypes(grads, moments) and not tm.is_recording(grads, moments)):
            tm.copy_(moments, bb.moving_average(moments, grads, decay, inplace=True))
            if debias and grads:
                tm.div_(grads, _tree_math.bias_correction_factor(grads, decay, count_inc))
            return updates, EmaState(count=count_inc, ema=state.ema)
        if not all(map(tm.is_inexact, grads)):
            # A bool or integer measurement (``measure_with_ema``) meets the weak decay: JAX
            # computes in its default float.
            grads = [g if tm.is_inexact(g) else g.to(bb.default_float()) for g in grads]
        new_ema = tm.unflatten(spec, bb.moving_average(moments, grads, decay))
        new_updates = tm.leaves(_tree_math.tree_bias_correction(new_ema, decay, count_inc)
                                if debias else new_ema)
        # In place, the average goes into its buffers and the updates into theirs (as
        # ``bb.in_blocks`` does): the updates returned are never the state's memory.
        stored = bb.store(moments, tm.leaves(_casting.tree_cast(new_ema, accumulator_dtype)),
                          inplace)
        return (tm.unflatten(spec, bb.emit(grads, new_updates, inplace)),
                EmaState(count=count_inc, ema=tm.unflatten(spec, stored)))

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


# ----------------------------------------------------------------------------------------------
# Gradient accumulation over mini-steps (MultiSteps) and its skip criteria.


class ShouldSkipUpdateFunction(Protocol):
    """Decides whether :class:`MultiSteps` should ignore a mini-step."""

    def __call__(self, updates: base.Updates, gradient_step: torch.Tensor,
                 params: base.Params | None) -> tuple[torch.Tensor, base.ArrayTree]:
        """Returns whether to skip ``updates``, and a tree kept in ``MultiStepsState.skip_state``.

        Args:
          updates: the updates of this mini-step.
          gradient_step: the current gradient step (``MultiStepsState.gradient_step``).
          params: the current params, if known.

        Returns:
          A boolean 0-d tensor (true to skip) and a tree of debugging information.
        """


def skip_not_finite(updates: base.Updates, gradient_step: torch.Tensor,
                    params: base.Params | None) -> tuple[torch.Tensor, base.ArrayTree]:
    """Skips updates that contain an Inf or a NaN.

    Args:
      updates: see :class:`ShouldSkipUpdateFunction`.
      gradient_step: unused.
      params: unused.

    Returns:
      Whether to skip, and ``{'should_skip': ..., 'num_not_finite': ...}`` where
      ``num_not_finite`` counts the non-finite elements of ``updates``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.MultiSteps(optax.sgd(0.1), every_k_schedule=1,
      ...                        should_skip_update_fn=optax.skip_not_finite)
      >>> state = opt.init(params)
      >>> updates, state = opt.update({"w": torch.tensor([float("nan"), 1.0])}, state, params)
      >>> updates["w"], int(state.skip_state["num_not_finite"])
      (tensor([0., 0.]), 1)
    """
    del gradient_step, params
    counts = [torch.logical_not(torch.isfinite(leaf)).sum() for leaf in tm.leaves(updates)]
    num_not_finite = torch.stack(counts).sum() if counts else torch.zeros([], dtype=torch.int64)
    should_skip = num_not_finite > 0
    return should_skip, {"should_skip": should_skip, "num_not_finite": num_not_finite}


def skip_large_updates(updates: base.Updates, gradient_step: torch.Tensor,
                       params: base.Params | None,
                       max_squared_norm: float | torch.Tensor) -> tuple[torch.Tensor,
                                                                       base.ArrayTree]:
    """Skips updates whose squared global norm is not below ``max_squared_norm`` (or is NaN).

    Bind ``max_squared_norm`` with :func:`functools.partial` to get a
    :class:`ShouldSkipUpdateFunction`.

    Args:
      updates: see :class:`ShouldSkipUpdateFunction`.
      gradient_step: unused.
      params: unused.
      max_squared_norm: the largest accepted squared global norm (exclusive).

    Returns:
      Whether to skip, and ``{'should_skip': ..., 'norm_squared': ...}``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> import functools
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> skip = functools.partial(optax.skip_large_updates, max_squared_norm=1.0)
      >>> opt = optax.MultiSteps(optax.sgd(0.1), every_k_schedule=1,
      ...                        should_skip_update_fn=skip)
      >>> state = opt.init(params)
      >>> updates, state = opt.update({"w": torch.tensor([3.0, 4.0])}, state, params)
      >>> updates["w"]  # squared norm 25 >= 1: skipped
      tensor([0., 0.])
    """
    del gradient_step, params
    norm_squared = tm.sum_of_squares(tm.leaves(updates))
    should_skip = torch.logical_not(norm_squared < max_squared_norm)
    return should_skip, {"should_skip": should_skip, "norm_squared": norm_squared}


class MultiStepsState(NamedTuple):
    """State of :class:`MultiSteps`.

    Attributes:
      mini_step: mini-steps accumulated so far in this gradient step (reset to 0 on emit).
      gradient_step: gradient steps emitted so far.
      inner_opt_state: the state of the wrapped optimizer.
      acc_grads: the gradients accumulated over the current mini-steps.
      skip_state: what ``should_skip_update_fn`` returned last (debugging information).
    """

    mini_step: torch.Tensor
    gradient_step: torch.Tensor
    inner_opt_state: Any
    acc_grads: Any
    skip_state: base.ArrayTree = ()


def _never_skip(updates: base.Updates, gradient_step: torch.Tensor,
                params: base.Params | None) -> tuple[torch.Tensor, base.ArrayTree]:
    del updates, params
    return torch.tensor(False, device=gradient_step.device), ()


class MultiSteps:
    """Accumulates gradients over several mini-steps before applying the wrapped optimizer.

    Each ``update`` adds the incoming gradients to an accumulator (their running mean, or sum)
    and returns zeros, except on the last mini-step of a gradient step: then the wrapped
    optimizer is applied to the accumulated gradients, its updates are returned and the
    accumulator is reset. The number of mini-steps per gradient step comes from
    ``every_k_schedule`` and may change over training (growing the effective batch size).

    As in Optax, the wrapped optimizer runs on every mini-step and its new state is only kept
    on emitting steps; the selections use ``torch.where``, never a host sync.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.MultiSteps(optax.sgd(0.1), every_k_schedule=2)
      >>> state = opt.init(params)
      >>> updates, state = opt.update({"w": torch.tensor([1.0, 1.0])}, state, params)
      >>> updates["w"]  # accumulating
      tensor([-0., -0.])
      >>> updates, state = opt.update({"w": torch.tensor([3.0, 3.0])}, state, params)
      >>> updates["w"]  # one step with the mean gradient
      tensor([-0.2000, -0.2000])
    """

    def __init__(
        self,
        opt: base.GradientTransformation,
        every_k_schedule: int | Callable[[torch.Tensor], int | torch.Tensor],
        use_grad_mean: bool = True,
        should_skip_update_fn: ShouldSkipUpdateFunction | None = None,
        accumulator_dtype: torch.dtype | None = torch.float32,
    ):
        """Wraps ``opt``.

        Args:
          opt: the wrapped optimizer.
          every_k_schedule: the number of mini-steps per gradient step, as an int >= 1 or as a
            function of the gradient step count.
          use_grad_mean: average the accumulated gradients (Welford's running mean) if true,
            else sum them.
          should_skip_update_fn: decides which mini-steps to ignore altogether (see
            :func:`skip_not_finite`, :func:`skip_large_updates`); what it returns besides the
            decision is stored in ``MultiStepsState.skip_state``.
          accumulator_dtype: dtype of the accumulated gradients; ``None`` keeps the params'.

        Raises:
          ValueError: if ``every_k_schedule`` is an int below 1.
          TypeError: if ``every_k_schedule`` is neither an int nor callable.
        """
        accumulator_dtype = bb.canonical_dtype(accumulator_dtype)
        self._opt = base.with_extra_args_support(opt)
        # A skipped or accumulating mini-step keeps the old inner state: never update in place.
        self.update = bb.tolerates_none(bb.without_inplace_request(self.update))
        is_int = (isinstance(every_k_schedule, numbers.Integral)
                  and not isinstance(every_k_schedule, bool))
        if not (is_int or callable(every_k_schedule)):
            raise TypeError("every_k_schedule must be an int or a function of the gradient "
                            f"step, got {every_k_schedule!r}.")
        if is_int:
            if every_k_schedule < 1:
                raise ValueError(
                    f"every_k_schedule must be at least 1, got {every_k_schedule}.")
            every_k = int(every_k_schedule)
            self._every_k_schedule = lambda step: every_k
        else:
            self._every_k_schedule = every_k_schedule
        self._use_grad_mean = use_grad_mean
        self._accumulator_dtype = accumulator_dtype
        self._should_skip_update_fn = should_skip_update_fn or _never_skip

    @property
    def inner_opt(self) -> base.GradientTransformationExtraArgs:
        """The wrapped optimizer (with extra-args support)."""
        return self._opt

    def init(self, params: base.Params) -> MultiStepsState:
        """Returns the initial :class:`MultiStepsState` for ``params``."""
        gradient_step = bb.zero_count(params)
        _, skip_state = self._should_skip_update_fn(
            _tree_math.tree_zeros_like(params), gradient_step, params)
        return MultiStepsState(
            mini_step=bb.zero_count(params),
            gradient_step=gradient_step,
            inner_opt_state=self._opt.init(params),
            acc_grads=_tree_math.tree_zeros_like(params, dtype=self._accumulator_dtype),
            skip_state=skip_state)

    def _accumulate(self, grads: tm.Leaves, accumulated: tm.Leaves,
                    mini_step: torch.Tensor) -> tm.Leaves:
        if self._use_grad_mean:
            # Welford's running mean: acc + (grad - acc) / (n + 1).
            return tm.add(accumulated, tm.div(tm.sub(grads, accumulated), mini_step + 1))
        return tm.add(grads, accumulated)

    def update(self, updates: base.Updates, state: MultiStepsState,
               params: base.Params | None = None,
               **extra_args: Any) -> tuple[base.Updates, MultiStepsState]:
        """Accumulates ``updates``; every ``k`` mini-steps returns the wrapped optimizer's update.

        Returns zeros on the other mini-steps, and zeros with an unchanged state (except
        ``skip_state``) on mini-steps that ``should_skip_update_fn`` rejects.
        """
        k_steps = self._every_k_schedule(state.gradient_step)
        should_skip, skip_state = self._should_skip_update_fn(
            updates, state.gradient_step, params)
        if (not isinstance(should_skip, torch.Tensor) or should_skip.dtype != torch.bool
                or should_skip.shape != ()):
            raise ValueError(
                "The `should_skip_update_fn` function should return a boolean scalar tensor, "
                f"but it returned {should_skip!r}.")

        grads, spec = tm.flatten(updates)
        accumulated = tm.leaves_like(state.acc_grads, spec, "state.acc_grads", updates)
        accumulated = self._accumulate(grads, accumulated, state.mini_step)
        inner_updates, new_inner_state = self._opt.update(
            tm.unflatten(spec, [a.to(g.dtype) for a, g in zip(accumulated, grads, strict=True)]),
            state.inner_opt_state, params=params, **extra_args)

        emit = state.mini_step == (k_steps - 1)
        # Optax multiplies by the 0/1 emit flag rather than selecting, so a non-finite value
        # stays non-finite (0 * inf = nan); do the same.
        keep = torch.logical_not(emit)
        accumulated = tm.cast(tm.mul(accumulated, keep), self._accumulator_dtype)
        inner_leaves, inner_spec = tm.flatten(inner_updates)
        emitted_leaves = tm.mul(inner_leaves, emit)
        stepped = MultiStepsState(
            mini_step=torch.remainder(numerics.safe_increment(state.mini_step),
                                      k_steps).to(state.mini_step.dtype),
            gradient_step=torch.where(emit, numerics.safe_increment(state.gradient_step),
                                      state.gradient_step),
            inner_opt_state=control_flow.select_tree(emit, new_inner_state,
                                                     state.inner_opt_state),
            acc_grads=tm.unflatten(spec, accumulated),
            skip_state=skip_state)
        skipped = state._replace(skip_state=skip_state)
        return control_flow.select_tree(
            should_skip, (tm.unflatten(inner_spec, tm.zeros_like(emitted_leaves)), skipped),
            (tm.unflatten(inner_spec, emitted_leaves), stepped))

    def has_updated(self, state: MultiStepsState | base.ArrayTree) -> torch.Tensor:
        """Whether the last ``update`` emitted the wrapped optimizer's update."""
        return torch.logical_and(state.mini_step == 0, state.gradient_step > 0)

    def gradient_transformation(self) -> base.GradientTransformation:
        """This wrapper as a :class:`GradientTransformation` (``init``, ``update``)."""
        return base.GradientTransformation(init=self.init, update=self.update)
