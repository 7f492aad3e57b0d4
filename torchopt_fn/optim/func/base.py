"""``FuncOptimizer``: a functional optimizer that keeps its own state."""

from __future__ import annotations

import torch

from optax_compat._src.building_blocks import tree_math
from torchopt_fn.base import GradientTransformation, UninitializedState
from torchopt_fn.optim.base import as_transformation
from torchopt_fn.typing import OptState, Params
from torchopt_fn.update import apply_updates

__all__ = ["FuncOptimizer"]


class FuncOptimizer:
    """Holds the state of a transformation and steps a tree of parameters differentiably.

    Written for ``torch.func.functional_call``-style code: ``params = optimizer.step(loss,
    params)`` returns new parameters connected to the old ones through the graph.
    """

    def __init__(self, impl: GradientTransformation, *, inplace: bool = False) -> None:
        """Builds the wrapper.

        Args:
          impl: the transformation, e.g. ``torchopt_fn.adam(1e-3)``.
          inplace: the default of :meth:`step`'s ``inplace``.
        """
        self.impl: GradientTransformation = as_transformation(impl)
        self.optim_state: OptState = UninitializedState()
        self.inplace: bool = bool(inplace)

    def step(self, loss: torch.Tensor, params: Params, inplace: bool | None = None) -> Params:
        """Differentiates ``loss`` with respect to ``params`` and returns the updated params.

        Args:
          loss: a scalar computed from ``params``.
          params: a tree of tensors.
          inplace: update ``params`` and the state in place (not differentiable); ``None``
            uses the constructor's default.

        Returns:
          The new parameters, with the structure of ``params``.

        A leaf that ``loss`` does not depend on has a ``None`` gradient: it is returned
        unchanged and keeps its optimizer state (as ``torch.optim`` skips it).
        """
        if isinstance(self.optim_state, UninitializedState):
            self.optim_state = self.impl.init(params)
        if inplace is None:
            inplace = self.inplace
        leaves, treespec = tree_math.flatten(params)
        grads = torch.autograd.grad(loss, leaves, create_graph=True, allow_unused=True)
        updates, self.optim_state = self.impl.update(
            tree_math.unflatten(treespec, list(grads)), self.optim_state, params=params,
            inplace=inplace)
        return apply_updates(params, updates, inplace=inplace)

    def state_dict(self) -> OptState:
        """The optimizer state (references to its tensors)."""
        return self.optim_state

    def load_state_dict(self, state_dict: OptState) -> None:
        """Sets the optimizer state (keeps references to its tensors)."""
        self.optim_state = state_dict
