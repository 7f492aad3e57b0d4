"""The ``RMSProp`` optimizer: ``torchopt_fn.rmsprop`` behind :class:`Optimizer`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torchopt_fn import alias
from torchopt_fn.optim.base import HyperparameterOptimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["RMSProp", "RMSprop"]


class RMSProp(HyperparameterOptimizer):
    """RMSProp, as ``torch.optim.RMSprop`` (PyTorch's epsilon placement).

    See :func:`torchopt_fn.rmsprop` for the arguments; the numeric ones are entries of every
    parameter group (``param_groups[i]['lr']``, ...), which schedulers may change.
    """

    _factory = staticmethod(alias.rmsprop)

    def __init__(
        self,
        params: Iterable[Any],
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
        fused: bool | None = None,
    ) -> None:
        """Builds the optimizer over ``params`` (see :func:`torchopt_fn.rmsprop`)."""
        super().__init__(params, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                         momentum=momentum, centered=centered, initial_scale=initial_scale,
                         nesterov=nesterov, maximize=maximize,
                         fused=fused)


RMSprop = RMSProp  # PyTorch's spelling
