"""The differentiable ``MetaAdaGrad``: ``torchopt_fn.adagrad`` behind :class:`MetaOptimizer`."""

from __future__ import annotations

from torch import nn

from torchopt_fn import alias
from torchopt_fn.optim.meta.base import MetaOptimizer
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["MetaAdaGrad", "MetaAdagrad"]


class MetaAdaGrad(MetaOptimizer):
    """Differentiable AdaGrad, as ``torch.optim.Adagrad``.

    See :func:`torchopt_fn.adagrad` for the arguments.
    """

    def __init__(
        self,
        module: nn.Module,
        lr: ScalarOrSchedule = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        *,
        maximize: bool = False,
    ) -> None:
        """Meta-optimizes ``module``'s parameters (see :func:`torchopt_fn.adagrad`)."""
        super().__init__(
            module,
            alias.adagrad(
                lr=lr,
                lr_decay=lr_decay,
                weight_decay=weight_decay,
                initial_accumulator_value=initial_accumulator_value,
                eps=eps,
                maximize=maximize,
            ),
        )


MetaAdagrad = MetaAdaGrad  # PyTorch's spelling
