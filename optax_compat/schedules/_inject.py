"""Hyperparameters that live in the optimizer state (mirrors ``optax/schedules/_inject.py``).

``inject_hyperparams(adam)(learning_rate=schedule)`` rebuilds the inner transformation at every
step from hyperparameters stored in ``state.hyperparams``: scheduled ones are recomputed from
their schedule's state, the others can be edited by hand between steps.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np
import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics
from optax_compat.tree_utils import _casting


def _convert_floats(value: Any, dtype: torch.dtype, *, weak_tensors: bool) -> Any:
    """``value`` in ``dtype`` if JAX would convert it there, else unchanged (Optax's rule).

    Optax converts Python floats, numpy floating values and *weakly typed* arrays, and leaves
    strongly typed arrays alone. PyTorch has no weak types: following the rule in
    :mod:`optax_compat._runtime.dtypes`, a tensor of JAX's default float is what a
    schedule computes from Python numbers (weak in JAX), so with ``weak_tensors`` (schedule
    outputs) such a tensor is converted too; a tensor of another dtype (a float32 value computed
    from the int32 count under x64, a user's tensor) keeps its dtype. ``.to`` keeps the autograd
    link of a tensor that requires grad.
    """
    if isinstance(value, torch.Tensor):
        weak = weak_tensors and bb.is_weak(value)
        return value.to(dtype) if weak else value
    if isinstance(value, float) or (isinstance(value, (np.ndarray, np.floating))
                                    and np.issubdtype(value.dtype, np.floating)):
        # On the CPU, whatever the default device: _on_device_of moves it to the params'.
        return torch.as_tensor(value, dtype=dtype, device="cpu")
    return value


def _on_device_of(reference: torch.Tensor, tree: Any) -> Any:
    """``tree`` with its tensors on ``reference``'s device: a hyperparameter or schedule state
    built on the CPU joins the params'. A moved tensor keeps its autograd link and its weak or
    strong type."""

    def move(x: Any) -> Any:
        if not isinstance(x, torch.Tensor) or x.device == reference.device:
            return x
        moved = x.to(reference.device)
        return moved if bb.is_weak(x) else bb.as_strong(moved)

    return tm.tree_map(move, tree)


class InjectHyperparamsState(NamedTuple):
    """The state of ``inject_hyperparams`` before Optax 0.1.9 (kept for compatibility).

    ``inject_hyperparams`` returns an :class:`InjectStatefulHyperparamsState`.
    """

    count: torch.Tensor
    hyperparams: dict[str, Any]
    inner_state: base.OptState


class InjectStatefulHyperparamsState(NamedTuple):
    """The step count, the current hyperparameters, their schedules' states, the inner state."""

    count: torch.Tensor
    hyperparams: dict[str, Any]
    hyperparams_states: dict[str, base.ScheduleState]
    inner_state: base.OptState


class WrappedScheduleState(NamedTuple):
    """The state of a :class:`WrappedSchedule`: the number of ``update`` calls."""

    count: torch.Tensor


class WrappedSchedule:
    """A stateful schedule made of a stateless one (a function of the step count).

    Examples:
      >>> import optax_compat as optax
      >>> schedule = optax.WrappedSchedule(optax.linear_schedule(1.0, 0.0, 10))
      >>> state = schedule.init()
      >>> state = schedule.update(state)
      >>> round(float(schedule(state)), 4)
      0.9
    """

    def __init__(self, schedule_fn: base.Schedule):
        """Wraps ``schedule_fn``, a function of the step count."""
        self.schedule_fn = schedule_fn

    def init(self) -> WrappedScheduleState:
        """The state at step 0."""
        return WrappedScheduleState(count=torch.zeros([], dtype=torch.int32))

    def update(self, state: WrappedScheduleState, **extra_args: Any) -> WrappedScheduleState:
        """The state at the next step."""
        del extra_args
        return WrappedScheduleState(count=numerics.safe_increment(state.count))

    def __call__(self, state: WrappedScheduleState, **extra_args: Any) -> Any:
        """The schedule's value at ``state``."""
        del extra_args
        return self.schedule_fn(state.count)


def inject_hyperparams(
    inner_factory: Callable[..., base.GradientTransformation],
    static_args: str | Iterable[str] = (),
    hyperparam_dtype: torch.dtype | None = None,
) -> Callable[..., base.GradientTransformationExtraArgs]:
    """Lets the numeric hyperparameters of ``inner_factory`` be schedules or state entries.

    The returned factory takes ``inner_factory``'s arguments, where a callable (a function of
    the step count, or a :class:`StatefulSchedule`) schedules that hyperparameter. The state's
    ``hyperparams`` dict holds the current value of each numeric hyperparameter; those that
    are not scheduled can be changed by hand between steps
    (``state.hyperparams['learning_rate'] = 0.01``).

    Args:
      inner_factory: builds the inner transformation from hyperparameters (e.g. ``adam``).
      static_args: names of callable arguments that are not schedules.
      hyperparam_dtype: dtype of the floating-point hyperparameters (any dtype spelling, see
        ``building_blocks.canonical_dtype``); by default the highest dtype of the params. As in
        Optax, only Python/numpy floats and weakly typed schedule values are converted.

    Returns:
      A function with ``inner_factory``'s parameters returning a
      :class:`GradientTransformationExtraArgs` with an :class:`InjectStatefulHyperparamsState`.

    Raises:
      ValueError: if ``static_args`` names a parameter ``inner_factory`` does not have.
      TypeError: (from the returned factory) naming an argument ``inner_factory`` does not
        take.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> state.hyperparams["learning_rate"]
      tensor(0.1000)
      >>> state.hyperparams["learning_rate"] = torch.tensor(0.5)  # set it by hand
      >>> updates, state = opt.update({"w": torch.tensor([1.0, 1.0])}, state)
      >>> updates["w"]
      tensor([-0.5000, -0.5000])
    """
    static_args = {static_args} if isinstance(static_args, str) else set(static_args)
    dtype_argument = bb.canonical_dtype(hyperparam_dtype)
    inner_signature = inspect.signature(inner_factory)
    if not static_args.issubset(inner_signature.parameters):
        raise ValueError(
            "`static_args` must specify a subset of `inner_factory`'s parameters. Given "
            f"`static_args`: {static_args}. `inner_factory` parameters: "
            f"{set(inner_signature.parameters)}")

    @functools.wraps(inner_factory)
    def wrapped_transform(*args: Any, **kwargs: Any) -> base.GradientTransformationExtraArgs:
        try:
            bound = inner_signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"{getattr(inner_factory, '__name__', inner_factory)}: {error} "
                            "(cannot inject it as a hyperparameter)") from None
        bound.apply_defaults()

        scheduled, numeric, other = {}, {}, {}
        for name, value in bound.arguments.items():
            if name in static_args or isinstance(value, bool):
                other[name] = value
            elif isinstance(value, base.StatefulSchedule):
                scheduled[name] = value
            elif callable(value):
                scheduled[name] = WrappedSchedule(value)
            elif isinstance(value, (int, float, torch.Tensor, np.ndarray)):
                numeric[name] = value
            else:
                other[name] = value

        def hyperparam_dtype_for(params: base.Params | None) -> torch.dtype:
            if dtype_argument is not None:
                return dtype_argument
            return _casting.tree_dtype(params, "highest")

        def init_fn(params: base.Params) -> InjectStatefulHyperparamsState:
            dtype = hyperparam_dtype_for(params)
            count = bb.zero_count(params)
            hyperparams = {name: bb.as_weak(_on_device_of(
                count, _convert_floats(value, dtype, weak_tensors=False)))
                for name, value in numeric.items()}
            # A stateful schedule's ``init`` takes no params: its state is built on theirs
            # (the default device may be another) or moves there.
            with torch.device(count.device):
                schedule_states = {name: _on_device_of(count, schedule.init())
                                   for name, schedule in scheduled.items()}
            hyperparams.update({
                name: _on_device_of(count, _convert_floats(schedule(schedule_states[name]),
                                                           dtype, weak_tensors=True))
                for name, schedule in scheduled.items()})
            return InjectStatefulHyperparamsState(
                count=count, hyperparams=hyperparams, hyperparams_states=schedule_states,
                inner_state=inner_factory(**other, **hyperparams).init(params))

        initial_inner = inner_factory(
            **other, **numeric,
            **{name: schedule(schedule.init()) for name, schedule in scheduled.items()})

        @bb.elementwise_if(initial_inner)
        def update_fn(updates: base.Updates, state: InjectStatefulHyperparamsState,
                      params: base.Params | None = None,
                      **extra_args: Any) -> tuple[base.Updates, InjectStatefulHyperparamsState]:
            dtype = hyperparam_dtype_for(params)
            hyperparams = {name: _convert_floats(value, dtype, weak_tensors=False)
                           for name, value in state.hyperparams.items()}
            hyperparams.update({
                name: _on_device_of(state.count, _convert_floats(
                    schedule(state.hyperparams_states[name], **extra_args), dtype,
                    weak_tensors=True))
                for name, schedule in scheduled.items()})
            schedule_states = {
                name: schedule.update(state.hyperparams_states[name], **extra_args)
                for name, schedule in scheduled.items()}
            inner = base.with_extra_args_support(inner_factory(**other, **hyperparams))
            updates, inner_state = inner.update(updates, state.inner_state, params,
                                                **extra_args)
            return updates, InjectStatefulHyperparamsState(
                count=numerics.safe_increment(state.count), hyperparams=hyperparams,
                hyperparams_states=schedule_states, inner_state=inner_state)

        return base.GradientTransformationExtraArgs(init_fn, update_fn)

    return wrapped_transform


def inject_stateful_hyperparams(
    inner_factory: Callable[..., base.GradientTransformation],
    static_args: str | Iterable[str] = (),
    hyperparam_dtype: torch.dtype | None = None,
) -> Callable[..., base.GradientTransformationExtraArgs]:
    """Deprecated alias of :func:`inject_hyperparams` (which handles stateful schedules).

    Args:
      inner_factory: see :func:`inject_hyperparams`.
      static_args: see :func:`inject_hyperparams`.
      hyperparam_dtype: see :func:`inject_hyperparams`.

    Returns:
      What :func:`inject_hyperparams` returns.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.inject_stateful_hyperparams(optax.sgd)(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> updates, state = opt.update({"w": torch.tensor([1.0, 1.0])}, state)
      >>> updates["w"]
      tensor([-0.1000, -0.1000])
    """
    warnings.warn("inject_stateful_hyperparams is deprecated, use inject_hyperparams instead",
                  DeprecationWarning, stacklevel=2)
    return inject_hyperparams(inner_factory, static_args, hyperparam_dtype)
