"""``FuncOptimizer``: a functional optimizer that keeps its own state."""

from __future__ import annotations

import warnings

import optree
import torch

from optax_compat._runtime import tree_math
from torchopt_fn.base import GradientTransformation, UninitializedState
from torchopt_fn.optim.base import as_transformation
from torchopt_fn.typing import OptState, Params
from torchopt_fn.update import apply_updates

__all__ = ["FuncOptimizer"]


class FuncOptimizer:
    """Holds the state of a transformation and steps a tree of parameters differentiably.

    Written for ``torch.func.functional_call``-style code: ``params = optimizer.step(loss,
    params)`` returns new parameters connected to the old ones through the graph.

    With ``inplace=True``, as in TorchOpt, the parameters and the state are updated in place
    and returned. A parameter that is an autograd leaf requiring grad, stepped by an update
    that autograd records (the gradients are computed with ``create_graph=True``), gets the
    new values outside autograd, as TorchOpt's ``p.data.add_(u)`` does: the step's
    meta-gradient is lost there, and a warning names the parameter (once per optimizer).
    Other parameters are updated within the graph (:func:`~torchopt_fn.apply_updates`).
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
        self._warned_lost_meta_gradient = False

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
        if inplace:
            updates = self._add_outside_autograd(leaves, treespec, updates)
        return apply_updates(params, updates, inplace=inplace)

    def _add_outside_autograd(self, leaves: list[torch.Tensor], treespec: optree.PyTreeSpec,
                              updates: Params) -> Params:
        """Adds the updates that autograd cannot record in place to their parameters, as
        TorchOpt does, and returns ``updates`` with ``None`` in their place.

        Those are the updates that autograd records for leaves that require grad, which an
        in-place operation within the graph would modify.
        """
        if not torch.is_grad_enabled():
            return updates
        update_leaves = treespec.flatten_up_to(updates)
        lost = [i for i, (p, u) in enumerate(zip(leaves, update_leaves, strict=True))
                if u is not None and u.requires_grad and p.is_leaf and p.requires_grad]
        if not lost:
            return updates
        if not self._warned_lost_meta_gradient:
            self._warned_lost_meta_gradient = True
            paths = treespec.paths()
            others = f" (and {len(lost) - 1} more)" if len(lost) > 1 else ""
            warnings.warn(
                f"FuncOptimizer(inplace=True) updates the parameter at "
                f"{tree_math.path_str(paths[lost[0]])}{others} outside autograd, as TorchOpt "
                "does: it is a leaf that requires grad, and its update is recorded by autograd, "
                "so the meta-gradient through this step is lost. Use inplace=False to "
                "differentiate through the step.", UserWarning, stacklevel=3)
        with torch.no_grad():
            tree_math.add_([leaves[i] for i in lost], [update_leaves[i] for i in lost])
        for i in lost:
            update_leaves[i] = None
        return tree_math.unflatten(treespec, update_leaves)

    def state_dict(self) -> OptState:
        """The optimizer state (references to its tensors)."""
        return self.optim_state

    def load_state_dict(self, state_dict: OptState) -> None:
        """Sets the optimizer state (keeps references to its tensors)."""
        self.optim_state = state_dict
