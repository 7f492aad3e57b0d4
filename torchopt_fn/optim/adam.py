"""The ``Adam`` optimizer: ``torchopt_fn.adam`` behind :class:`Optimizer`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from optax_compat import inplace_step
from torchopt_fn import alias
from torchopt_fn.base import GradientTransformation
from torchopt_fn.optim.base import HyperparameterOptimizer, StepFn
from torchopt_fn.typing import ScalarOrSchedule

__all__ = ["Adam"]


class Adam(HyperparameterOptimizer):
    """Adam, as ``torch.optim.Adam``.

    See :func:`torchopt_fn.adam` for the arguments; the numeric ones are entries of every
    parameter group (``param_groups[i]['lr']``, ``'betas'``, ...), which schedulers may change.
    Each step is the alias's whole in-place step (:func:`optax_compat.inplace_step`), on the
    same state: with ``use_accelerated_op=True`` (and no ``eps_root``) PyTorch's fused Adam
    kernel, else the Adam engine's multi-tensor path (whose temporaries live in copies of the
    gradients: TorchOpt's ``inplace=True`` steps overwrite the gradients, ``torch.optim``'s and
    these only read them).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: ScalarOrSchedule = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        eps_root: float = 0.0,
        maximize: bool = False,
        use_accelerated_op: bool = False,
        fused: bool | None = None,
    ) -> None:
        """Builds the optimizer over ``params`` (see :func:`torchopt_fn.adam`)."""
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         eps_root=eps_root, maximize=maximize,
                         use_accelerated_op=use_accelerated_op,
                         fused=fused)

    def _build(self, **arguments: Any) -> tuple[GradientTransformation, StepFn | None]:
        impl = alias.adam(**arguments, moment_requires_grad=False)
        return impl, inplace_step(impl)
