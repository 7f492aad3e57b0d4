"""The differentiable ``MetaAdam``: ``torchopt_fn.adam`` behind :class:`MetaOptimizer`."""

from __future__ import annotations

from torch import nn

from torchopt_fn import alias
from torchopt_fn.optim.meta.base import MetaOptimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["MetaAdam"]


class MetaAdam(MetaOptimizer):
    """Differentiable Adam, as ``torch.optim.Adam``.

    See :func:`torchopt_fn.adam` for the arguments.
    """

    def __init__(
        self,
        module: nn.Module,
        lr: ScalarOrSchedule = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        eps_root: float = 0.0,
        moment_requires_grad: bool = True,
        maximize: bool = False,
        use_accelerated_op: bool = False,
    ) -> None:
        """Meta-optimizes ``module``'s parameters (see :func:`torchopt_fn.adam`)."""
        super().__init__(
            module,
            alias.adam(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                eps_root=eps_root,
                moment_requires_grad=moment_requires_grad,
                maximize=maximize,
                use_accelerated_op=use_accelerated_op,
            ),
        )
