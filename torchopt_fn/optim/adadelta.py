"""The ``AdaDelta`` optimizer: ``torchopt_fn.adadelta`` behind :class:`Optimizer`."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from torchopt_fn import alias
from torchopt_fn.optim.base import HyperparameterOptimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["AdaDelta", "Adadelta"]


class AdaDelta(HyperparameterOptimizer):
    """AdaDelta, as ``torch.optim.Adadelta``.

    See :func:`torchopt_fn.adadelta` for the arguments; the numeric ones are entries of every
    parameter group (``param_groups[i]['lr']``, ...), which schedulers may change.
    """

    _factory = staticmethod(functools.partial(alias.adadelta, moment_requires_grad=False))

    def __init__(
        self,
        params: Iterable[Any],
        lr: ScalarOrSchedule = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        *,
        fused: bool | None = None,
    ) -> None:
        """Builds the optimizer over ``params`` (see :func:`torchopt_fn.adadelta`)."""
        super().__init__(params, lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                         fused=fused)


Adadelta = AdaDelta  # PyTorch's spelling
