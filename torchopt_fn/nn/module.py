"""A module that tells its parameters apart from the meta-parameters it was constructed with."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch
from torch import nn
from typing_extensions import Self

from torchopt_fn import pytree
from torchopt_fn.typing import TensorContainer

__all__ = ["MetaGradientModule"]


class MetaInputsContainer(NamedTuple):
    """The tensors requiring grad and the training modules passed to the constructor."""

    meta_parameters: set[torch.Tensor]
    meta_modules: set[nn.Module]


def _remove_attribute(name: str, *registries: dict[str, Any] | set[str]) -> None:
    """Removes ``name`` from each registry that has it."""
    for registry in registries:
        if isinstance(registry, dict):
            registry.pop(name, None)
        else:
            registry.discard(name)


def _check_name(kind: str, name: Any) -> None:
    """Rejects names that cannot be attributes of a module."""
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string. Got {torch.typename(name)}")
    if "." in name:
        raise KeyError(f"{kind} name can't contain '.', got: '{name}'")
    if name == "":
        raise KeyError(f"{kind} name can't be empty string ''")


def _check_free_name(module: nn.Module, kind: str, name: Any, registry: dict[str, Any]) -> None:
    """Rejects registering a ``kind`` as ``name`` when the name cannot be an attribute or is
    taken by an attribute outside ``registry`` (where that kind is registered)."""
    _check_name(kind, name)
    if hasattr(module, name) and name not in registry:
        raise KeyError(f"attribute '{name}' already exists")


def _check_grad_tensor(kind: str, name: str, value: Any) -> None:
    """Rejects registering ``value`` as the ``kind`` (parameter or meta-parameter) ``name``
    unless it is a tensor requiring grad."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"cannot assign '{torch.typename(value)}' object to {kind} "
                        f"'{name}' (torch.Tensor or None required)")
    if not value.requires_grad:
        raise ValueError(
            f"cannot assign Tensor that `requires_grad=False` to {kind} '{name}'")


class MetaGradientModule(nn.Module):
    """Base class for modules that hold both parameters and meta-parameters.

    Tensors requiring grad and training modules passed to the constructor are *meta*: assigning
    them as attributes registers them as meta-parameters / meta-modules, which
    ``parameters()`` does not yield (use :meth:`meta_parameters`). Other tensors requiring grad
    (not only ``nn.Parameter``) become ordinary parameters. This is how an inner problem keeps its
    own variables apart from the outer variables it is differentiated with respect to.
    """

    _meta_inputs: MetaInputsContainer
    _meta_parameters: TensorContainer
    _meta_modules: dict[str, nn.Module | None]

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        """Creates the instance and records the meta inputs among the constructor arguments."""
        instance = super().__new__(cls)
        leaves = pytree.tree_leaves((args, kwargs))
        meta_parameters = {x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad}
        meta_modules = {x for x in leaves if isinstance(x, nn.Module) and x.training}
        for meta_module in tuple(meta_modules):
            meta_parameters.update(meta_module.parameters())
            meta_modules.update(meta_module.modules())
        # Set before nn.Module.__init__ runs, bypassing our own __setattr__.
        object.__setattr__(instance, "_meta_inputs",
                           MetaInputsContainer(meta_parameters, meta_modules))
        object.__setattr__(instance, "_meta_parameters", OrderedDict())
        object.__setattr__(instance, "_meta_modules", OrderedDict())
        return instance

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Initializes the module (the arguments were already inspected by ``__new__``)."""
        del args, kwargs
        super().__init__()

    def __getattr__(self, name: str) -> Any:
        """Looks ``name`` up among parameters, buffers, modules, meta-parameters, meta-modules."""
        for registry in ("_parameters", "_buffers", "_modules", "_meta_parameters",
                         "_meta_modules"):
            values = self.__dict__.get(registry)
            if values is not None and name in values:
                return values[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        """Registers tensors requiring grad and modules as (meta-)parameters and (meta-)modules."""
        params = self.__dict__.get("_parameters")
        meta_params = self.__dict__.get("_meta_parameters")
        modules = self.__dict__.get("_modules")
        meta_modules = self.__dict__.get("_meta_modules")
        if isinstance(value, torch.Tensor) and value.requires_grad:
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            _remove_attribute(name, self.__dict__, self._buffers, self._modules,
                              self._non_persistent_buffers_set, self._meta_parameters,
                              self._meta_modules)
            if value in self._meta_inputs.meta_parameters:
                self.register_meta_parameter(name, value)
            else:
                self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{torch.typename(value)}' as parameter '{name}' "
                                "(torch.Tensor or None expected)")
            self.register_parameter(name, value)
        elif meta_params is not None and name in meta_params:
            if value is not None:
                raise TypeError(f"cannot assign '{torch.typename(value)}' as meta-parameter "
                                f"'{name}' (torch.Tensor or None expected)")
            self.register_meta_parameter(name, value)
        elif isinstance(value, nn.Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            _remove_attribute(name, self.__dict__, self._parameters, self._buffers,
                              self._non_persistent_buffers_set, self._meta_parameters,
                              self._meta_modules)
            if value in self._meta_inputs.meta_modules:
                meta_modules[name] = value
            else:
                modules[name] = value
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{torch.typename(value)}' as child module "
                                f"'{name}' (torch.nn.Module or None expected)")
            modules[name] = value
        elif meta_modules is not None and name in meta_modules:
            if value is not None:
                raise TypeError(f"cannot assign '{torch.typename(value)}' as meta-module "
                                f"'{name}' (torch.nn.Module or None expected)")
            meta_modules[name] = value
        else:
            buffers = self.__dict__.get("_buffers")
            if buffers is not None and name in buffers:
                if value is not None and not isinstance(value, torch.Tensor):
                    raise TypeError(f"cannot assign '{torch.typename(value)}' as buffer "
                                    f"'{name}' (torch.Tensor or None expected)")
                buffers[name] = value
            else:
                object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        """Deletes a parameter, buffer, module, meta-parameter, meta-module or plain attribute."""
        for registry in ("_parameters", "_buffers", "_modules", "_meta_parameters",
                         "_meta_modules"):
            values = self.__dict__[registry]
            if name in values:
                del values[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: torch.Tensor | None) -> None:
        """Adds a parameter: any tensor requiring grad that is not a meta-parameter.

        Args:
            name: The attribute name.
            param: The tensor, or ``None`` for an absent parameter.
        """
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_free_name(self, "parameter", name, self._parameters)
        if param is None:
            self._parameters[name] = None
            return
        _check_grad_tensor("parameter", name, param)
        if param in self._meta_inputs.meta_parameters:
            raise ValueError(f"cannot assign Tensor that is a meta-parameter to parameter "
                             f"'{name}'. Use self.register_meta_parameter() instead.")
        self._parameters[name] = param  # type: ignore[assignment]

    def register_meta_parameter(self, name: str, param: torch.Tensor | None) -> None:
        """Adds a meta-parameter, yielded by :meth:`meta_parameters` and not by ``parameters()``.

        Args:
            name: The attribute name.
            param: The tensor (requiring grad), or ``None``.
        """
        if "_meta_parameters" not in self.__dict__:
            raise AttributeError(
                "cannot assign meta-parameter before MetaGradientModule.__init__() call")
        _check_free_name(self, "meta-parameter", name, self._meta_parameters)
        if param is not None:
            _check_grad_tensor("meta-parameter", name, param)
        self._meta_parameters[name] = param

    def add_module(self, name: str, module: nn.Module | None) -> None:
        """Adds a child module (not a meta-module).

        Args:
            name: The attribute name.
            module: The child module, or ``None``.
        """
        if not isinstance(module, nn.Module) and module is not None:
            raise TypeError(f"{torch.typename(module)} is not a Module subclass")
        _check_free_name(self, "module", name, self._modules)
        if module in self._meta_inputs.meta_modules:
            raise ValueError(f"cannot add module that is a meta-module to module '{name}'. "
                             "Use self.add_meta_module() instead.")
        self._modules[name] = module

    def register_module(self, name: str, module: nn.Module | None) -> None:
        """Alias of :meth:`add_module`."""
        self.add_module(name, module)

    def add_meta_module(self, name: str, meta_module: nn.Module | None) -> None:
        """Adds a child meta-module, whose parameters are meta-parameters.

        Args:
            name: The attribute name.
            meta_module: The meta-module, or ``None``.
        """
        if not isinstance(meta_module, nn.Module) and meta_module is not None:
            raise TypeError(f"{torch.typename(meta_module)} is not a Module subclass")
        _check_free_name(self, "meta-module", name, self._meta_modules)
        self._meta_modules[name] = meta_module

    def register_meta_module(self, name: str, meta_module: nn.Module | None) -> None:
        """Alias of :meth:`add_meta_module`."""
        self.add_meta_module(name, meta_module)

    def meta_parameters(self, recurse: bool = True) -> Iterator[torch.Tensor]:
        """Iterates over the meta-parameters (see :meth:`named_meta_parameters`)."""
        for _, meta_param in self.named_meta_parameters(recurse=recurse):
            yield meta_param

    def named_meta_parameters(
        self, prefix: str = "", recurse: bool = True,
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """Iterates over ``(name, meta-parameter)``: direct ones, then those of meta-modules.

        Args:
            prefix: Prepended to every name.
            recurse: Whether to include the parameters of the meta-modules' submodules.

        Yields:
            ``(name, tensor)`` pairs, each tensor once.
        """
        seen: set[torch.Tensor] = set()
        for name, param in self._meta_parameters.items():
            if param is None or param in seen:
                continue
            seen.add(param)
            yield prefix + name, param
        for name, meta_module in self._meta_modules.items():
            if meta_module is not None:
                yield from meta_module.named_parameters(prefix + name, recurse)

    def meta_children(self) -> Iterator[nn.Module]:
        """Iterates over the direct meta-modules."""
        for _, meta_module in self.named_meta_children():
            yield meta_module

    def named_meta_children(self) -> Iterator[tuple[str, nn.Module]]:
        """Iterates over ``(name, meta-module)`` for the direct meta-modules, each once."""
        seen: set[nn.Module] = set()
        for name, meta_module in self._meta_modules.items():
            if meta_module is not None and meta_module not in seen:
                seen.add(meta_module)
                yield name, meta_module

    def meta_modules(self) -> Iterator[nn.Module]:
        """Iterates over all meta-modules and their submodules."""
        for _, meta_module in self.named_meta_modules():
            yield meta_module

    def named_meta_modules(
        self,
        memo: set[nn.Module] | None = None,
        prefix: str = "",
        remove_duplicate: bool = True,
    ) -> Iterator[tuple[str, nn.Module]]:
        """Iterates over ``(name, module)`` for all meta-modules and their submodules.

        Args:
            memo: Modules already yielded (a new set if ``None``).
            prefix: Prepended to every name.
            remove_duplicate: Whether to yield each module once.

        Yields:
            ``(name, module)`` pairs.
        """
        memo = set() if memo is None else memo
        if self in memo:
            return
        if remove_duplicate:
            memo.add(self)
        for name, meta_module in self._meta_modules.items():
            if meta_module is not None:
                child_prefix = prefix + ("." if prefix else "") + name
                yield from meta_module.named_modules(memo, child_prefix, remove_duplicate)
