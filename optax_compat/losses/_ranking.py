"""Ranking losses (mirrors ``optax/losses/_ranking.py``).

A ranking loss scores the ranking that item scores induce against the one relevance labels
induce. It works on the last axis; the leading axes are batch axes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import torch

from optax_compat.losses import _ops


def _reduce(values: torch.Tensor, where: Optional[torch.Tensor],
            reduce_fn: Callable[..., Any]) -> torch.Tensor:
    """``reduce_fn(values, where=where)``; torch.mean and torch.sum get a masked version."""
    if reduce_fn is torch.mean:
        return _ops.masked_mean(values, None, where)
    if reduce_fn is torch.sum:
        return _ops.masked_sum(values, None, where)
    return reduce_fn(values, where=where)


def _safe_reduce(
    values: torch.Tensor,
    where: Optional[torch.Tensor] = None,
    reduce_fn: Optional[Callable[..., Any]] = None,
) -> torch.Tensor:
    """Reduces ``values`` over the kept lists without turning an empty selection into NaN.

    A mean over no valid list (every item masked) is 0 rather than NaN, unless the input itself
    holds a NaN. Without a ``reduce_fn`` the masked entries are set to 0, so that summing the
    unreduced loss equals the loss reduced with ``torch.sum``.

    Args:
      values: the per-list losses.
      where: which lists to include.
      reduce_fn: the reduction; ``None`` keeps the values.

    Returns:
      The reduced (or masked) losses.
    """
    output = _reduce(values, where, reduce_fn) if reduce_fn is not None else values
    zero = torch.zeros((), dtype=output.dtype, device=output.device)
    if reduce_fn is torch.mean:
        input_is_valid = torch.logical_not(torch.isnan(values).any())
        output = torch.where(torch.isnan(output) & input_is_valid, zero, output)
    if reduce_fn is None and where is not None:
        output = torch.where(where, output, zero)
    return output


def ranking_softmax_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    where: Optional[torch.Tensor] = None,
    weights: Optional[torch.Tensor] = None,
    reduce_fn: Optional[Callable[..., Any]] = torch.mean,
) -> torch.Tensor:
    r"""Ranking softmax loss (listwise cross entropy of the scores against the labels).

    .. math::
        \ell(s, y) = -\sum_i y_i \log \frac{\exp(s_i)}{\sum_j \exp(s_j)}

    Args:
      logits: ``[..., list_size]`` item scores.
      labels: ``[..., list_size]`` item relevance labels.
      where: optional ``[..., list_size]`` boolean mask of the valid items; the others are
        ignored, and lists without any valid item are left out of the reduction.
      weights: optional ``[..., list_size]`` item weights.
      reduce_fn: reduction of the per-list losses: ``torch.mean`` (default) or ``torch.sum``
        (both honour the mask), ``None`` for none, or any callable taking
        ``(values, where=mask)``.

    Returns:
      The ranking softmax loss.
    """
    _ops.check_floating(logits)
    labels = torch.as_tensor(labels, device=logits.device).to(logits.dtype)
    if where is not None:
        where = torch.as_tensor(where, device=logits.device).to(torch.bool)
        labels = torch.where(where, labels, torch.zeros_like(labels))
        logits = torch.where(where, logits, torch.full_like(logits, -torch.inf))
    if weights is not None:
        labels = labels * weights
    cross_entropy = labels * _ops.log_softmax(logits, axis=-1)
    loss = -_ops.masked_sum(cross_entropy, -1, where)
    if where is not None:
        where = where.any(-1)
    return _safe_reduce(loss, where=where, reduce_fn=reduce_fn)


__all__ = ["ranking_softmax_loss"]
