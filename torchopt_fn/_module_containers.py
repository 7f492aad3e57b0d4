"""The parameter and buffer dicts of a module's submodules, which meta-optimizers update."""

from __future__ import annotations

from torch import nn

from torchopt_fn.typing import ModuleTensorContainers

__all__ = ["extract_module_containers", "module_containers"]


def module_containers(module: nn.Module, with_buffers: bool) -> tuple[list[dict], list[dict]]:
    """The non-empty ``_parameters`` and ``_buffers`` dicts of each submodule (references)."""
    params: list[dict] = []
    buffers: list[dict] = []
    for submodule in module.modules():  # each submodule once, parents first
        if submodule._parameters:
            params.append(submodule._parameters)
        if with_buffers and submodule._buffers:
            buffers.append(submodule._buffers)
    return params, buffers


def extract_module_containers(
    module: nn.Module, with_buffers: bool = True,
) -> tuple[ModuleTensorContainers, ModuleTensorContainers]:
    """References to the parameter and buffer dicts of ``module`` and its submodules."""
    if not isinstance(module, nn.Module):
        raise RuntimeError(f"Unexpected class of {module}")
    params, buffers = module_containers(module, with_buffers)
    return tuple(params), tuple(buffers)
