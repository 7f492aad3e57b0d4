"""Reads the ``params`` argument of :func:`make_dot` in every form TorchOpt accepts.

The forms are a mapping ``name -> tensor`` (``dict(module.named_parameters())``, or
``module.state_dict()``, whose detached copies are recognised as the parameters they alias), an
iterable of ``(name, tensor)`` pairs (such as ``module.named_parameters()``), a ``ModuleState``
whose ``visual_contents`` came from ``extract_state_dict(..., enable_visual=True)``, or a list
or tuple mixing these.

``visual_contents`` is read as TorchOpt 0.7.3 writes it, ``{leaf_tensor: name}`` and
``{grad_fn: (name, tensor)}`` for tensors produced by an optimizer step, as
``torchopt_fn.extract_state_dict`` writes it (``(grad_fn, output_nr)`` keys, because a
``torch._foreach_*`` update gives all new parameters one shared ``grad_fn``), and also as
``{id(leaf_tensor): name}``. Any value ``(name, tensor)`` is read from the tensor itself.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch.autograd.graph import Node


@dataclasses.dataclass(frozen=True)
class NamedParameter:
    """One entry of ``params``: a name and the tensor, when the form gives the tensor."""

    name: str
    tensor: torch.Tensor | None
    leaf_id: int | None

    @property
    def is_alias(self) -> bool:
        """Whether the entry is a leaf that does not require grad (a detached copy or a frozen
        parameter), which autograd never meets; it names a graph leaf sharing its memory."""
        return (self.tensor is not None and self.leaf_id is not None
                and not self.tensor.requires_grad)


def alias_key(tensor: torch.Tensor) -> Hashable | None:
    """What two tensors viewing the same memory the same way share (``p`` and ``p.detach()``).

    ``None`` for tensors without addressable memory (meta, empty, sparse, wrapper tensors).
    """
    try:
        pointer = tensor.data_ptr()
        if not pointer or tensor.layout != torch.strided:
            return None
        return (tensor.device, tensor.dtype, pointer, tuple(tensor.shape), tensor.stride())
    except (RuntimeError, NotImplementedError):
        return None


class ParameterNames:
    """Names of the tensors in ``params``, looked up the way the graph walk meets them.

    A leaf tensor is met as the ``variable`` of its ``AccumulateGrad`` node, so it is found by
    ``id`` or, for an entry that does not require grad, by the memory it aliases; a non-leaf
    tensor is met as output ``output_nr`` of its ``grad_fn``. One tensor may have several names
    (tied weights); all are kept.

    Attributes:
      by_output: Non-leaf tensors by ``(grad_fn, output_nr)``.
      by_node: Non-leaf tensors grouped by ``grad_fn``.
      from_state_dict: Whether some entries came from a ``Module.state_dict()`` (detached copies).
    """

    def __init__(self, params: Any) -> None:
        self.parameters: list[NamedParameter] = []
        self._by_leaf: dict[Hashable, list[NamedParameter]] = {}
        self.by_output: dict[tuple[Node, int], list[NamedParameter]] = {}
        self.from_state_dict = False
        if params is not None:
            self._read(params)
        self._has_aliases = any(entry.is_alias for entry in self.parameters)
        self.by_node: dict[Node, list[NamedParameter]] = {}
        for (grad_fn, _), entries in self.by_output.items():
            self.by_node.setdefault(grad_fn, []).extend(entries)

    def _read(self, params: Any) -> None:
        if hasattr(params, "visual_contents"):
            visual_contents = params.visual_contents
            if visual_contents is None:
                raise ValueError(
                    f"make_dot: the {type(params).__name__} in `params` has no visual_contents; "
                    "create it with extract_state_dict(..., enable_visual=True)")
            for key, value in visual_contents.items():
                self._add_visual_entry(key, value)
        elif isinstance(params, Mapping):
            if any(isinstance(key, torch.Tensor) for key in params):
                raise TypeError(
                    "make_dot: `params` looks inverted: its keys are tensors; pass a dict "
                    "name -> tensor, e.g. {name: tensor for tensor, name in params.items()}")
            self.from_state_dict |= hasattr(params, "_metadata")
            for name, tensor in params.items():
                self._add(name, tensor)
        elif isinstance(params, (str, torch.Tensor)) or not isinstance(params, Iterable):
            raise TypeError(
                "make_dot: `params` must be a dict name -> tensor, an iterable of (name, tensor) "
                f"pairs, a ModuleState, or a list of these; got {type(params).__name__}")
        else:
            empty = True
            for item in params:
                empty = False
                if isinstance(item, torch.Tensor):
                    raise TypeError(
                        "make_dot: `params` holds bare tensors, as module.parameters() yields; "
                        "pass module.named_parameters() (or a dict name -> tensor) so that the "
                        "nodes get names")
                if _is_named_pair(item):
                    self._add(*item)
                else:
                    self._read(item)
            if empty and isinstance(params, Iterator):
                warnings.warn(
                    "make_dot: `params` is an iterator that yielded nothing. A generator such as "
                    "module.named_parameters() can be read only once: was it already consumed "
                    "(by an earlier make_dot call)? Pass dict(module.named_parameters()) to "
                    "reuse it.", stacklevel=4)

    def _add_visual_entry(self, key: Any, value: Any) -> None:
        if _is_named_pair(value):
            self._add(*value)
        elif isinstance(key, torch.Tensor):
            self._add(value, key)
        elif isinstance(key, int):
            self._add_entry(NamedParameter(name=str(value), tensor=None, leaf_id=key))
        else:
            raise TypeError(
                "make_dot: cannot read visual_contents entry "
                f"{type(key).__name__} -> {type(value).__name__}; expected tensor -> name, "
                "id -> name or any key -> (name, tensor)")

    def _add(self, name: Any, tensor: Any) -> None:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"make_dot: params entry {_describe(name)} is a "
                            f"{type(tensor).__name__}, not a tensor")
        leaf_id = id(tensor) if tensor.grad_fn is None else None
        self._add_entry(NamedParameter(name=str(name), tensor=tensor, leaf_id=leaf_id))

    def _add_entry(self, entry: NamedParameter) -> None:
        if entry.leaf_id is None:
            self.by_output.setdefault((entry.tensor.grad_fn, entry.tensor.output_nr),
                                      []).append(entry)
        else:
            key = alias_key(entry.tensor) if entry.is_alias else None
            self._by_leaf.setdefault(("id", entry.leaf_id) if key is None else ("alias", key),
                                     []).append(entry)
        self.parameters.append(entry)

    def leaf_names(self, tensor: torch.Tensor) -> list[NamedParameter]:
        """The entries naming leaf ``tensor`` (itself, or a copy aliasing its memory)."""
        entries = self._by_leaf.get(("id", id(tensor)), [])
        if self._has_aliases:
            entries = entries + self._by_leaf.get(("alias", alias_key(tensor)), [])
        return entries


def _describe(name: Any) -> str:
    """``name`` for an error message; a tensor is named by its type and shape, never printed."""
    if isinstance(name, torch.Tensor):
        return f"<{type(name).__name__} of shape {tuple(name.shape)}>"
    return repr(name)


def _is_named_pair(item: Any) -> bool:
    return (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
            and isinstance(item[1], torch.Tensor))
