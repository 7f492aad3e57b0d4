"""``Optimizer``: a ``torch.optim``-like optimizer driven by a gradient transformation."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import optree
import torch

import optax_compat._src.base as optax_base
from optax_compat import inplace_step
from optax_compat._src.building_blocks import tree_math
from torchopt_fn.base import GradientTransformation, UninitializedState
from torchopt_fn.optim import _state_dict
from torchopt_fn.transform.utils import from_optax
from torchopt_fn.typing import OptState, Params, TupleOfTensors
from torchopt_fn.update import apply_updates

__all__ = ["Optimizer"]


def as_transformation(impl: Any) -> GradientTransformation:
    """``impl`` as a TorchOpt-style transformation (``optax_compat`` ones are adapted).

    Raises:
      TypeError: if ``impl`` is not a gradient transformation.
    """
    if isinstance(impl, GradientTransformation):
        return impl
    if isinstance(impl, optax_base.GradientTransformation):
        return from_optax(impl)
    raise TypeError(f"{impl} (type: {type(impl).__name__}) is not a GradientTransformation")


class _Frozen:
    """Copies of the parameters without gradient and of their state buffers, to put back.

    The transformations update a whole group at once; ``torch.optim`` skips parameters whose
    ``.grad`` is ``None``. The group is stepped with zero gradients for them, then their values
    and their entries in every per-parameter part of the state (a tuple shaped like the group,
    such as ``mu``) are restored.
    """

    def __init__(self, params: TupleOfTensors, state: OptState, indices: list[int]) -> None:
        self.params = params
        self.indices = indices
        self.saved_params = [params[i].clone() for i in indices]
        self.shapes = [p.shape for p in params]
        leaves, _ = self._flatten(state)
        self.saved_buffers = [[leaf[i].clone() for i in indices] if self._per_parameter(leaf)
                              else None for leaf in leaves]

    def _per_parameter(self, node: Any) -> bool:
        return (isinstance(node, tuple) and not hasattr(node, "_fields")
                and len(node) == len(self.shapes)
                and all(isinstance(t, torch.Tensor) and t.shape == shape
                        for t, shape in zip(node, self.shapes, strict=True)))

    def _flatten(self, state: OptState) -> tuple[list[Any], Any]:
        return optree.tree_flatten(state, is_leaf=self._per_parameter,
                                   none_is_leaf=tree_math.NONE_IS_LEAF,
                                   namespace=tree_math.NAMESPACE)

    def restore(self, state: OptState) -> OptState:
        """Puts the saved parameters back and returns ``state`` with the saved buffers."""
        for i, saved in zip(self.indices, self.saved_params, strict=True):
            self.params[i].copy_(saved)
        leaves, treespec = self._flatten(state)
        for position, saved in enumerate(self.saved_buffers):
            if saved is not None:
                restored = list(leaves[position])
                for i, buffer in zip(self.indices, saved, strict=True):
                    restored[i] = buffer
                leaves[position] = tuple(restored)
        return optree.tree_unflatten(treespec, leaves)


class Optimizer:
    """An optimizer with :class:`torch.optim.Optimizer`'s interface and a functional core.

    Each parameter group is a tuple of tensors with its own optimizer state, created by
    ``impl.init`` at the first :meth:`step`. A step updates the parameters in place under
    ``torch.no_grad`` (``impl.update(..., inplace=True)`` may reuse the state buffers and
    overwrite the ``.grad`` tensors, as in TorchOpt). Parameters whose ``.grad`` is ``None``
    are skipped, as by ``torch.optim``: they and their per-parameter state buffers keep their
    values (a step counter shared by the group still advances).

    When ``impl`` has a whole in-place step (:func:`optax_compat.inplace_step`, e.g. the
    accelerated Adam aliases), :meth:`step` calls it instead of ``update`` and
    :func:`apply_updates`.
    """

    def __init__(self, params: Iterable[torch.Tensor], impl: GradientTransformation) -> None:
        """Builds the optimizer.

        Args:
          params: the tensors to optimize (any tree of tensors).
          impl: the transformation, e.g. ``torchopt_fn.adam(...)`` or a ``chain``; an
            ``optax_compat`` transformation is accepted too.
        """
        self.impl: GradientTransformation = as_transformation(impl)
        self._fused_step: Callable[[Any, Any, OptState], OptState] | None = inplace_step(
            self.impl)
        self.param_groups: list[TupleOfTensors] = []
        self.param_treespecs: list[Any] = []
        self.state_groups: list[OptState] = []
        if not isinstance(params, (list, tuple)):
            params = tuple(params)
        self.add_param_group(params)

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zeroes the gradients of the parameters (or sets them to ``None``)."""
        for group in self.param_groups:
            for param in group:
                if set_to_none:
                    param.grad = None
                elif param.grad is not None:
                    if param.grad.grad_fn is not None:
                        param.grad.detach_()
                    else:
                        param.grad.requires_grad_(False)
                    param.grad.zero_()

    def add_param_group(self, params: Params) -> None:
        """Adds a tree of tensors as a new group, with its own state."""
        flat_params, treespec = tree_math.flatten(params)
        self.param_groups.append(tuple(flat_params))
        self.param_treespecs.append(treespec)
        self.state_groups.append(UninitializedState())

    def _initialized_state(self, index: int) -> OptState:
        state = self.state_groups[index]
        if isinstance(state, UninitializedState):
            with torch.no_grad():
                state = self.impl.init(self.param_groups[index])
        return state

    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        """Updates the parameters from their ``.grad``, like :meth:`torch.optim.Optimizer.step`.

        Args:
          closure: re-evaluates the model and returns the loss (called with grad enabled).

        Returns:
          The closure's loss, or ``None``.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
            for index, params in enumerate(self.param_groups):
                gradless = [i for i, p in enumerate(params) if p.grad is None]
                if len(gradless) == len(params):
                    continue
                state = self._initialized_state(index)
                frozen = _Frozen(params, state, gradless) if gradless else None
                grads = tuple(torch.zeros_like(p) if p.grad is None else p.grad for p in params)
                if self._fused_step is not None:
                    state = self._fused_step(params, grads, state)
                else:
                    updates, state = self.impl.update(grads, state, params=params, inplace=True)
                    apply_updates(params, updates, inplace=True)
                self.state_groups[index] = state if frozen is None else frozen.restore(state)
        return loss

    def state_dict(self) -> tuple[Any, ...]:
        """The state of each group, as plain containers of tensors (references, not copies).

        NamedTuple states become dicts tagged with their class name, so a checkpoint saved
        with :func:`torch.save` loads with ``torch.load(..., weights_only=True)``.
        """
        return tuple(_state_dict.to_plain(state) for state in self.state_groups)

    def load_state_dict(self, state_dict: Sequence[Any]) -> None:
        """Loads a state returned by :meth:`state_dict` (copies its tensors).

        Raises:
          ValueError: if the state is from a different optimizer or parameter layout; the
            optimizer is left unchanged.
        """
        self.state_groups[:] = _state_dict.restore_groups(
            state_dict, self._initialized_state, len(self.state_groups),
            lambda loaded, own: loaded.to(own.device, copy=True))
