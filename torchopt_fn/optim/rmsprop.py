"""The ``RMSProp`` optimizer: ``torchopt_fn.rmsprop`` behind :class:`Optimizer`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from torchopt_fn import alias
from torchopt_fn.optim.base import Optimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["RMSProp", "RMSprop"]


class RMSProp(Optimizer):
    """RMSProp, as ``torch.optim.RMSprop`` (PyTorch's epsilon placement).

    See :func:`torchopt_fn.rmsprop` for the arguments.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: ScalarOrSchedule = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        *,
        initial_scale: float = 0.0,
        nesterov: bool = False,
        maximize: bool = False,
    ) -> None:
        """Builds the optimizer over ``params`` (see :func:`torchopt_fn.rmsprop`)."""
        super().__init__(
            params,
            alias.rmsprop(
                lr=lr,
                alpha=alpha,
                eps=eps,
                weight_decay=weight_decay,
                momentum=momentum,
                centered=centered,
                initial_scale=initial_scale,
                nesterov=nesterov,
                maximize=maximize,
            ),
        )


RMSprop = RMSProp  # PyTorch's spelling
