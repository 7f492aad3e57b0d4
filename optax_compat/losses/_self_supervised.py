"""Self-supervised losses (mirrors ``optax/losses/_self_supervised.py``)."""

from __future__ import annotations

from typing import Union

import torch

from optax_compat.losses import _ops, _regression

Numeric = Union[torch.Tensor, float]


def ntxent(
    embeddings: torch.Tensor,
    labels: torch.Tensor,
    temperature: Numeric = 0.07,
) -> torch.Tensor:
    """Normalized temperature-scaled cross entropy loss (NT-Xent).

    Every pair of distinct embeddings sharing a label is a positive pair; each one is scored
    by a softmax of cosine similarities over itself and all the negatives of its anchor.

    Args:
      embeddings: ``[batch, feature_length]`` embeddings.
      labels: ``[batch]`` group labels (e.g. ``[0, 0, 1, 1]`` when the first two and the last
        two embeddings are positive pairs).
      temperature: temperature scaling the similarities.

    Returns:
      The loss averaged over all positive pairs (a scalar).

    References:
      Chen et al, `A Simple Framework for Contrastive Learning of Visual Representations
      <http://arxiv.org/abs/2002.05709>`_, 2020

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> embeddings = torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-0.6, 0.8]])
      >>> labels = torch.tensor([0, 0, 1, 1])
      >>> optax.losses.ntxent(embeddings, labels, temperature=0.5)
      tensor(0.4302)
    """
    _ops.check_floating(embeddings)
    if labels.shape[0] != embeddings.shape[0]:
        raise ValueError(
            "Labels and embeddings must have the same leading dimension, found "
            f"{labels.shape[0]} for labels and {embeddings.shape[0]} for embeddings.")
    similarities = _regression.cosine_similarity(
        embeddings[None, :, :], embeddings[:, None, :],
        epsilon=torch.finfo(embeddings.dtype).eps) / temperature

    same_label = labels[:, None] == labels[None, :]
    eye = torch.eye(same_label.shape[0], dtype=torch.bool, device=same_label.device)
    positives = same_label & ~eye  # an embedding is not its own positive
    minus_inf = torch.full((), -torch.inf, dtype=similarities.dtype,
                           device=similarities.device)
    negative_scores = torch.where(same_label, minus_inf, similarities)
    positive_scores = torch.where(positives, similarities, minus_inf)

    # Shift by the row maximum (a constant for the gradient) for numerical stability.
    row_max = torch.cat([negative_scores, positive_scores], dim=-1).amax(1, keepdim=True)
    shifted_negatives = negative_scores - row_max.detach()
    shifted_positives = positive_scores - row_max.detach()
    denominator = (torch.exp(shifted_negatives).sum(1, keepdim=True)
                   + torch.exp(shifted_positives))
    log_softmax = shifted_positives - torch.log(denominator)
    zero = torch.zeros((), dtype=log_softmax.dtype, device=log_softmax.device)
    return -torch.where(positives, log_softmax, zero).sum() / positives.sum()


def triplet_margin_loss(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    negatives: torch.Tensor,
    axis: int = -1,
    norm_degree: Numeric = 2,
    margin: Numeric = 1.0,
    eps: Numeric = 1e-6,
) -> torch.Tensor:
    """Triplet margin loss ``max(d(a, p) - d(a, n) + margin, 0)``.

    Args:
      anchors: ``[batch, feature_dim]`` anchor embeddings.
      positives: ``[batch, feature_dim]`` embeddings similar to the anchors.
      negatives: ``[batch, feature_dim]`` embeddings dissimilar to the anchors.
      axis: axis along which distances are taken.
      norm_degree: degree of the norm of the distance (2 is Euclidean).
      margin: by how much the positive distance should be below the negative one.
      eps: added inside the root for numerical stability.

    Returns:
      The loss of each triplet.

    References:
      Balntas et al, `Learning shallow convolutional feature descriptors with triplet losses
      <https://bmva-archive.org.uk/bmvc/2016/papers/paper119/abstract119.pdf>`_, 2016
    """
    for x in (anchors, positives, negatives):
        _ops.check_floating(x)

    def distance(other: torch.Tensor) -> torch.Tensor:
        return torch.pow(torch.pow(anchors - other, norm_degree).sum(axis) + eps,
                         1 / norm_degree)

    loss = distance(positives) - distance(negatives) + margin
    return torch.maximum(loss, torch.zeros((), dtype=loss.dtype, device=loss.device))


__all__ = ["ntxent", "triplet_margin_loss"]
