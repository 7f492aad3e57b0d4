"""The differentiable ``MetaSGD``: ``torchopt_fn.sgd`` behind :class:`MetaOptimizer`."""

from __future__ import annotations

from torch import nn

from torchopt_fn import alias
from torchopt_fn.optim.meta.base import MetaOptimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["MetaSGD"]


class MetaSGD(MetaOptimizer):
    """Differentiable stochastic gradient descent with momentum, as ``torch.optim.SGD``.

    See :func:`torchopt_fn.sgd` for the arguments.
    """

    def __init__(
        self,
        module: nn.Module,
        lr: ScalarOrSchedule,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        dampening: float = 0.0,
        nesterov: bool = False,
        moment_requires_grad: bool = True,
        maximize: bool = False,
    ) -> None:
        """Meta-optimizes ``module``'s parameters (see :func:`torchopt_fn.sgd`)."""
        super().__init__(
            module,
            alias.sgd(
                lr=lr,
                momentum=momentum,
                weight_decay=weight_decay,
                dampening=dampening,
                nesterov=nesterov,
                moment_requires_grad=moment_requires_grad,
                maximize=maximize,
            ),
        )
