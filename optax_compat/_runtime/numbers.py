"""Recognising plain numbers among hyper-parameters.

A hyper-parameter may be a Python number, a 0-d tensor (possibly requiring grad, for
meta-learning) or a schedule. Fast paths and shortcuts (skip a multiplication by one, a fused
kernel that takes a Python float) apply only to plain numbers, decided here in one place;
:func:`value_at` reads a hyper-parameter that may be a schedule at a step count.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch


def is_number(value: Any) -> bool:
    """Whether ``value`` is a Python ``int`` or ``float`` (``bool`` is not a number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_zero(value: Any) -> bool:
    """Whether ``value`` is a Python number equal to zero (a tensor is never treated as zero)."""
    return is_number(value) and value == 0


def is_one(value: Any) -> bool:
    """Whether ``value`` is a Python number equal to one."""
    return is_number(value) and value == 1


def value_at(hyperparameter: Any, count: Any) -> Any:
    """The value of ``hyperparameter`` at the step ``count``: a schedule is called on it, any
    other value is returned as it is."""
    return hyperparameter(count) if callable(hyperparameter) else hyperparameter


def as_tensor(value: Any, dtype: torch.dtype | None = None,
              device: torch.device | str | None = None) -> torch.Tensor:
    """``torch.as_tensor(value, dtype, device)``, except that a tensor stays on its device
    unless ``device`` is given, as a JAX array does.

    Under ``torch.set_default_device(...)`` (or ``with torch.device(...)``)
    ``torch.as_tensor(tensor)`` copies the tensor to the default device: a step count on the
    parameters' CPU would move to CUDA, or fail to copy out of ``meta``.
    """
    if isinstance(value, torch.Tensor):
        return value.to(dtype=dtype, device=device)
    return torch.as_tensor(value, dtype=dtype, device=device)


def check_hyperparameter(name: str, value: Any) -> None:
    """Raises ``TypeError`` naming ``name`` unless ``value`` can be a hyper-parameter.

    Accepted: ``None``, real numbers (Python or NumPy), tensors and callables (schedules).
    Called when a transformation is built, so that a string such as ``"1e-3"`` fails there
    rather than deep inside the first ``update``.
    """
    if value is None or callable(value) or isinstance(value, torch.Tensor):
        return
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return
    raise TypeError(f"{name} must be a number, a tensor or a schedule (a function of the step "
                    f"count), got {type(value).__name__} {value!r}.")
