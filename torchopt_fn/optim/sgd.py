"""The ``SGD`` optimizer: ``torchopt_fn.sgd`` behind :class:`Optimizer`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from torchopt_fn import alias
from torchopt_fn.optim.base import Optimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["SGD"]


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, as ``torch.optim.SGD``.

    See :func:`torchopt_fn.sgd` for the arguments.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: ScalarOrSchedule,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        dampening: float = 0.0,
        nesterov: bool = False,
        maximize: bool = False,
    ) -> None:
        """Builds the optimizer over ``params`` (see :func:`torchopt_fn.sgd`)."""
        super().__init__(
            params,
            alias.sgd(
                lr=lr,
                momentum=momentum,
                weight_decay=weight_decay,
                dampening=dampening,
                nesterov=nesterov,
                moment_requires_grad=False,
                maximize=maximize,
            ),
        )
