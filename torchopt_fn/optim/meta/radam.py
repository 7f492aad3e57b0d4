"""The differentiable ``MetaRAdam``: ``torchopt_fn.radam`` behind :class:`MetaOptimizer`."""

from __future__ import annotations

from torch import nn

from torchopt_fn import alias
from torchopt_fn.optim.meta.base import MetaOptimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["MetaRAdam"]


class MetaRAdam(MetaOptimizer):
    """Differentiable rectified Adam, as ``torch.optim.RAdam``.

    See :func:`torchopt_fn.radam` for the arguments.
    """

    def __init__(
        self,
        module: nn.Module,
        lr: ScalarOrSchedule = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        moment_requires_grad: bool = True,
    ) -> None:
        """Meta-optimizes ``module``'s parameters (see :func:`torchopt_fn.radam`)."""
        super().__init__(
            module,
            alias.radam(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                moment_requires_grad=moment_requires_grad,
            ),
        )
