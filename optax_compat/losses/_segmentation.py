"""Segmentation losses (mirrors ``optax/losses/_segmentation.py``)."""

from __future__ import annotations

from typing import Optional, Union

import torch

from optax_compat.losses import _ops

Numeric = Union[torch.Tensor, float]


def _reduce_loss(loss: torch.Tensor, reduction: str, axis: Optional[int] = None) -> torch.Tensor:
    if reduction == "mean":
        return _ops.masked_mean(loss, axis)
    if reduction == "sum":
        return _ops.masked_sum(loss, axis)
    if reduction == "none":
        return loss
    raise ValueError(f"Unsupported reduction: {reduction}")


def dice_loss(
    predictions: torch.Tensor,
    targets: torch.Tensor,
    *,
    class_weights: Optional[torch.Tensor] = None,
    smooth: Numeric = 1.0,
    alpha: Numeric = 0.5,
    beta: Numeric = 0.5,
    apply_softmax: bool = True,
    reduction: str = "mean",
    ignore_background: bool = False,
    axis: Optional[Union[int, tuple[int, ...]]] = None,
) -> torch.Tensor:
    r"""Soft Dice loss (Tversky loss when ``alpha != beta``) for binary or multi-class
    segmentation, computed per class and then reduced over the classes.

    .. math::
      dice_c = 1 - \frac{I_c + smooth}{I_c + \alpha (P_c - I_c) + \beta (T_c - I_c) + smooth}

    with :math:`I_c = \sum_i p_{i,c} t_{i,c}`, :math:`P_c = \sum_i p_{i,c}` and
    :math:`T_c = \sum_i t_{i,c}`: ``alpha`` weighs false positives and ``beta`` false
    negatives; ``alpha = beta = 0.5`` is the standard Dice loss.

    Args:
      predictions: logits ``[..., num_classes]``, or ``[..., 1]`` / ``[...]`` for binary
        segmentation (probabilities when ``apply_softmax`` is false).
      targets: one-hot targets ``[..., num_classes]``, or binary ``[..., 1]`` / ``[...]``.
      class_weights: optional ``[num_classes]`` weights of the classes.
      smooth: smoothing term against division by zero.
      alpha: weight of false positives.
      beta: weight of false negatives.
      apply_softmax: turn logits into probabilities (sigmoid for one channel, softmax
        otherwise); when false the predictions must sum to 1 over the classes.
      reduction: ``"mean"``, ``"sum"`` or ``"none"`` over the classes.
      ignore_background: leave class 0 out of the loss.
      axis: axes summed over; by default all but the first and the last.

    Returns:
      ``[...]`` batch losses for ``"mean"``/``"sum"``, ``[..., num_classes]`` for ``"none"``.

    References:
      Milletari et al, `V-Net: Fully Convolutional Neural Networks for Volumetric Medical Image
      Segmentation <https://arxiv.org/abs/1606.04797>`_, 2016
    """
    if predictions.ndim == targets.ndim - 1:
        predictions = predictions[..., None]
    if targets.ndim == predictions.ndim - 1:
        targets = targets[..., None]
    _ops.check_shapes_equal(predictions, targets)

    if not apply_softmax:
        prediction_sums = predictions.sum(-1)
        if not torch.allclose(prediction_sums, torch.ones_like(prediction_sums), rtol=1e-5,
                              atol=1e-8):
            raise ValueError(
                "When apply_softmax=False, predictions must be valid probability "
                "distributions that sum to 1 along the class axis. Found sum range: "
                f"[{prediction_sums.min().item():.6f}, {prediction_sums.max().item():.6f}]")

    probs = predictions
    if apply_softmax:
        probs = (torch.sigmoid(predictions) if predictions.shape[-1] == 1
                 else _ops.softmax(predictions, axis=-1))

    axis = tuple(range(1, probs.ndim - 1)) if axis is None else axis
    intersection = _ops.masked_sum(probs * targets, axis)
    prediction_sum = _ops.masked_sum(probs, axis)
    target_sum = _ops.masked_sum(targets, axis)
    numerator = intersection + smooth
    denominator = (intersection + alpha * (prediction_sum - intersection)
                   + beta * (target_sum - intersection) + smooth)
    loss = 1.0 - numerator / denominator  # [..., classes]

    if class_weights is not None:
        _ops.check_rank(class_weights, 1)
        loss = loss * class_weights
    if ignore_background and probs.shape[-1] > 1:
        loss = loss[..., 1:]
    return _reduce_loss(loss, reduction, axis=-1)


def multiclass_generalized_dice_loss(
    predictions: torch.Tensor,
    targets: torch.Tensor,
    *,
    smooth: Numeric = 1.0,
    apply_softmax: bool = True,
    ignore_background: bool = False,
) -> torch.Tensor:
    """Generalized Dice loss: Dice loss with classes weighted by inverse squared frequency.

    The weights ``1 / (frequency**2 + 1e-7)``, normalized to sum to the number of classes,
    counter class imbalance.

    Args:
      predictions: logits ``[..., num_classes]``.
      targets: one-hot targets ``[..., num_classes]``.
      smooth: smoothing term.
      apply_softmax: apply a softmax to the predictions.
      ignore_background: leave class 0 out of the loss.

    Returns:
      The loss averaged over the classes and the batch (a scalar).

    References:
      Sudre et al, `Generalised Dice overlap as a deep learning loss function for highly
      unbalanced segmentations <https://arxiv.org/abs/1707.03237>`_, 2017
    """
    _ops.check_shapes_equal(predictions, targets)
    class_frequencies = _ops.masked_sum(targets, tuple(range(targets.ndim - 1)))
    class_weights = 1.0 / (class_frequencies**2 + 1e-7)
    class_weights = class_weights / class_weights.sum() * len(class_weights)
    return dice_loss(predictions, targets, class_weights=class_weights, smooth=smooth,
                     apply_softmax=apply_softmax, reduction="none",
                     ignore_background=ignore_background).mean()


def binary_dice_loss(
    predictions: torch.Tensor,
    targets: torch.Tensor,
    *,
    smooth: Numeric = 1.0,
    apply_sigmoid: bool = True,
) -> torch.Tensor:
    """Dice loss of a binary segmentation.

    Args:
      predictions: logits ``[...]`` or ``[..., 1]``.
      targets: binary targets ``[...]`` or ``[..., 1]``.
      smooth: smoothing term.
      apply_sigmoid: apply a sigmoid to the predictions.

    Returns:
      The losses, ``[...]`` (batch axes only).
    """
    if predictions.ndim == targets.ndim and predictions.shape[-1] != 1:
        predictions = predictions[..., None]
        targets = targets[..., None]
    return dice_loss(predictions, targets, smooth=smooth, apply_softmax=apply_sigmoid,
                     reduction="mean")


__all__ = ["binary_dice_loss", "dice_loss", "multiclass_generalized_dice_loss"]
