"""The ``RAdam`` optimizer: ``torchopt_fn.radam`` behind :class:`Optimizer`."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from torchopt_fn import alias
from torchopt_fn.optim.base import HyperparameterOptimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["RAdam"]


class RAdam(HyperparameterOptimizer):
    """Rectified Adam, as ``torch.optim.RAdam``.

    See :func:`torchopt_fn.radam` for the arguments; the numeric ones are entries of every
    parameter group (``param_groups[i]['lr']``, ...), which schedulers may change.
    """

    _factory = staticmethod(functools.partial(alias.radam, moment_requires_grad=False))

    def __init__(
        self,
        params: Iterable[Any],
        lr: ScalarOrSchedule = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        fused: bool | None = None,
    ) -> None:
        """Builds the optimizer over ``params`` (see :func:`torchopt_fn.radam`)."""
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         fused=fused)
