"""``MetaOptimizer``: differentiable optimization of a module's parameters (MAML-style)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from optax_compat import checkpoint
from optax_compat._runtime import tree_math
from torchopt_fn._graph_tags import tag_optimizer_step
from torchopt_fn._module_containers import extract_module_containers
from torchopt_fn.base import GradientTransformation, UninitializedState
from torchopt_fn.optim import _state_dict
from torchopt_fn.optim.base import as_transformation
from torchopt_fn.typing import ModuleTensorContainers, OptState
from torchopt_fn.update import apply_updates

__all__ = ["MetaOptimizer"]


def _parameter_names(module: nn.Module) -> list[tuple[str, ...]]:
    """For each non-empty ``_parameters`` dict of ``module`` (``modules()`` order), its names."""
    return [tuple(f"{prefix}.{key}" if prefix else key for key in submodule._parameters)
            for prefix, submodule in module.named_modules() if submodule._parameters]


class MetaOptimizer:
    """Updates a module's parameters out of place, so that the updates can be differentiated.

    :meth:`step` computes the gradients of a loss with ``create_graph=True``, transforms them
    with ``impl.update(..., inplace=False)`` and puts the new parameters (non-leaf tensors)
    into the module. An outer loss computed after a few steps can be differentiated with
    respect to the initial parameters (and hyperparameters): MAML and its relatives.
    """

    def __init__(self, module: nn.Module, impl: GradientTransformation) -> None:
        """Builds the meta-optimizer.

        Args:
          module: the network whose parameters are optimized.
          impl: the transformation, e.g. ``torchopt_fn.sgd(lr, moment_requires_grad=True)``.
        """
        self.impl: GradientTransformation = as_transformation(impl)
        self.param_containers_groups: list[ModuleTensorContainers] = []
        self.state_groups: list[OptState] = []
        # Each group's parameter names, in flattening order: the visualizer labels steps with them.
        self._parameter_name_groups: list[list[str]] = []
        self._step_count = 0
        self.add_param_group(module)

    def add_param_group(self, module: nn.Module) -> None:
        """Adds the parameters of ``module`` as a new group, with its own state.

        Raises:
          TypeError: if the parameters are DTensors (an FSDP2 ``fully_shard`` module).
        """
        containers = extract_module_containers(module, with_buffers=False)[0]
        if tree_math.is_distributed(tree_math.leaves(containers)):
            # FSDP2 all-gathers its sharded parameters into other tensors for the forward pass
            # and reduces gradients in backward hooks: ``autograd.grad`` of a loss with respect
            # to the sharded parameters has no path to follow, twice-differentiable or not.
            raise TypeError(
                f"{type(self).__name__} cannot optimize DTensor (FSDP2-sharded) parameters: a "
                "differentiable step needs the loss's graph to reach them. Wrap the module "
                "with DistributedDataParallel instead (each rank keeps whole parameters).")
        self.param_containers_groups.append(containers)
        # A parameter slot holding None (``bias=False``) has no leaf, so it gets no name.
        self._parameter_name_groups.append(tree_math.leaves(tuple(
            {key: name for (key, value), name in zip(container.items(), container_names,
                                                     strict=True) if value is not None}
            for container, container_names in zip(containers, _parameter_names(module),
                                                  strict=True))))
        self.state_groups.append(UninitializedState())

    def _initialized_state(self, index: int) -> OptState:
        state = self.state_groups[index]
        if isinstance(state, UninitializedState):
            with torch.no_grad():
                state = self.impl.init(tree_math.leaves(self.param_containers_groups[index]))
        return state

    def step(self, loss: torch.Tensor) -> None:
        """Takes one differentiable step on every group.

        A parameter that ``loss`` does not depend on (a ``None`` gradient) keeps its value and
        its optimizer state, as ``torch.optim`` skips it.

        Args:
          loss: a scalar computed from the module's current parameters.
        """
        self._step_count += 1
        label = f"{type(self).__name__} step {self._step_count}"
        for index, containers in enumerate(self.param_containers_groups):
            flat_params, treespec = tree_math.flatten(containers)
            state = self.state_groups[index]
            if isinstance(state, UninitializedState):
                state = self.impl.init(flat_params)
            grads = list(torch.autograd.grad(loss, flat_params, create_graph=True,
                                             allow_unused=True))
            updates, new_state = self.impl.update(grads, state, params=flat_params,
                                                  inplace=False)
            new_params = apply_updates(flat_params, updates, inplace=False)
            tag_optimizer_step(new_params, (flat_params, loss), label, state=state,
                               names=self._parameter_name_groups[index])
            self.state_groups[index] = new_state
            new_containers = tree_math.unflatten(treespec, new_params)
            for container, new_container in zip(containers, new_containers, strict=True):
                container.update(new_container)

    def state_dict(self) -> tuple[Any, ...]:
        """The state of each group as plain containers of the state tensors (references).

        NamedTuple states become dicts tagged with their class name, so that a checkpoint
        loads with ``torch.load(..., weights_only=True)``.
        """
        return tuple(checkpoint.state_to_dict(state) for state in self.state_groups)

    def load_state_dict(self, state_dict: Sequence[Any]) -> None:
        """Loads a state returned by :meth:`state_dict`, keeping references to its tensors.

        Raises:
          ValueError: if the state is from a different optimizer or parameter layout; the
            meta-optimizer is left unchanged.
        """
        self.state_groups[:] = _state_dict.restore_groups(
            state_dict, self._initialized_state, len(self.state_groups), copy=False)
