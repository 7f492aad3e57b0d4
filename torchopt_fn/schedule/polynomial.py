"""TorchOpt's polynomial and linear schedules over ``optax_compat``'s."""

from __future__ import annotations

from optax_compat import schedules
from torchopt_fn.typing import Scalar, Schedule

__all__ = ["polynomial_schedule", "linear_schedule"]


def polynomial_schedule(init_value: Scalar, end_value: Scalar, power: Scalar,
                        transition_steps: int, transition_begin: int = 0) -> Schedule:
    """A polynomial transition of order ``power`` from ``init_value`` to ``end_value``.

    Args:
      init_value: the value up to ``transition_begin``.
      end_value: the value from ``transition_begin + transition_steps`` on.
      power: the order of the polynomial.
      transition_steps: the length of the transition (``<= 0``: constant ``init_value``).
      transition_begin: the step at which the transition starts.

    Returns:
      A schedule: step count -> value.
    """
    return schedules.polynomial_schedule(init_value=init_value, end_value=end_value, power=power,
                                         transition_steps=transition_steps,
                                         transition_begin=transition_begin)


def linear_schedule(init_value: Scalar, end_value: Scalar, transition_steps: int,
                    transition_begin: int = 0) -> Schedule:
    """A linear transition from ``init_value`` to ``end_value`` (polynomial of order 1)."""
    return polynomial_schedule(init_value=init_value, end_value=end_value, power=1,
                               transition_steps=transition_steps,
                               transition_begin=transition_begin)
