"""Reduce the learning rate when a metric stops improving.

Mirrors ``optax/contrib/_reduce_on_plateau.py``: a transformation that scales the updates by a
factor, cut by ``factor`` once the monitored value (passed to ``update`` as ``value``) has not
improved for ``patience`` evaluations, with an optional cooldown.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import control_flow
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics, transform
from optax_compat.tree_utils import _casting

Scalar = transform.Scalar


class ReduceLROnPlateauState(NamedTuple):
    """State of :func:`reduce_on_plateau`.

    Attributes:
      scale: the current factor applied to the updates.
      best_value: the best (lowest) averaged value seen so far.
      plateau_count: evaluations without improvement (0-d ``int32``).
      cooldown_count: evaluations left in the cooldown (0-d ``int32``).
      count: values accumulated into ``avg_value`` so far (0-d ``int32``).
      avg_value: the average of the values accumulated since the last evaluation.
    """

    scale: torch.Tensor
    best_value: torch.Tensor
    plateau_count: torch.Tensor
    cooldown_count: torch.Tensor
    count: torch.Tensor
    avg_value: torch.Tensor


def _check_hyperparameters(factor: float, rtol: float, atol: float) -> None:
    if factor <= 0.0 or factor >= 1.0:
        raise ValueError(f"Factor must be in the range (0, 1), got factor = {factor}.")
    if rtol < 0.0 or atol < 0.0:
        raise ValueError("Both rtol and atol must be non-negative, got "
                         f"rtol = {rtol} and atol = {atol}.")
    if rtol == 0.0 and atol == 0.0:
        raise ValueError("At least one of rtol or atol must be positive, got "
                         f"rtol = {rtol} and atol = {atol}.")
    if rtol > 1.0:
        raise ValueError(f"rtol must be less than or equal to 1.0, got rtol = {rtol}.")


def reduce_on_plateau(
    factor: float = 0.1,
    patience: Scalar = 10,
    rtol: float = 1e-4,
    atol: float = 0.0,
    cooldown: Scalar = 0,
    accumulation_size: Scalar = 1,
    min_scale: Scalar = 0.0,
) -> base.GradientTransformationExtraArgs:
    """Scales the updates down by ``factor`` when the monitored value reaches a plateau.

    ``update`` takes the monitored value (a validation loss, or a minibatch loss averaged over
    ``accumulation_size`` calls) as the keyword argument ``value``. Every ``accumulation_size``
    calls the average is compared with the best so far; after ``patience`` evaluations without
    an improvement by more than ``rtol * best + atol`` the scale is multiplied by ``factor``
    (never below ``min_scale``) and ``cooldown`` evaluations are ignored.

    Args:
      factor: multiplies the scale at each reduction, in ``(0, 1)``.
      patience: evaluations without improvement before a reduction.
      rtol: relative tolerance for a new best value, in ``[0, 1]``.
      atol: absolute tolerance for a new best value, non-negative.
      cooldown: evaluations to skip after a reduction.
      accumulation_size: values averaged into one evaluation.
      min_scale: the scale is never reduced below it.

    Returns:
      A :class:`~optax_compat.GradientTransformationExtraArgs` with a
      :class:`ReduceLROnPlateauState`.

    Raises:
      ValueError: for a ``factor``, ``rtol`` or ``atol`` out of range.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.contrib.reduce_on_plateau(factor=0.5, patience=1)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> for loss in [1.0, 1.0, 1.0]:  # the loss stops improving
      ...     updates, state = tx.update({"w": torch.ones(2)}, state, value=torch.tensor(loss))
      >>> updates["w"]
      tensor([0.2500, 0.2500])
    """
    _check_hyperparameters(factor, rtol, atol)

    def init_fn(params: base.Params) -> ReduceLROnPlateauState:
        count = bb.zero_count(params)
        highest = _casting.tree_dtype(params, "highest")
        return ReduceLROnPlateauState(
            scale=torch.ones((), dtype=_casting.tree_dtype(params, "lowest"),
                             device=count.device),
            best_value=torch.full((), float("inf"), dtype=highest, device=count.device),
            plateau_count=count.clone(), cooldown_count=count.clone(), count=count,
            avg_value=torch.zeros((), dtype=highest, device=count.device))

    def evaluate(state: ReduceLROnPlateauState) -> ReduceLROnPlateauState:
        """Compares the averaged value with the best one and adjusts the scale."""
        has_improved = state.avg_value < (1 - rtol) * state.best_value - atol
        best_value = torch.where(has_improved, state.avg_value.to(state.best_value.dtype),
                                 state.best_value)
        zero = torch.zeros_like(state.plateau_count)
        plateau_count = torch.where(has_improved, zero,
                                    numerics.safe_increment(state.plateau_count))
        reduce = plateau_count == patience
        reduced_scale = torch.clamp_min(
            torch.where(reduce, state.scale * factor, state.scale), min_scale)
        new_cooldown = torch.where(
            reduce, torch.as_tensor(cooldown, device=zero.device), zero).to(torch.int32)
        # During a cooldown bad evaluations are ignored and the scale is kept.
        in_cooldown = state.cooldown_count > 0
        return ReduceLROnPlateauState(
            scale=torch.where(in_cooldown, state.scale, reduced_scale.to(state.scale.dtype)),
            best_value=best_value,
            plateau_count=torch.where(in_cooldown | reduce, zero, plateau_count),
            cooldown_count=torch.where(in_cooldown, state.cooldown_count - 1, new_cooldown),
            count=zero,
            avg_value=torch.zeros_like(state.avg_value))

    def update_fn(updates: base.Updates, state: ReduceLROnPlateauState,
                  params: base.Params | None = None, *, value: Any,
                  **extra_args: Any) -> tuple[base.Updates, ReduceLROnPlateauState]:
        del params, extra_args
        new_count = numerics.safe_increment(state.count)
        value = torch.as_tensor(value, dtype=state.avg_value.dtype,
                                device=state.avg_value.device)
        avg_value = ((state.count * state.avg_value + value) / new_count).to(
            state.avg_value.dtype)
        accumulated = state._replace(avg_value=avg_value, count=new_count)
        new_state = control_flow.cond(new_count == accumulation_size,
                                      lambda: evaluate(accumulated), lambda: accumulated)
        gs, spec = tm.flatten(updates)
        return tm.unflatten(spec, tm.mul(gs, tm.scalar_like(new_state.scale, gs))), new_state

    return base.GradientTransformationExtraArgs(init_fn, update_fn)
