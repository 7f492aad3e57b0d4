"""How the state of a parameter group is spread over ``optimizer.state`` and the group dict.

:class:`~optax_compat.TorchOptimizer` keeps each group's transformation state as torch's
optimizers keep theirs: per-parameter buffers in ``state[p]``, hyper-parameters in the group.
:func:`plan` reads a group state once and says, node by node, where each part lives
(:class:`Entry`); the optimizer gathers the state from there before a step and scatters it back
after, and its fused groups (:mod:`.fused_groups`) make the same entries views of their
packed buffers.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import optree
import torch

from optax_compat._runtime import tree_math
from optax_compat._src import base
from optax_compat.schedules._inject import InjectHyperparamsState, InjectStatefulHyperparamsState
from optax_compat.transforms._masking import MaskedNode

# Optax's name of a hyper-parameter -> the parameter-group key torch's tools use.
_GROUP_KEYS = {"learning_rate": "lr"}
PER_PARAMETER, SHARED, HYPERPARAMETER, STATIC = range(4)


@dataclasses.dataclass
class Entry:
    """One node of a group state flattened down to per-parameter tuples.

    ``kind`` says where its value lives: in ``state[p][key]`` of each parameter (per-parameter
    buffers; ``fill`` gives the non-tensor entries such as ``MaskedNode`` of masked-out
    parameters, ``None`` where every entry is a tensor), in ``state[p][key]`` of every parameter
    alike (shared tensors), in the group under ``key`` (``component`` of a pair such as
    ``'betas'``), or in ``value`` (non-tensors).
    """

    kind: int
    key: str
    fill: tuple[Any, ...] | None = None
    component: int | None = None
    value: Any = None


@dataclasses.dataclass
class Layout:
    """How the state of one parameter group is spread over ``state`` and the group dict.

    ``skeleton`` is the structure ``treespec`` with the static values at their leaves and an
    empty tensor at every other: under ``torch.compile``, Dynamo rebuilds the structure from
    it, since it cannot call into optree's C++ ``PyTreeSpec``. Dynamo folds the flattening of a
    dict of Python constants into metadata that only the folded unflattening reads, so a
    skeleton leaf is a constant exactly where the traced step's is (hyper-parameters are
    tensors there).
    """

    treespec: optree.PyTreeSpec
    entries: list[Entry]
    skeleton: Any

    def structure(self) -> Any:
        """The structure of the group state: ``treespec``, or Dynamo's own while tracing."""
        if torch.compiler.is_compiling():
            return tree_math.treespec(self.skeleton)
        return self.treespec


def _path_name(accessor: optree.PyTreeAccessor) -> str:
    return ".".join(str(getattr(entry, "field", None) or entry.entry) for entry in accessor)


def per_parameter_predicate(size: int) -> Callable[[Any], bool]:
    """Whether a state node is a tuple with one buffer per parameter of a group of ``size``."""

    def is_per_parameter(node: Any) -> bool:
        if type(node) is not tuple or len(node) != size:
            return False
        # One C-level pass in the common case (a buffer for every parameter).
        return (size > 0 and all(map(isinstance, node, itertools.repeat(torch.Tensor)))) or (
            all(isinstance(x, (torch.Tensor, MaskedNode)) for x in node)
            and any(isinstance(x, torch.Tensor) for x in node))

    return is_per_parameter


def flatten(state: base.OptState, size: int, with_accessors: bool = False) -> Any:
    if not with_accessors:
        return tree_math.traced_or_optree_flatten(state, tree_math.NONE_IS_LEAF,
                                                  per_parameter_predicate(size))
    return optree.tree_flatten_with_accessor(
        state, is_leaf=per_parameter_predicate(size), none_is_leaf=tree_math.NONE_IS_LEAF,
        namespace=tree_math.NAMESPACE)


def _is_inject_state(node: Any) -> bool:
    return isinstance(node, (InjectStatefulHyperparamsState, InjectHyperparamsState))


def _injected_hyperparameters(state: base.OptState) -> dict[str, tuple[str, int | None]]:
    """Maps the path of each injected, unscheduled hyper-parameter to its group key.

    Raises:
      ValueError: if two injected hyper-parameters would share a group key.
    """
    injected: dict[str, tuple[str, int | None]] = {}
    accessors, nodes, _ = optree.tree_flatten_with_accessor(
        state, is_leaf=_is_inject_state, none_is_leaf=tree_math.NONE_IS_LEAF,
        namespace=tree_math.NAMESPACE)
    for node, accessor in zip(nodes, accessors, strict=True):
        if not _is_inject_state(node):
            continue
        scheduled = getattr(node, "hyperparams_states", {})
        names = [name for name in node.hyperparams if name not in scheduled]
        prefix = _path_name(accessor)
        for name in names:
            if name in ("b1", "b2") and {"b1", "b2"} <= set(names):
                key, component = "betas", int(name == "b2")
            else:
                key, component = _GROUP_KEYS.get(name, name), None
            if any(found == (key, component) for found in injected.values()):
                raise ValueError(f"Two injected hyper-parameters would both be the parameter "
                                 f"group's {key!r}; inject it in one place only.")
            injected[".".join(filter(None, (prefix, "hyperparams", name)))] = (key, component)
    return injected


def plan(state: base.OptState, size: int) -> Layout:
    """Plans how a group state of a group of ``size`` parameters is spread (see ``Entry``)."""
    accessors, nodes, treespec = flatten(state, size, with_accessors=True)
    injected = _injected_hyperparameters(state)
    entries = []
    for node, accessor in zip(nodes, accessors, strict=True):
        key = _path_name(accessor)
        if key in injected:
            group_key, component = injected[key]
            entries.append(Entry(HYPERPARAMETER, group_key, component=component))
        elif isinstance(node, tuple):
            fill = tuple(None if isinstance(x, torch.Tensor) else x for x in node)
            entries.append(Entry(PER_PARAMETER, key,
                                  fill=None if fill == (None,) * len(fill) else fill))
        elif isinstance(node, torch.Tensor):
            entries.append(Entry(SHARED, key))
        else:
            entries.append(Entry(STATIC, key, value=node))
    placeholder = torch.empty(0)
    skeleton = treespec.unflatten([entry.value if entry.kind is STATIC else placeholder
                                   for entry in entries])
    return Layout(treespec, entries, skeleton)


def python_number(value: Any) -> Any:
    """A hyper-parameter's value as a Python number, as it was most likely written.

    A float32 or float16 hyper-parameter is read back through its shortest decimal form
    (``1e-3`` rather than ``0.0010000000474974513``), which rounds to the same tensor value.
    """
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or value.requires_grad:
        return value
    if value.dtype in (torch.float32, torch.float16):
        return float(str(value.detach().cpu().numpy()))
    return value.item()


def carried_keys(old: Layout, new: Layout) -> list[tuple[str, str]]:
    """The ``(new key, old key)`` pairs of the entries stored in ``state[p]`` that keep their
    meaning from ``old`` to ``new``, the layouts of two chains that differ by terms added or
    removed: entries of the same kind and field, matched in order, the field being the key
    without its leading position in the chain (``'1.trace'`` becomes ``'0.trace'`` when a
    term before it goes).
    """
    def stored(layout: Layout) -> dict[tuple[int, str], list[str]]:
        fields: dict[tuple[int, str], list[str]] = {}
        for entry in layout.entries:
            if entry.kind in (PER_PARAMETER, SHARED):
                head, _, rest = entry.key.partition(".")
                field = rest if head.isdigit() and rest else entry.key
                fields.setdefault((entry.kind, field), []).append(entry.key)
        return fields

    before = stored(old)
    return [pair for field, keys in stored(new).items()
            for pair in zip(keys, before.get(field, []))]
