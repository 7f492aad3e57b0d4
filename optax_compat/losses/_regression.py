"""Regression losses (mirrors ``optax/losses/_regression.py``)."""

from __future__ import annotations

import math
from typing import Optional, Union

import torch

from optax_compat.losses import _ops

Axis = Union[int, tuple[int, ...], None]
Numeric = Union[torch.Tensor, float]


def _errors(predictions: torch.Tensor, targets: Optional[torch.Tensor]) -> torch.Tensor:
    return predictions - targets if targets is not None else predictions


def _like(value: Numeric, x: torch.Tensor) -> torch.Tensor:
    """``value`` as a tensor of ``x``'s dtype and device (a tensor keeps its autograd graph)."""
    return torch.as_tensor(value, dtype=x.dtype, device=x.device)


def squared_error(
    predictions: torch.Tensor,
    targets: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Element-wise squared error; ``squared_error(a, b).mean()`` is the mean squared error.

    Args:
      predictions: predictions of any shape.
      targets: targets of the same shape (no broadcasting); zeros when ``None``.

    Returns:
      The element-wise squared differences, shaped like ``predictions``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> predictions = torch.tensor([1.0, 2.0])
      >>> targets = torch.tensor([0.0, 4.0])
      >>> optax.losses.squared_error(predictions, targets)
      tensor([1., 4.])
    """
    _ops.check_floating(predictions)
    if targets is not None:
        # Refuse to broadcast, so a [n] vs [n, 1] mix-up does not silently give [n, n].
        _ops.check_shapes_equal(predictions, targets)
    return _errors(predictions, targets) ** 2


def l2_loss(
    predictions: torch.Tensor,
    targets: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Element-wise L2 loss, ``0.5 * squared_error`` (Bishop's convention).

    Args:
      predictions: predictions of any shape.
      targets: targets of the same shape; zeros when ``None``.

    Returns:
      The element-wise losses, shaped like ``predictions``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> predictions = torch.tensor([1.0, 2.0])
      >>> targets = torch.tensor([0.0, 4.0])
      >>> optax.losses.l2_loss(predictions, targets)
      tensor([0.5000, 2.0000])
    """
    return 0.5 * squared_error(torch.as_tensor(predictions), targets)


def huber_loss(
    predictions: torch.Tensor,
    targets: Optional[torch.Tensor] = None,
    *,
    delta: Numeric = 1.0,
) -> torch.Tensor:
    """Huber loss: quadratic for errors up to ``delta``, linear beyond.

    Gradient descent on it amounts to clipping the gradient of :func:`l2_loss` to
    ``[-delta, delta]``.

    Args:
      predictions: predictions of any shape.
      targets: targets broadcastable to ``predictions``; zeros when ``None``.
      delta: where the loss turns from quadratic to linear.

    Returns:
      The element-wise losses.

    References:
      `Huber loss <https://en.wikipedia.org/wiki/Huber_loss>`_, Wikipedia

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> predictions = torch.tensor([0.5, 3.0])
      >>> targets = torch.tensor([0.0, 0.0])
      >>> optax.losses.huber_loss(predictions, targets, delta=1.0)
      tensor([0.1250, 2.5000])
    """
    _ops.check_floating(predictions)
    abs_errors = torch.abs(_errors(predictions, targets))
    quadratic = torch.minimum(abs_errors, _like(delta, abs_errors))
    # Equals max(|err| - delta, 0) without sending gradient through both branches.
    linear = abs_errors - quadratic
    return 0.5 * quadratic**2 + delta * linear


def log_cosh(
    predictions: torch.Tensor,
    targets: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Log-cosh loss: about ``x**2 / 2`` for small errors and ``|x| - log 2`` for large ones.

    A twice differentiable alternative to the Huber loss.

    Args:
      predictions: predictions of any shape.
      targets: targets broadcastable to ``predictions``; zeros when ``None``.

    Returns:
      The element-wise losses.

    References:
      Chen et al, `Log Hyperbolic Cosine Loss Improves Variational Auto-Encoder
      <https://openreview.net/pdf?id=rkglvsC9Ym>`_, 2019

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> predictions = torch.tensor([0.0, 1.0, 10.0])
      >>> optax.losses.log_cosh(predictions)
      tensor([0.0000, 0.4338, 9.3069])
    """
    _ops.check_floating(predictions)
    errors = _errors(predictions, targets)
    # log(cosh(x)) = logaddexp(x, -x) - log(2), finite for large |x|.
    return torch.logaddexp(errors, -errors) - _like(math.log(2.0), errors)


def cosine_similarity(
    predictions: torch.Tensor,
    targets: torch.Tensor,
    *,
    epsilon: Numeric = 0.0,
    axis: Axis = -1,
    where: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Cosine similarity: the inner product of the vectors normalized to unit norm.

    Args:
      predictions: predicted vectors, ``[..., dim]``.
      targets: target vectors, ``[..., dim]``.
      epsilon: lower bound of the squared norms in the denominator.
      axis: axis or axes of the vectors.
      where: elements to include.

    Returns:
      The similarities, ``[...]``.

    References:
      `Cosine similarity <https://en.wikipedia.org/wiki/Cosine_similarity>`_, Wikipedia

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> predictions = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
      >>> targets = torch.tensor([[0.0, 1.0], [-1.0, -1.0]])
      >>> optax.losses.cosine_similarity(predictions, targets)
      tensor([ 0.0000, -1.0000])
    """
    _ops.check_floating(predictions)
    _ops.check_floating(targets)

    def unit(x: torch.Tensor) -> torch.Tensor:
        squared_norm = _ops.masked_sum(x * x, axis, where, keepdims=True)
        return x / torch.sqrt(torch.maximum(squared_norm, _like(epsilon, squared_norm)))

    return _ops.masked_sum(unit(predictions) * unit(targets), axis, where)


def cosine_distance(
    predictions: torch.Tensor,
    targets: torch.Tensor,
    *,
    epsilon: Numeric = 0.0,
    axis: Axis = -1,
    where: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Cosine distance, ``1 - cosine_similarity``.

    Args:
      predictions: predicted vectors, ``[..., dim]``.
      targets: target vectors, ``[..., dim]``.
      epsilon: lower bound of the squared norms in the denominator.
      axis: axis or axes of the vectors.
      where: elements to include.

    Returns:
      The distances, ``[...]``.

    References:
      `Cosine distance <https://en.wikipedia.org/wiki/Cosine_similarity#Cosine_distance>`_,
      Wikipedia

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> predictions = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
      >>> targets = torch.tensor([[0.0, 1.0], [-1.0, -1.0]])
      >>> optax.losses.cosine_distance(predictions, targets)
      tensor([1., 2.])
    """
    _ops.check_floating(predictions)
    _ops.check_floating(targets)
    return 1.0 - cosine_similarity(predictions, targets, epsilon=epsilon, axis=axis,
                                   where=where)


__all__ = ["cosine_distance", "cosine_similarity", "huber_loss", "l2_loss", "log_cosh",
           "squared_error"]
