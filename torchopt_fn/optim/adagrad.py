"""The ``AdaGrad`` optimizer: ``torchopt_fn.adagrad`` behind :class:`Optimizer`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torchopt_fn import alias
from torchopt_fn.optim.base import HyperparameterOptimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["AdaGrad", "Adagrad"]


class AdaGrad(HyperparameterOptimizer):
    """AdaGrad, as ``torch.optim.Adagrad``.

    See :func:`torchopt_fn.adagrad` for the arguments; the numeric ones are entries of every
    parameter group (``param_groups[i]['lr']``, ...), which schedulers may change.
    """

    _factory = staticmethod(alias.adagrad)

    def __init__(
        self,
        params: Iterable[Any],
        lr: ScalarOrSchedule = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        *,
        maximize: bool = False,
        fused: bool | None = None,
    ) -> None:
        """Builds the optimizer over ``params`` (see :func:`torchopt_fn.adagrad`)."""
        super().__init__(params, lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                         initial_accumulator_value=initial_accumulator_value, eps=eps,
                         maximize=maximize,
                         fused=fused)


Adagrad = AdaGrad  # PyTorch's spelling
