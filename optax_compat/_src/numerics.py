"""Numerically safe helpers with well-defined gradients (mirrors ``optax/_src/numerics.py``)."""

from __future__ import annotations

from typing import Optional, Union

import torch

Norm = Optional[Union[int, float, str]]


def abs_sq(x: torch.Tensor) -> torch.Tensor:
    """``|x| ** 2``, real for complex ``x``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"abs_sq expects a torch.Tensor, got {type(x).__name__}.")
    return (x.conj() * x).real if x.is_complex() else x * x


def _vector_or_matrix_norm(x: torch.Tensor, ord: Norm, axis, keepdims: bool) -> torch.Tensor:
    # ``numpy.linalg.norm`` semantics, as in ``jnp.linalg.norm``: the Frobenius/2-norm of all
    # elements when ``ord`` and ``axis`` are both None.
    if axis is None and ord is None:
        norm = torch.linalg.vector_norm(x)
        return norm.reshape([1] * x.ndim) if keepdims else norm
    if isinstance(axis, int):
        axis = (axis,)
    if (axis is not None and len(axis) == 2) or (axis is None and x.ndim == 2):
        return torch.linalg.matrix_norm(x, ord="fro" if ord is None else ord,
                                        dim=axis or (-2, -1), keepdim=keepdims)
    return torch.linalg.vector_norm(x, ord=2 if ord is None else ord, dim=axis,
                                    keepdim=keepdims)


def safe_norm(x: torch.Tensor, min_norm: float | torch.Tensor, ord: Norm = None,
              axis: Union[tuple[int, ...], int, None] = None,
              keepdims: bool = False) -> torch.Tensor:
    """``max(norm(x), min_norm)`` whose gradient is 0, not NaN, where the norm is clipped.

    Args:
      x: input tensor.
      min_norm: lower bound of the result.
      ord: order of the norm (``numpy.linalg.norm`` semantics).
      axis: axes over which to take the norm; all of them when ``None``.
      keepdims: keep the reduced axes with size one.

    Returns:
      The clipped norm.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> optax.safe_norm(torch.tensor([3.0, 4.0]), min_norm=1.0)
      tensor(5.)
      >>> x = torch.zeros(2, requires_grad=True)
      >>> optax.safe_norm(x, min_norm=1.0).backward()
      >>> x.grad
      tensor([0., 0.])
    """
    norm = _vector_or_matrix_norm(x, ord, axis, keepdims=True)
    clipped = norm <= min_norm
    masked = torch.where(clipped, torch.ones_like(x), x)
    safe = _vector_or_matrix_norm(masked, ord, axis, keepdims=keepdims)
    if not keepdims:
        clipped = clipped.reshape(safe.shape)
    return torch.where(clipped, torch.as_tensor(min_norm, dtype=safe.dtype), safe)


def safe_root_mean_squares(x: torch.Tensor, min_rms: float | torch.Tensor) -> torch.Tensor:
    """``max(rms(x), min_rms)`` with a gradient of 0 where clipped.

    Args:
      x: input tensor.
      min_rms: lower bound of the result.

    Returns:
      The clipped root mean square of all elements of ``x``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> optax.safe_root_mean_squares(torch.tensor([1.0, 7.0]), min_rms=0.1)
      tensor(5.)
      >>> optax.safe_root_mean_squares(torch.tensor([0.0, 0.0]), min_rms=0.1)
      tensor(0.1000)
    """
    rms = torch.sqrt(torch.mean(abs_sq(x)))
    clipped = rms <= min_rms
    masked = torch.where(clipped, torch.ones_like(x), x)
    return torch.where(clipped, torch.as_tensor(min_rms, dtype=rms.dtype),
                       torch.sqrt(torch.mean(abs_sq(masked))))


def safe_increment(count: torch.Tensor) -> torch.Tensor:
    """``count + 1``, saturating at the largest value of ``count``'s dtype instead of wrapping.

    Args:
      count: an integer or floating-point tensor.

    Returns:
      The incremented count, of the same dtype.

    Raises:
      ValueError: for a dtype that is neither integer nor floating point.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> count = torch.tensor([0, 2147483647], dtype=torch.int32)
      >>> optax.safe_increment(count)
      tensor([         1, 2147483647], dtype=torch.int32)
    """
    # A tensor keeps its device (``torch.as_tensor`` would move it to the default device).
    count = count if isinstance(count, torch.Tensor) else torch.as_tensor(count)
    if count.dtype.is_floating_point:
        max_value = torch.finfo(count.dtype).max
    elif count.dtype in (torch.bool, torch.complex64, torch.complex128):
        raise ValueError(f"Cannot safely increment a count of dtype {count.dtype}: valid "
                         "dtypes are integer or floating-point types.")
    else:
        max_value = torch.iinfo(count.dtype).max
    return torch.where(count < max_value, count + 1, count)


safe_int32_increment = safe_increment
