"""TorchOpt's ``AdamOp``: one Adam step on one tensor, on ``optax_compat``'s Adam engine."""

from __future__ import annotations

import torch

import optax_compat
from optax_compat._runtime import adam_engine

__all__ = ["AdamOp"]


class AdamOp:
    """Adam's moment updates and rescaling of a single tensor (TorchOpt's operator interface).

    TorchOpt implements this with a compiled kernel; here it is one step of the Adam engine
    (multi-tensor kernels, differentiable when ``inplace=False``, with the accelerated op's
    backward: 0 where the new first moment is 0).
    """

    def __init__(self, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, *,
                 eps_root: float = 0.0, inplace: bool = True) -> None:
        """Builds the operator.

        Args:
          b1: decay rate of the first moment.
          b2: decay rate of the second moment.
          eps: added to the denominator outside the square root.
          eps_root: added to the second moment inside the square root.
          inplace: write the new moments into ``mu`` and ``nu`` (and may reuse ``updates``).
        """
        self.b1, self.b2, self.eps, self.eps_root, self.inplace = b1, b2, eps, eps_root, inplace
        self._scale_by_adam = adam_engine.scale_by_adam(adam_engine.AdamHyperParams(
            b1, b2, eps, eps_root, zero_where_mu_zero=True), optax_compat.ScaleByAdamState)

    def __call__(self, mu: torch.Tensor, nu: torch.Tensor, updates: torch.Tensor | None,
                 count: int | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                     torch.Tensor | None]:
        """Returns ``(new_mu, new_nu, new_updates)`` for step number ``count`` (from 1).

        A ``None`` update leaves the moments unchanged and gives ``None``.
        """
        if updates is None:
            return mu, nu, None
        previous = torch.as_tensor(count, dtype=torch.int32, device=updates.device) - 1
        state = optax_compat.ScaleByAdamState(count=previous, mu=mu, nu=nu)
        new_updates, new_state = self._scale_by_adam.update(updates, state,
                                                            inplace=self.inplace)
        return new_state.mu, new_state.nu, new_updates
