"""The ``AdaMax`` optimizer: ``torchopt_fn.adamax`` behind :class:`Optimizer`."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from torchopt_fn import alias
from torchopt_fn.optim.base import HyperparameterOptimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["AdaMax", "Adamax"]


class AdaMax(HyperparameterOptimizer):
    """AdaMax, as ``torch.optim.Adamax``.

    See :func:`torchopt_fn.adamax` for the arguments; the numeric ones are entries of every
    parameter group (``param_groups[i]['lr']``, ...), which schedulers may change.
    """

    _factory = staticmethod(functools.partial(alias.adamax, moment_requires_grad=False))

    def __init__(
        self,
        params: Iterable[Any],
        lr: ScalarOrSchedule = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        fused: bool | None = None,
    ) -> None:
        """Builds the optimizer over ``params`` (see :func:`torchopt_fn.adamax`)."""
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         fused=fused)


Adamax = AdaMax  # PyTorch's spelling
