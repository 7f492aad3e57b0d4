"""Label smoothing (mirrors ``optax/losses/_smoothing.py``)."""

from __future__ import annotations

import math
from typing import Optional, Union

import torch

from optax_compat.losses import _ops

Axis = Union[int, tuple[int, ...], None]


def smooth_labels(
    labels: torch.Tensor,
    alpha: Union[torch.Tensor, float],
    *,
    axis: Axis = -1,
    where: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Label smoothing: ``(1 - alpha) * labels + alpha / num_categories``.

    Smoothed labels favour small logit gaps, which tends to calibrate models better than
    over-confident one-hot targets. Usually combined with a cross-entropy loss.

    Args:
      labels: one-hot labels.
      alpha: the smoothing factor.
      axis: axis or axes of the categories.
      where: categories to count (their number becomes the per-example count of ``True``).

    Returns:
      The smoothed labels.

    References:
      Muller et al, `When does label smoothing help? <https://arxiv.org/abs/1906.02629>`_, 2019

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> labels = torch.tensor([[0.0, 1.0, 0.0, 0.0]])
      >>> optax.losses.smooth_labels(labels, alpha=0.2)
      tensor([[0.0500, 0.8500, 0.0500, 0.0500]])
    """
    _ops.check_floating(labels)
    if where is None:
        dims = _ops.reduction_dims(axis, labels.ndim)
        num_categories = math.prod([labels.shape[d] for d in dims])
    else:
        mask = torch.as_tensor(where, device=labels.device).to(labels.dtype)
        num_categories = _ops.masked_sum(mask, axis, keepdims=True)
    return (1.0 - alpha) * labels + alpha / num_categories


__all__ = ["smooth_labels"]
