"""Joining schedules end to end (mirrors ``optax/schedules/_join.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Union

import torch

from optax_compat import _runtime as bb
from optax_compat._src import base


def join_schedules(schedules: Sequence[base.Schedule],
                   boundaries: Sequence[int]) -> base.Schedule:
    """Runs ``schedules[0]`` until ``boundaries[0]``, then ``schedules[1]`` restarted at 0, ...

    Args:
      schedules: the schedules to join.
      boundaries: the step at which each next schedule takes over, one fewer than schedules,
        non-decreasing.

    Returns:
      The joined schedule.

    Raises:
      ValueError: if the number of boundaries is not one fewer than the number of schedules,
        or if the boundaries decrease.

    Examples:
      >>> import optax_compat as optax
      >>> schedule = optax.join_schedules(
      ...     [optax.constant_schedule(1.0), optax.constant_schedule(0.1)], boundaries=[5])
      >>> [round(float(schedule(step)), 4) for step in (0, 4, 5, 10)]
      [1.0, 1.0, 0.1, 0.1]
    """
    schedules, boundaries = list(schedules), list(boundaries)
    if len(boundaries) != len(schedules) - 1:
        raise ValueError(f"join_schedules needs one boundary fewer than schedules, got "
                         f"{len(schedules)} schedules and {len(boundaries)} boundaries.")
    if any(b > a for a, b in zip(boundaries[1:], boundaries[:-1])):
        raise ValueError(f"join_schedules needs non-decreasing boundaries, got {boundaries}.")

    def schedule(step: Union[int, torch.Tensor]) -> torch.Tensor:
        output = schedules[0](step)
        for boundary, later in zip(boundaries, schedules[1:]):
            other = later(step - boundary)
            # ``jnp.where`` promotes as JAX does: a strong dtype wins over a weak one, and the
            # result is weak only if both are.
            dtype = bb.result_dtype(output, other)
            weak = bb.is_weak(output) and bb.is_weak(other)
            output = torch.where(bb.as_tensor(step) < boundary,
                                 bb.as_weak(output).to(dtype), bb.as_weak(other).to(dtype))
            output = output if weak else bb.as_strong(output)
        return output

    return schedule
