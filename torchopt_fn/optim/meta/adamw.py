"""The differentiable ``MetaAdamW``: ``torchopt_fn.adamw`` behind :class:`MetaOptimizer`."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from torchopt_fn import alias
from torchopt_fn.optim.meta.base import MetaOptimizer
from torchopt_fn.typing import OptState, Params, ScalarOrSchedule

__all__ = ["MetaAdamW"]


class MetaAdamW(MetaOptimizer):
    """Differentiable Adam with decoupled weight decay, as ``torch.optim.AdamW``.

    See :func:`torchopt_fn.adamw` for the arguments.
    """

    def __init__(
        self,
        module: nn.Module,
        lr: ScalarOrSchedule = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        *,
        eps_root: float = 0.0,
        mask: OptState | Callable[[Params], OptState] | None = None,
        moment_requires_grad: bool = False,
        maximize: bool = False,
        use_accelerated_op: bool = False,
    ) -> None:
        """Meta-optimizes ``module``'s parameters (see :func:`torchopt_fn.adamw`)."""
        super().__init__(
            module,
            alias.adamw(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                eps_root=eps_root,
                mask=mask,
                moment_requires_grad=moment_requires_grad,
                maximize=maximize,
                use_accelerated_op=use_accelerated_op,
            ),
        )
