"""Array operations the losses share, with ``jax.numpy`` semantics on torch tensors.

JAX reductions take an ``axis`` that may be an int, a tuple or ``None`` (all axes; an empty
tuple reduces nothing) and a boolean ``where`` mask; ``jax.nn.log_softmax``/``softmax``/
``logsumexp`` take the same mask. PyTorch has neither the mask nor the empty-tuple meaning
(``sum(dim=())`` reduces everything), so the losses go through these helpers, which follow
JAX's formulas step by step (same max shift, same ``stop_gradient``) to give the same numbers
and the same gradients. The input checks raise the errors ``optax._src.utils`` raises.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Optional, Union

import torch

Axis = Union[int, tuple[int, ...], None]


def check_floating(x: Any) -> None:
    """Raises ``TypeError`` unless ``x`` has a floating-point dtype (``utils.check_subdtype``)."""
    dtype = x.dtype if isinstance(x, torch.Tensor) else torch.as_tensor(x).dtype
    if not dtype.is_floating_point:
        raise TypeError("Expected the input to have a dtype that is a subdtype of floating, "
                        f"got {dtype} instead")


def check_integer(x: Any) -> None:
    """Raises ``TypeError`` unless ``x`` has an integer dtype."""
    dtype = x.dtype if isinstance(x, torch.Tensor) else torch.as_tensor(x).dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise TypeError("Expected the input to have a dtype that is a subdtype of integer, "
                        f"got {dtype} instead")


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if hasattr(x, "shape") else tuple(torch.as_tensor(x).shape)


def check_shapes_equal(a: Any, b: Any) -> None:
    """Raises ``ValueError`` unless ``a`` and ``b`` have the same shape."""
    if _shape(a) != _shape(b):
        raise ValueError(f"Shape mismatch: got {_shape(a)} and {_shape(b)}.")


def check_rank(x: Any, rank: int) -> None:
    """Raises ``ValueError`` unless ``x`` has ``rank`` dimensions."""
    actual = len(_shape(x))
    if actual != rank:
        raise ValueError(f"Expected the input to have rank {rank}, got {actual} instead")


def canonicalize_axis(axis: int, ndim: int) -> int:
    """A non-negative axis index (``numpy.lib.array_utils.normalize_axis_index``)."""
    axis = operator.index(axis)
    if 0 <= axis < ndim:
        return axis
    if -ndim <= axis < 0:
        return axis + ndim
    raise ValueError(f"axis {axis} is out of bounds for array of dimension {ndim}")


def reduction_dims(axis: Axis, ndim: int) -> tuple[int, ...]:
    """The non-negative axes a JAX reduction over ``axis`` reduces (all of them for ``None``)."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int):
        return (canonicalize_axis(axis, ndim),)
    return tuple(canonicalize_axis(a, ndim) for a in axis)


def _mask(where: Any, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(where, device=like.device).to(torch.bool)


def masked_sum(x: torch.Tensor, axis: Axis = None, where: Any = None,
               keepdims: bool = False) -> torch.Tensor:
    """``jnp.sum(x, axis, where=where, keepdims=keepdims)``: masked-out elements count as 0."""
    if where is not None:
        x = torch.where(_mask(where, x), x, torch.zeros((), dtype=x.dtype, device=x.device))
    dims = reduction_dims(axis, x.ndim)
    return x.sum(dim=dims, keepdim=keepdims) if dims else x


def masked_mean(x: torch.Tensor, axis: Axis = None, where: Any = None) -> torch.Tensor:
    """``jnp.mean(x, axis, where=where)``: the sum of the kept elements over their count."""
    if where is None:
        dims = reduction_dims(axis, x.ndim)
        return x.mean(dim=dims) if dims else x
    mask = torch.broadcast_to(_mask(where, x), x.shape)
    return masked_sum(x, axis, mask) / masked_sum(mask.to(x.dtype), axis)


def masked_max(x: torch.Tensor, axis: Axis = None, where: Any = None,
               keepdims: bool = False, initial: float = -math.inf) -> torch.Tensor:
    """``jnp.max(x, axis, where=where, initial=initial, keepdims=keepdims)``."""
    fill = torch.full((), initial, dtype=x.dtype, device=x.device)
    if where is not None:
        x = torch.where(_mask(where, x), x, fill)
    dims = reduction_dims(axis, x.ndim)
    if not dims:
        return torch.maximum(x, fill)
    return torch.maximum(x.amax(dim=dims, keepdim=keepdims), fill)


def log_softmax(x: torch.Tensor, axis: Axis = -1, where: Any = None) -> torch.Tensor:
    """``jax.nn.log_softmax``: masked-out entries are ``-inf``."""
    x_max = masked_max(x, axis, where, keepdims=True)
    minus_inf = torch.full((), -math.inf, dtype=x.dtype, device=x.device)
    if where is not None:
        where = _mask(where, x)
        x = torch.where(where, x, minus_inf)
    shifted = x - x_max.detach()
    result = shifted - torch.log(masked_sum(torch.exp(shifted), axis, where, keepdims=True))
    return result if where is None else torch.where(where, result, minus_inf)


def softmax(x: torch.Tensor, axis: Axis = -1, where: Any = None) -> torch.Tensor:
    """``jax.nn.softmax``: masked-out entries are 0."""
    x_max = masked_max(x, axis, where, keepdims=True).detach()
    if where is not None:
        where = _mask(where, x)
        x = torch.where(where, x, torch.full((), -math.inf, dtype=x.dtype, device=x.device))
    unnormalized = torch.exp(x - x_max)
    result = unnormalized / masked_sum(unnormalized, axis, where, keepdims=True)
    if where is None:
        return result
    return torch.where(where, result, torch.zeros((), dtype=x.dtype, device=x.device))


def logsumexp(a: torch.Tensor, axis: Axis = None, b: Optional[torch.Tensor] = None,
              where: Any = None) -> torch.Tensor:
    """``jax.scipy.special.logsumexp(a, axis, b=b, where=where)`` (real inputs).

    Entries with ``b == 0`` are dropped (treated as ``-inf``); a negative weighted sum gives
    ``nan``, as in JAX.
    """
    if where is not None:
        where = _mask(where, a)
        a = torch.where(where, a, torch.zeros((), dtype=a.dtype, device=a.device))
    if b is not None:
        a, b = torch.broadcast_tensors(a, b)
        a = torch.where(b != 0, a, torch.full((), -math.inf, dtype=a.dtype, device=a.device))
    dims = reduction_dims(axis, a.ndim)
    amax = masked_max(a, dims, where, keepdims=True).detach()
    amax = torch.where(torch.isfinite(amax), amax, torch.zeros_like(amax))
    exp_a = torch.exp(a - amax)
    if b is not None:
        exp_a = exp_a * b
    sumexp = masked_sum(exp_a, dims, where)
    out = torch.log(sumexp.abs()) + (amax.squeeze(dims) if dims else amax)
    if b is None:
        return out
    return torch.where(sumexp < 0, torch.full((), math.nan, dtype=out.dtype, device=out.device),
                       out)


def expand_dims(x: torch.Tensor, axis: Union[int, tuple[int, ...]]) -> torch.Tensor:
    """``jnp.expand_dims``: inserts size-one axes at the positions ``axis`` of the result."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out_ndim = x.ndim + len(axes)
    positions = sorted(canonicalize_axis(a, out_ndim) for a in axes)
    for position in positions:
        x = x.unsqueeze(position)
    return x


def one_hot(labels: torch.Tensor, num_classes: int, dtype: torch.dtype) -> torch.Tensor:
    """``jax.nn.one_hot``: out-of-range labels (negative or too large) give all zeros."""
    labels = torch.as_tensor(labels)
    classes = torch.arange(num_classes, device=labels.device)
    return (labels.unsqueeze(-1) == classes).to(dtype)
