"""The ``RAdam`` optimizer: ``torchopt_fn.radam`` behind :class:`Optimizer`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from torchopt_fn import alias
from torchopt_fn.optim.base import Optimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["RAdam"]


class RAdam(Optimizer):
    """Rectified Adam, as ``torch.optim.RAdam``.

    See :func:`torchopt_fn.radam` for the arguments.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: ScalarOrSchedule = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        """Builds the optimizer over ``params`` (see :func:`torchopt_fn.radam`)."""
        super().__init__(
            params,
            alias.radam(
                lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, moment_requires_grad=False
            ),
        )
