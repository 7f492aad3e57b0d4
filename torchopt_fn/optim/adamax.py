"""The ``AdaMax`` optimizer: ``torchopt_fn.adamax`` behind :class:`Optimizer`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from torchopt_fn import alias
from torchopt_fn.optim.base import Optimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["AdaMax", "Adamax"]


class AdaMax(Optimizer):
    """AdaMax, as ``torch.optim.Adamax``.

    See :func:`torchopt_fn.adamax` for the arguments.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: ScalarOrSchedule = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        """Builds the optimizer over ``params`` (see :func:`torchopt_fn.adamax`)."""
        super().__init__(
            params,
            alias.adamax(
                lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, moment_requires_grad=False
            ),
        )


Adamax = AdaMax  # PyTorch's spelling
