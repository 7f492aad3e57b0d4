"""The ``AdaDelta`` optimizer: ``torchopt_fn.adadelta`` behind :class:`Optimizer`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from torchopt_fn import alias
from torchopt_fn.optim.base import Optimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["AdaDelta", "Adadelta"]


class AdaDelta(Optimizer):
    """AdaDelta, as ``torch.optim.Adadelta``.

    See :func:`torchopt_fn.adadelta` for the arguments.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: ScalarOrSchedule = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
    ) -> None:
        """Builds the optimizer over ``params`` (see :func:`torchopt_fn.adadelta`)."""
        super().__init__(
            params,
            alias.adadelta(
                lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, moment_requires_grad=False
            ),
        )


Adadelta = AdaDelta  # PyTorch's spelling
