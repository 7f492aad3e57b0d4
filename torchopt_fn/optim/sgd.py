"""The ``SGD`` optimizer: ``torchopt_fn.sgd`` behind :class:`Optimizer`."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import torch

from torchopt_fn import alias
from torchopt_fn.optim.base import HyperparameterOptimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["SGD"]


class SGD(HyperparameterOptimizer):
    """Stochastic gradient descent with momentum, as ``torch.optim.SGD``.

    See :func:`torchopt_fn.sgd` for the arguments; the numeric ones are entries of every
    parameter group (``param_groups[i]['lr']``, ...), which schedulers may change. Sparse
    gradients (``nn.Embedding(sparse=True)``) are supported, as by ``torch.optim.SGD``.
    """

    _factory = staticmethod(functools.partial(alias.sgd, moment_requires_grad=False))

    def __init__(
        self,
        params: Iterable[Any],
        lr: ScalarOrSchedule,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        dampening: float = 0.0,
        nesterov: bool = False,
        maximize: bool = False,
        *,
        fused: bool | None = None,
    ) -> None:
        """Builds the optimizer over ``params`` (see :func:`torchopt_fn.sgd`)."""
        super().__init__(params, lr=lr, momentum=momentum, weight_decay=weight_decay,
                         dampening=dampening, nesterov=nesterov, maximize=maximize,
                         fused=fused)

    def _dense_gradient(self, grad: torch.Tensor, name: str) -> torch.Tensor:
        """A sparse gradient is densified: SGD's step is the same on its dense form."""
        del name
        return grad.to_dense()
