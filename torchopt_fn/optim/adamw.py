"""The ``AdamW`` optimizer: ``torchopt_fn.adamw`` behind :class:`Optimizer`."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from torchopt_fn import alias
from torchopt_fn.optim.base import Optimizer
from torchopt_fn.typing import OptState, Params, ScalarOrSchedule

__all__ = ["AdamW"]


class AdamW(Optimizer):
    """Adam with decoupled weight decay, as ``torch.optim.AdamW``.

    See :func:`torchopt_fn.adamw` for the arguments. With ``use_accelerated_op=True`` (and no
    ``eps_root`` or ``mask``) each step runs PyTorch's fused AdamW kernel in place, on the
    same state (the alias's whole in-place step, :func:`optax_compat.inplace_step`).
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: ScalarOrSchedule = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        *,
        eps_root: float = 0.0,
        mask: OptState | Callable[[Params], OptState] | None = None,
        maximize: bool = False,
        use_accelerated_op: bool = False,
    ) -> None:
        """Builds the optimizer over ``params`` (see :func:`torchopt_fn.adamw`)."""
        super().__init__(
            params,
            alias.adamw(
                lr=lr,
                betas=betas,
                eps=eps,
                weight_decay=weight_decay,
                eps_root=eps_root,
                mask=mask,
                moment_requires_grad=False,
                maximize=maximize,
                use_accelerated_op=use_accelerated_op,
            ),
        )
