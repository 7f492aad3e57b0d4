"""Dtypes as JAX code writes them, and JAX's default precision.

* :func:`canonical_dtype` turns any dtype argument a ported JAX program may pass (``'bfloat16'``,
  ``np.float32``, ``np.dtype('float32')``, ``jnp.float32``, Python ``float``, a torch dtype) into
  a ``torch.dtype``; every transformation taking a dtype converts it once, at construction.
* :func:`default_float` / :func:`default_int` are JAX's default dtypes under
  :data:`optax_compat.config` (``jax_enable_x64``): 32 bits unless 64-bit mode is on.

**Weak types.** JAX lets a *weakly typed* value (a Python number, or an array computed from
Python numbers) take the dtype of the other operand; PyTorch tensors carry no such flag. The one
rule of this package (:func:`is_weak`): Python numbers, and 0-d floating tensors of JAX's default
float (:func:`default_float`, what JAX makes of Python numbers), are weak. Hence:

* a scalar meeting the leaves of a tree (``tree_math``'s operand handling) is rounded to each
  leaf's dtype and never promotes a leaf, as a weak value or an explicitly cast one in Optax;
* two scalars combine with :func:`result_dtype`: a strong dtype wins over a weak one, two of a
  kind promote (``join_schedules``, ``inject_hyperparams`` converting weak schedule values);
* a Python number made into a tensor takes :func:`default_float` (:func:`as_weak`);
* a value JAX makes strong although it has the default float (an array built with
  ``jnp.stack``, as Optax's piecewise interpolation and one-cycle schedules do) is marked with
  :func:`as_strong`.

With 64-bit mode off every float is float32 and the rule is exact; in 64-bit mode a float32
value computed from the int32 step count is strong (as in JAX) and a float64 one weak unless
marked strong, which is what Optax's schedules give. The mark is the tensor's own: a result
computed from a strong value (``rate + eps``) is a new tensor without it, so the dtype of an
expression is taken from its operands as given (``result_dtype(rate, other)``), before such
arithmetic.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from optax_compat._runtime.config import config

# The attribute marking a tensor of the default float as strongly typed (see :func:`as_strong`).
_STRONG = "_optax_compat_strong_type"


def default_float() -> torch.dtype:
    """JAX's default float: ``float64`` in 64-bit mode, else ``float32``."""
    return torch.float64 if config.jax_enable_x64 else torch.float32


def default_int() -> torch.dtype:
    """JAX's default integer: ``int64`` in 64-bit mode, else ``int32``."""
    return torch.int64 if config.jax_enable_x64 else torch.int32


def canonical_dtype(dtype: Any) -> Optional[torch.dtype]:
    """The ``torch.dtype`` meant by a dtype argument written as JAX code writes it.

    Accepts ``None`` (returned as is), a ``torch.dtype``, a name (``'bfloat16'``, ``'float32'``),
    a numpy dtype or scalar type (``np.dtype('float32')``, ``np.float32``), anything numpy reads
    as a dtype (``jnp.float32``, ``ml_dtypes.bfloat16``) and Python's ``float``/``int``/``bool``/
    ``complex``, which mean JAX's default dtypes (:func:`default_float`, ...).

    Raises:
      TypeError: for anything that names no dtype PyTorch has.
    """
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype is float:
        return default_float()
    if dtype is int:
        return default_int()
    if dtype is complex:
        return torch.complex128 if config.jax_enable_x64 else torch.complex64
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = dtype if isinstance(dtype, str) else None
    found = getattr(torch, name, None) if name else None
    if not isinstance(found, torch.dtype):
        raise TypeError(f"Not a dtype PyTorch has: {dtype!r}.")
    return found


def is_weak(value: Any) -> bool:
    """Whether ``value`` counts as weakly typed (the rule in this module's docstring)."""
    if isinstance(value, torch.Tensor):
        return (value.ndim == 0 and value.dtype == default_float()
                and not getattr(value, _STRONG, False))
    return isinstance(value, (int, float, complex))


def as_strong(value: torch.Tensor) -> torch.Tensor:
    """``value``, marked strongly typed (so :func:`is_weak` is false for it), and returned."""
    setattr(value, _STRONG, True)
    return value


def result_dtype(*values: Any) -> torch.dtype:
    """The dtype JAX gives an operation on the scalars ``values``: strong dtypes win over weak."""
    tensors = [as_weak(value) for value in values]
    strong = [t.dtype for t, v in zip(tensors, values) if not is_weak(v)]
    candidates = strong or [t.dtype for t in tensors]
    dtype = candidates[0]
    for other in candidates[1:]:
        dtype = torch.promote_types(dtype, other)
    return dtype


def as_weak(value: Any, device: Any = None) -> torch.Tensor:
    """A Python number as the 0-d tensor JAX would make of it (default dtype).

    Tensors are returned unchanged; anything else (a numpy value) goes through
    ``torch.as_tensor``.
    """
    if isinstance(value, torch.Tensor):
        return value
    if not isinstance(value, (bool, int, float, complex)):
        return torch.as_tensor(value, device=device)
    if isinstance(value, bool):
        return torch.tensor(value, device=device)
    if isinstance(value, int):
        return torch.tensor(value, dtype=default_int(), device=device)
    if isinstance(value, complex):
        return torch.tensor(value, dtype=canonical_dtype(complex), device=device)
    return torch.tensor(value, dtype=default_float(), device=device)
