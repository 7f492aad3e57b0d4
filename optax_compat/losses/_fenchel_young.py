"""Fenchel-Young losses (mirrors ``optax/losses/_fenchel_young.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.func


class MaxFun(Protocol):
    """A max function: maps a score vector (and optional extra arguments) to a scalar."""

    def __call__(self, scores: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        ...


def _over_last_dim(max_fun: MaxFun, scores: torch.Tensor, *args: Any,
                   **kwargs: Any) -> torch.Tensor:
    """``max_fun`` applied to every last-axis vector of ``scores`` (``torch.func.vmap``)."""
    if scores.ndim <= 1:
        return max_fun(scores, *args, **kwargs)
    vectors = scores.reshape(-1, scores.shape[-1])
    values = torch.func.vmap(lambda vector: max_fun(vector, *args, **kwargs))(vectors)
    return values.reshape(scores.shape[:-1])


def make_fenchel_young_loss(max_fun: MaxFun) -> Callable[..., torch.Tensor]:
    """Creates the Fenchel-Young loss ``max_fun(scores) - <targets, scores>``.

    ``max_fun`` is written for one score vector, in torch (it is applied with
    ``torch.func.vmap`` to every last-axis vector), and its autograd gradient is the
    prediction map whose Fenchel-Young loss this is: e.g. ``torch.logsumexp`` gives the
    softmax cross entropy.

    Args:
      max_fun: the max function on which the loss is built.

    Returns:
      ``fenchel_young_loss(scores, targets, *args, **kwargs)``, operating over the last axis
      (leading axes broadcast); ``args`` and ``kwargs`` are passed to ``max_fun`` unchanged.
      (Optax 0.2.8 documents the same, but its ``jnp.vectorize`` wrapper drops keyword
      arguments and rejects extra positional ones.)

    References:
      Blondel et al, `Learning with Fenchel-Young Losses
      <https://arxiv.org/abs/1901.02324>`_, 2020
    """

    def fenchel_young_loss(scores: torch.Tensor, targets: torch.Tensor, *args: Any,
                           **kwargs: Any) -> torch.Tensor:
        if scores.shape[-1:] != targets.shape[-1:]:
            raise ValueError("inconsistent size for the last axis of scores and targets: "
                             f"{tuple(scores.shape)} vs {tuple(targets.shape)}")
        max_value = _over_last_dim(max_fun, scores, *args, **kwargs)
        return max_value - (targets * scores).sum(-1)

    return fenchel_young_loss


__all__ = ["make_fenchel_young_loss"]
