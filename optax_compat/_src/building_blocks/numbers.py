"""Recognising plain numbers among hyper-parameters.

A hyper-parameter may be a Python number, a 0-d tensor (possibly requiring grad, for
meta-learning) or a schedule. Fast paths and shortcuts (skip a multiplication by one, a fused
kernel that takes a Python float) apply only to plain numbers, decided here in one place.
"""

from __future__ import annotations

from typing import Any


def is_number(value: Any) -> bool:
    """Whether ``value`` is a Python ``int`` or ``float`` (``bool`` is not a number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_zero(value: Any) -> bool:
    """Whether ``value`` is a Python number equal to zero (a tensor is never treated as zero)."""
    return is_number(value) and value == 0


def is_one(value: Any) -> bool:
    """Whether ``value`` is a Python number equal to one."""
    return is_number(value) and value == 1
