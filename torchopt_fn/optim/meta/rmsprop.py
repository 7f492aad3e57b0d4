"""The differentiable ``MetaRMSProp``: ``torchopt_fn.rmsprop`` behind :class:`MetaOptimizer`."""

from __future__ import annotations

from torch import nn

from torchopt_fn import alias
from torchopt_fn.optim.meta.base import MetaOptimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["MetaRMSProp", "MetaRMSprop"]


class MetaRMSProp(MetaOptimizer):
    """Differentiable RMSProp, as ``torch.optim.RMSprop`` (PyTorch's epsilon placement).

    See :func:`torchopt_fn.rmsprop` for the arguments.
    """

    def __init__(
        self,
        module: nn.Module,
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
    ) -> None:
        """Meta-optimizes ``module``'s parameters (see :func:`torchopt_fn.rmsprop`)."""
        super().__init__(
            module,
            alias.rmsprop(
                lr=lr,
                alpha=alpha,
                eps=eps,
                weight_decay=weight_decay,
                momentum=momentum,
                centered=centered,
                initial_scale=initial_scale,
                nesterov=nesterov,
                maximize=maximize,
            ),
        )


MetaRMSprop = MetaRMSProp  # PyTorch's spelling
