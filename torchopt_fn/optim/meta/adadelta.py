"""The differentiable ``MetaAdaDelta``: ``torchopt_fn.adadelta`` behind :class:`MetaOptimizer`."""

from __future__ import annotations

from torch import nn

from torchopt_fn import alias
from torchopt_fn.optim.meta.base import MetaOptimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["MetaAdaDelta", "MetaAdadelta"]


class MetaAdaDelta(MetaOptimizer):
    """Differentiable AdaDelta, as ``torch.optim.Adadelta``.

    See :func:`torchopt_fn.adadelta` for the arguments.
    """

    def __init__(
        self,
        module: nn.Module,
        lr: ScalarOrSchedule = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        *,
        moment_requires_grad: bool = True,
    ) -> None:
        """Meta-optimizes ``module``'s parameters (see :func:`torchopt_fn.adadelta`)."""
        super().__init__(
            module,
            alias.adadelta(
                lr=lr,
                rho=rho,
                eps=eps,
                weight_decay=weight_decay,
                moment_requires_grad=moment_requires_grad,
            ),
        )


MetaAdadelta = MetaAdaDelta  # PyTorch's spelling
