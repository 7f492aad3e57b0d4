"""Recording measurements of the updates (mirrors ``optax/transforms/_monitoring.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from optax_compat._src import base
from optax_compat.transforms import _accumulation, _combining

Measure = Callable[[base.Updates], base.ArrayTree]


class SnapshotState(NamedTuple):
    """The last measurement of :func:`snapshot`, under its name."""

    measurement: dict[str, Any]


def snapshot(measure_name: str, measure: Measure) -> base.GradientTransformation:
    """Stores ``measure(updates)`` in the state under ``measure_name``; updates pass through.

    Useful to inspect intermediate updates in a :func:`chain`; read the value back with
    ``optax_compat.tree.get(state, measure_name)``.

    Args:
      measure_name: the key of the measurement in the state.
      measure: maps the updates (as transformed so far in the chain) to a tree.

    Returns:
      A :class:`GradientTransformation` with a :class:`SnapshotState` (``init`` measures the
      params).

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> tx = optax.snapshot("norm", optax.tree.norm)
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([3.0, 4.0])}, state)
      >>> state
      SnapshotState(measurement={'norm': tensor(5.)})
    """

    def init_fn(params: base.Params) -> SnapshotState:
        return SnapshotState({measure_name: measure(params)})

    def update_fn(updates: base.Updates, state: SnapshotState,
                  params: base.Params | None = None) -> tuple[base.Updates, SnapshotState]:
        del params, state
        return updates, SnapshotState({measure_name: measure(updates)})

    return base.GradientTransformation(init_fn, update_fn)


class MonitorState(NamedTuple):
    """The measurements of :func:`monitor` by name, and the states of stateful measures."""

    measurements: dict[str, base.ArrayTree]
    measure_states: tuple[base.OptState, ...]


def monitor(
    measures: dict[str, base.GradientTransformationExtraArgs | Measure],
) -> base.GradientTransformationExtraArgs:
    """Records several (possibly stateful) measurements of the updates; updates pass through.

    Args:
      measures: maps names to a function of the updates, or to a transformation whose output
        "updates" are the measurement (e.g. :func:`measure_with_ema`).

    Returns:
      A :class:`GradientTransformationExtraArgs` with a :class:`MonitorState`.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> tx = optax.monitor({"norm": optax.tree.norm})
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([3.0, 4.0])}, state)
      >>> state.measurements["norm"]
      tensor(5.)
    """
    transforms = {
        name: base.with_extra_args_support(
            base.stateless(lambda updates, _, m=measure: m(updates)) if callable(measure)
            else measure)
        for name, measure in measures.items()}

    def init_fn(params: base.Params) -> MonitorState:
        return MonitorState({}, tuple(t.init(params) for t in transforms.values()))

    def update_fn(updates: base.Updates, state: MonitorState,
                  params: base.Params | None = None,
                  **extra_args: Any) -> tuple[base.Updates, MonitorState]:
        measurements, new_states = {}, []
        for (name, t), measure_state in zip(transforms.items(), state.measure_states,
                                            strict=True):
            measurements[name], new_state = t.update(updates, measure_state, params,
                                                     **extra_args)
            new_states.append(new_state)
        return updates, MonitorState(measurements, tuple(new_states))

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


def measure_with_ema(
    measure: Measure,
    decay: float | torch.Tensor,
    debias: bool = True,
    accumulator_dtype: Any | None = None,
) -> base.GradientTransformationExtraArgs:
    """Measures the updates and returns the exponential moving average of the measurement.

    Meant as a stateful measure of :func:`monitor`.

    Args:
      measure: maps the updates to a tree of measurements.
      decay: decay rate of the moving average.
      debias: correct the bias towards the zero initialisation.
      accumulator_dtype: dtype of the stored average; ``None`` keeps the measurement's.

    Returns:
      ``chain(measure, ema)`` whose ``init`` sizes the average on ``measure(params)``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> tx = optax.measure_with_ema(optax.tree.norm, decay=0.9)
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([3.0, 4.0])}, state)
      >>> updates
      tensor(5.0000)
    """
    moving_average = _accumulation.ema(decay, debias, accumulator_dtype)
    measurement_average = moving_average._replace(
        init=lambda params: moving_average.init(measure(params)))
    return _combining.chain(base.stateless(lambda updates, _: measure(updates)),
                            measurement_average)
