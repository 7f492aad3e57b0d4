"""Moving averages and their bias corrections, shared by Adam and its relatives.

Every moving average of the package is :func:`moving_average`, in Optax's order of operations
(``convention="optax"``, Optax's ``tree.update_moment`` over lists of leaves) or in
``torch.optim``'s (``"torch"``: Adam's fast paths, Lion's, RMSProp's, TorchOpt's).

A correction ``1 - decay ** t`` is formed in the widest precision of the leaves before being
cast to each leaf's dtype.
"""

from __future__ import annotations

from typing import Literal

import torch

from optax_compat._runtime import tree_math as tm
from optax_compat._runtime.dtypes import default_float, is_weak
from optax_compat._runtime.numbers import is_number, is_zero
from optax_compat._src import numerics

Scalar = tm.Scalar
Convention = Literal["optax", "torch"]


def moving_average(moments: tm.Leaves, values: tm.Leaves, decay: Scalar, *, order: int = 1,
                   inplace: bool = False, convention: Convention = "optax") -> tm.Leaves:
    """``decay * moment + (1 - decay) * value ** order`` per leaf: the package's moving average.

    The two conventions are the orders of operations of the two references whose bits the
    package reproduces:

    ``"optax"``
      Optax's ``tree.update_moment``: ``(1 - decay) * value + decay * moment``, with JAX's
      rounding. With a moment of another dtype than the values (``mu_dtype``) each product is
      computed in its operand's dtype, ``decay`` being first rounded to it, as JAX does with a
      weakly typed Python ``decay``; the sum then promotes. A tensor ``decay`` (a schedule's or
      an injected hyperparameter's value) is rounded to each operand's dtype before
      ``1 - decay`` is taken, as JAX multiplies an array in the operand's dtype. ``order`` is
      1 (callers pass the values Optax averages, such as ``|g| ** 2``). In place, the result is
      written into the *values'* buffers (their product comes first; a number ``decay`` and
      leaves of one dtype): the same kernels and bits as the new leaves.
    ``"torch"``
      ``torch.optim``'s ``decay * moment + (1 - decay) * value ** order`` (``order`` 1 or 2,
      real leaves), written into ``moments`` if ``inplace``. The moments
      are scaled, then the values added (``_foreach_add_``, or ``_foreach_addcmul_`` for the
      squares): both forms run the same kernels, so they give the same bits. Values wider than
      the moments (JAX broadcasts them, ``order=1``) give new moments of their shape.

    Neither is a ``lerp``, which turns an infinite moment into NaN at the next finite value.
    The two round differently (each fuses its last product into the sum), which is why both
    exist.

    Raises:
      ValueError: for an ``order`` or ``convention`` outside the above.
    """
    if convention == "torch" and order in (1, 2):
        return _torch_order(moments, values, decay, order, inplace)
    if convention != "optax" or order != 1:
        raise ValueError(f"No moving average of order {order} in the {convention!r} convention.")
    if inplace:
        if values:
            tm.add_scaled_(tm.mul_(values, 1 - decay), decay, moments)
        return values
    if isinstance(decay, torch.Tensor):
        return _optax_order_in_dtypes(moments, values, decay)
    if not moments:
        return []
    if tm.same_dtypes(moments, values):
        return list(tm.foreach("add", tm.foreach("mul", values, 1 - decay), moments, alpha=decay))
    weak_decay = torch.as_tensor(decay, dtype=torch.float64) if is_number(decay) else decay
    return tm.add(tm.mul(values, 1 - decay), tm.mul(moments, tm.scalar_like(weak_decay, moments)))


def _optax_order_in_dtypes(moments: tm.Leaves, values: tm.Leaves,
                           decay: torch.Tensor) -> tm.Leaves:
    """Optax's order for a tensor ``decay``: ``1 - decay`` is computed in ``decay``'s own dtype,
    as JAX computes on a schedule's value or an injected hyperparameter, and each scalar is
    then rounded to the operand it multiplies (the weak-type rule of :mod:`.dtypes`)."""
    return tm.add(tm.mul(values, tm.scalar_like(1 - decay, values)),
                  tm.mul(moments, tm.scalar_like(decay, moments)))


def _torch_order(moments: tm.Leaves, values: tm.Leaves, decay: float, order: int,
                 inplace: bool) -> tm.Leaves:
    """``torch.optim``'s order of operations (see :func:`moving_average`)."""
    if not moments:
        return moments
    if inplace:
        scaled = tm.mul_(moments, decay)
    else:
        scaled = tm.mul(moments, decay)
        if order == 1 and not tm.same_shapes(scaled, values):
            return list(tm.foreach("add", scaled, values, alpha=1 - decay))
    if order == 2:
        return tm.addcmul_(scaled, values, values, 1 - decay)
    tm.foreach("add_", scaled, values, alpha=1 - decay)
    return scaled


def bias_correction(decay: Scalar, count: torch.Tensor, xs: tm.Leaves) -> torch.Tensor:
    """``1 - decay ** count`` as a 0-d tensor, in the dtype JAX computes it in.

    A strongly typed tensor ``decay`` (an injected float32 hyperparameter) keeps its dtype, as
    JAX's ``decay ** count``; a Python number or a weak tensor (``building_blocks.dtypes``)
    computes in JAX's default float, widened to the widest precision of the leaves ``xs`` (a
    low-precision power would round to one, and float64 leaves outside 64-bit mode keep their
    precision). The caller casts it to each moment's dtype, as Optax does.
    """
    if isinstance(decay, torch.Tensor) and decay.is_floating_point() and not is_weak(decay):
        return 1 - decay ** count.to(decay.dtype)
    dtype = torch.promote_types(default_float(), tm.widest_real_dtype(xs))
    return 1 - decay ** count.to(dtype)


def debias(xs: tm.Leaves, correction: torch.Tensor) -> tm.Leaves:
    """``x / correction`` with the correction cast to each leaf's dtype, as Optax does."""
    return tm.div(xs, tm.scalar_like(correction, xs))


def first_moment(mus: tm.Leaves, updates: tm.Leaves, b1: Scalar, count_inc: torch.Tensor,
                 nesterov: bool) -> tm.Leaves:
    """Adam's bias-corrected first moment, with or without Nesterov's look-ahead.

    With ``nesterov`` it is ``b1 * m_hat(t + 1) + (1 - b1) * g_hat(t)`` (Dozat, 2016).
    """
    if not nesterov:
        return debias(mus, bias_correction(b1, count_inc, mus))
    next_correction = bias_correction(b1, numerics.safe_increment(count_inc), mus)
    correction = bias_correction(b1, count_inc, updates)
    return tm.add(tm.mul(debias(mus, next_correction), b1),
                  tm.mul(debias(updates, correction), 1 - b1))


def adam_ratio(mu_hats: tm.Leaves, nu_hats: tm.Leaves, eps: Scalar,
               eps_root: Scalar) -> tm.Leaves:
    """``m / (sqrt(v + eps_root) + eps)`` per leaf, Adam's direction from corrected moments."""
    if not is_zero(eps_root):
        nu_hats = tm.add(nu_hats, eps_root)
    return tm.div(mu_hats, tm.add(tm.sqrt(nu_hats), eps))
