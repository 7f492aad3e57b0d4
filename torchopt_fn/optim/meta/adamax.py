"""The differentiable ``MetaAdaMax``: ``torchopt_fn.adamax`` behind :class:`MetaOptimizer`."""

from __future__ import annotations

from torch import nn

from torchopt_fn import alias
from torchopt_fn.optim.meta.base import MetaOptimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["MetaAdaMax", "MetaAdamax"]


class MetaAdaMax(MetaOptimizer):
    """Differentiable AdaMax, as ``torch.optim.Adamax``.

    See :func:`torchopt_fn.adamax` for the arguments.
    """

    def __init__(
        self,
        module: nn.Module,
        lr: ScalarOrSchedule = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        moment_requires_grad: bool = True,
    ) -> None:
        """Meta-optimizes ``module``'s parameters (see :func:`torchopt_fn.adamax`)."""
        super().__init__(
            module,
            alias.adamax(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                moment_requires_grad=moment_requires_grad,
            ),
        )


MetaAdamax = MetaAdaMax  # PyTorch's spelling
