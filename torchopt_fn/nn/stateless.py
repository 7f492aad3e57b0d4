"""Temporarily swap the tensors of a module: the basis of stateless (functional) module calls."""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterable

import torch
from torch import nn

__all__ = ["swap_state", "reparametrize", "reparameterize"]

MISSING: torch.Tensor = object()  # type: ignore[assignment]
"""Marks an attribute that did not exist (with ``allow_missing``): swapping it back deletes it."""

NamedTensors = dict[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]


def _set_tensor(module: nn.Module, attr: str, value: torch.Tensor) -> None:
    """Stores ``value`` under ``attr`` in whichever registry holds it, bypassing type checks.

    Writing to ``_parameters`` directly lets a plain (non-leaf) tensor stand in for an
    ``nn.Parameter``, which is what differentiating through a module call requires.
    """
    for registry in ("_parameters", "_buffers", "_meta_parameters"):
        tensors = module.__dict__.get(registry)
        if tensors is not None and attr in tensors:
            tensors[attr] = value
            return
    setattr(module, attr, value)


def swap_state(
    module: nn.Module,
    named_tensors: NamedTensors,
    allow_missing: bool = False,
) -> dict[str, torch.Tensor]:
    """Replaces the parameters and/or buffers of ``module`` given by dotted name.

    Args:
        module: The module to modify in place.
        named_tensors: ``{"layer.weight": tensor, ...}`` or an iterable of such pairs. A value of
            ``MISSING`` deletes the attribute.
        allow_missing: Whether names that do not exist yet may be set (their old value is
            reported as ``MISSING``).

    Returns:
        The previous tensors by name, so that calling ``swap_state`` with them restores the module.
    """
    named_tensors = dict(named_tensors)
    submodules: dict[str, nn.Module] = {"": module}

    def submodule(path: str) -> nn.Module:
        if path not in submodules:
            parent, _, attr = path.rpartition(".")
            submodules[path] = getattr(submodule(parent), attr)
        return submodules[path]

    def swap(path: str, value: torch.Tensor) -> torch.Tensor:
        parent, _, attr = path.rpartition(".")
        owner = submodule(parent)
        previous = getattr(owner, attr, MISSING) if allow_missing else getattr(owner, attr)
        if value is MISSING:
            delattr(owner, attr)
        else:
            _set_tensor(owner, attr, value)
        return previous

    return {name: swap(name, tensor) for name, tensor in named_tensors.items()}


@contextlib.contextmanager
def reparametrize(
    module: nn.Module,
    named_tensors: NamedTensors,
    allow_missing: bool = False,
) -> Generator[nn.Module, None, None]:
    """Runs ``module`` with some of its tensors replaced (see :func:`swap_state`).

    The original tensors are restored on exit, also when an exception is raised.

    Args:
        module: The module to reparametrize.
        named_tensors: The replacement tensors by dotted name.
        allow_missing: Whether names that do not exist yet may be set (and are deleted on exit).

    Yields:
        The module itself.
    """
    originals: dict[str, torch.Tensor] = {}
    try:
        originals = swap_state(module, named_tensors, allow_missing=allow_missing)
        yield module
    finally:
        swap_state(module, originals, allow_missing=allow_missing)


reparameterize = reparametrize
