"""Extracting, restoring, cloning and detaching the state of modules and meta-optimizers."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeAlias

import torch
from torch import nn

from optax_compat._runtime import tree_math
from torchopt_fn._module_containers import module_containers
from torchopt_fn.typing import Device, OptState, TensorContainer, TensorTree

if TYPE_CHECKING:
    from torchopt_fn.optim.meta.base import MetaOptimizer

__all__ = [
    "ModuleState",
    "stop_gradient",
    "extract_state_dict",
    "recover_state_dict",
    "module_clone",
    "module_detach_",
]

CopyMode: TypeAlias = Literal["reference", "copy", "deepcopy", "ref", "clone", "deepclone"]


class ModuleState(NamedTuple):
    """The tensors of a module: one dict per submodule with parameters (resp. buffers).

    Attributes:
      params: the ``_parameters`` of each submodule that has some, in ``modules()`` order.
      buffers: the ``_buffers`` of each submodule that has some.
      visual_contents: for :func:`torchopt_fn.visual.make_dot`, maps each non-leaf
        parameter's ``(grad_fn, output_nr)`` to ``(name, tensor)`` and each leaf parameter to
        its name; ``None`` unless extracted with ``enable_visual=True``.
      detach_buffers: whether buffers are detached copies (restored as fresh copies).
    """

    params: tuple[TensorContainer, ...]
    buffers: tuple[TensorContainer, ...]
    visual_contents: dict | None = None
    detach_buffers: bool = False


def _meta_optimizer_class() -> type:
    # The optimizers import this module; import theirs lazily.
    from torchopt_fn.optim.meta.base import MetaOptimizer

    return MetaOptimizer


def _detach_in_place(tensor: Any) -> None:
    if isinstance(tensor, torch.Tensor):
        requires_grad = tensor.requires_grad
        tensor.detach_().requires_grad_(requires_grad)


def stop_gradient(target: ModuleState | nn.Module | MetaOptimizer | TensorTree) -> None:
    """Detaches, in place, the tensors of ``target`` from the graph that produced them.

    Gradients flowing back stop at these tensors (they become leaves, keeping their
    ``requires_grad``), and the graph behind them can be freed. Used between outer iterations
    of meta-learning so that memory does not grow.

    Args:
      target: a module (its parameters), a :class:`ModuleState`, a meta-optimizer (its state)
        or a tree of tensors.
    """
    if isinstance(target, ModuleState):
        tensors: Any = (target.params, target.buffers)
    elif isinstance(target, nn.Module):
        tensors = tuple(target.parameters())
    elif isinstance(target, _meta_optimizer_class()):
        tensors = target.state_dict()
    else:
        tensors = target
    for tensor in tree_math.leaves(tensors):
        _detach_in_place(tensor)


def _replicator(by: CopyMode, device: Device | None) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function producing a tensor of the extracted state from an original tensor."""
    if by not in ("reference", "copy", "deepcopy", "ref", "clone", "deepclone"):
        raise ValueError(f"Unknown copy mode {by!r}: expected 'reference', 'copy' or 'deepcopy'.")
    mode = "reference" if by == "ref" else by.replace("clone", "copy")
    target = None if device is None else torch.device(device)

    def moved(t: torch.Tensor) -> torch.Tensor:
        return t if target is None else t.to(device=target)

    if mode == "reference":
        return moved
    if mode == "copy":
        return lambda t: moved(t.clone())
    return _detached_copy(target)


def _detached_copy(device: torch.device | None) -> Callable[[torch.Tensor], torch.Tensor]:
    """A copy cut from the graph, keeping ``requires_grad`` and the ``nn.Parameter`` class."""

    def replicate(t: torch.Tensor) -> torch.Tensor:
        copied = t.detach().clone()
        if device is not None:
            copied = copied.to(device=device)
        if isinstance(t, nn.Parameter):
            return nn.Parameter(copied, requires_grad=t.requires_grad)
        return copied.requires_grad_(t.requires_grad)

    return replicate


def _visual_contents(module: nn.Module, prefix: str) -> dict:
    """Names for the visualizer: ``leaf tensor -> name``, ``(grad_fn, output_nr) -> (name, t)``.

    TorchOpt keys a non-leaf parameter by its ``grad_fn``; a ``torch._foreach_*`` update gives
    all new parameters one shared ``grad_fn``, so the key here also holds the output number.
    """
    contents: dict = {}
    for name, tensor in module.named_parameters():
        if tensor.grad_fn is not None:
            contents[(tensor.grad_fn, tensor.output_nr)] = (prefix + name, tensor)
        else:
            contents[tensor] = prefix + name
    return contents


def extract_state_dict(
    target: nn.Module | MetaOptimizer,
    *,
    by: CopyMode = "reference",
    device: Device | None = None,
    with_buffers: bool = True,
    detach_buffers: bool = False,
    enable_visual: bool = False,
    visual_prefix: str = "",
) -> ModuleState | tuple[OptState, ...]:
    """Extracts the tensors of a module or the state of a meta-optimizer.

    Args:
      target: an ``nn.Module`` or a :class:`MetaOptimizer`.
      by: ``'reference'`` (the tensors themselves), ``'copy'`` (clones, still connected to the
        graph through ``CloneBackward``) or ``'deepcopy'`` (detached copies). ``'ref'``,
        ``'clone'`` and ``'deepclone'`` are synonyms.
      device: move the extracted tensors to this device.
      with_buffers: also extract the buffers of a module.
      detach_buffers: extract buffers as detached copies whatever ``by`` is.
      enable_visual: fill ``ModuleState.visual_contents`` for the visualizer.
      visual_prefix: prefix of the parameter names in ``visual_contents``.

    Returns:
      A :class:`ModuleState` for a module; for a meta-optimizer, the tuple of its group states
      (as in TorchOpt: the NamedTuple states themselves) with each tensor replicated as ``by``
      says.
    """
    replicate = _replicator(by, device)
    if isinstance(target, nn.Module):
        params, buffers = module_containers(target, with_buffers)
        replicate_buffer = _detached_copy(
            None if device is None else torch.device(device)) if detach_buffers else replicate
        return ModuleState(
            params=tuple(type(c)((k, replicate(v)) for k, v in c.items()
                               if isinstance(v, torch.Tensor)) for c in params),
            buffers=tuple(type(c)((k, replicate_buffer(v)) for k, v in c.items()
                                if isinstance(v, torch.Tensor)) for c in buffers),
            visual_contents=_visual_contents(target, visual_prefix) if enable_visual else None,
            detach_buffers=detach_buffers,
        )
    if isinstance(target, _meta_optimizer_class()):
        return tree_math.tree_map(
            lambda t: replicate(t) if isinstance(t, torch.Tensor) else t,
            tuple(target.state_groups))
    raise RuntimeError(f"Unexpected class of {target}")


def recover_state_dict(target: nn.Module | MetaOptimizer,
                       state: ModuleState | Sequence[OptState]) -> None:
    """Puts tensors extracted by :func:`extract_state_dict` back into ``target``.

    The tensors are placed as they are (not copied into the existing ones), so a module
    recovered from a ``'reference'`` extraction holds the very same tensors again.

    Args:
      target: the module or meta-optimizer the state was extracted from (or one with the same
        layout).
      state: what :func:`extract_state_dict` returned.
    """
    if isinstance(target, nn.Module):
        params_containers, buffers_containers = module_containers(target, with_buffers=True)
        buffers = state.buffers
        if state.detach_buffers:
            buffers = tuple({k: _detached_copy(None)(v) for k, v in c.items()} for c in buffers)
        if len(params_containers) != len(state.params):
            raise ValueError(f"The state holds parameters for {len(state.params)} submodules, "
                             f"the module has {len(params_containers)}.")
        for container, saved in itertools.chain(zip(params_containers, state.params, strict=True),
                                                zip(buffers_containers, buffers, strict=False)):
            container.update(saved)
    elif isinstance(target, _meta_optimizer_class()):
        target.load_state_dict(state)
    else:
        raise RuntimeError(f"Unexpected class of {target}")


def module_clone(target: nn.Module | MetaOptimizer | TensorTree, *,
                 by: CopyMode = "reference", detach_buffers: bool = False,
                 device: Device | None = None) -> nn.Module | MetaOptimizer | TensorTree:
    """Clones a module, a meta-optimizer or a tree of tensors.

    Args:
      target: what to clone.
      by: how the tensors are replicated, as in :func:`extract_state_dict`.
      detach_buffers: replicate a module's buffers as detached copies.
      device: move the cloned tensors to this device.

    Returns:
      The clone; everything but the tensors is a deep copy.
    """
    if isinstance(target, (nn.Module, _meta_optimizer_class())):
        if isinstance(target, nn.Module):
            tensors = tree_math.leaves(module_containers(target, with_buffers=True))
        else:
            tensors = tree_math.leaves(target.state_dict())
        # The tensors are replaced right after; do not deep-copy (or detach) them.
        cloned = copy.deepcopy(target, memo={id(t): t for t in tensors})
        state = extract_state_dict(target, by=by, with_buffers=True,
                                   detach_buffers=detach_buffers, device=device)
        recover_state_dict(cloned, state)
        return cloned
    return tree_math.tree_map(_replicator(by, device), target)


def module_detach_(
    target: ModuleState | nn.Module | MetaOptimizer | TensorTree,
) -> ModuleState | nn.Module | MetaOptimizer | TensorTree:
    """Detaches ``target`` in place (see :func:`stop_gradient`) and returns it."""
    stop_gradient(target)
    return target
