"""Reading PyTorch's autograd graph: walking it, naming nodes and reading what they saved."""

from __future__ import annotations

import collections
import functools
from collections.abc import Iterable
from typing import Any

import torch
from torch.autograd.function import BackwardCFunction
from torch.autograd.graph import Node

# Built-in backward nodes expose what they saved for backward as ``_saved_<name>`` properties.
SAVED_PREFIX = "_saved_"


class Freed:
    """Stands for a saved value that ``backward()`` has already released."""

    def __repr__(self) -> str:
        return "[freed by backward]"


FREED = Freed()


def node_name(node: Node) -> str:
    """The class name of a backward node (``AddBackward0``, ``AccumulateGrad``, ...)."""
    # ``torch._foreach_*`` nodes are all of Python type ``CppFunction``; ``name()`` tells them
    # apart, but spells ``AccumulateGrad`` with its C++ namespace.
    return node.name().rsplit("::", 1)[-1]


def leaf_variable(node: Node) -> torch.Tensor | None:
    """The leaf tensor an ``AccumulateGrad`` node writes ``.grad`` into, else ``None``."""
    return getattr(node, "variable", None)


def walk(roots: Iterable[Node]) -> list[Node]:
    """Every node reachable backward from ``roots``, breadth first, each once.

    Iterative, so that graphs with tens of thousands of nodes (long unrolled loops) do not hit
    Python's recursion limit.
    """
    order: list[Node] = []
    seen: set[Node] = set()
    queue: collections.deque[Node] = collections.deque()
    for root in roots:
        if root not in seen:
            seen.add(root)
            queue.append(root)
    while queue:
        node = queue.popleft()
        order.append(node)
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                queue.append(child)
    return order


def output_inputs(node: Node, output_nr: int) -> list[tuple[Node, int]]:
    """The inputs ``(grad_fn, output_nr)`` that output ``output_nr`` of ``node`` depends on.

    A ``torch._foreach_*`` node computes output ``i`` from element ``i`` of each of its list
    arguments, and lists its inputs argument by argument, so output ``i`` of an ``n``-output
    node reads inputs ``i, n + i, 2n + i, ...``. Every other node is taken to mix all its inputs
    into every output.
    """
    inputs = node.next_functions
    outputs = foreach_output_count(node)
    if outputs:
        inputs = inputs[output_nr::outputs]
    return [(child, nr) for child, nr in inputs if child is not None]


def foreach_output_count(node: Node) -> int:
    """For a multi-output foreach node whose inputs split evenly per output, the output count.

    Returns 0 for every other node.
    """
    if not node_name(node).startswith("Foreach"):
        return 0
    outputs = len(node._input_metadata)
    if outputs > 1 and len(node.next_functions) % outputs == 0:
        return outputs
    return 0


def saved_values(node: Node) -> list[tuple[str, Any]]:
    """What a built-in backward node saved for backward, as ``(name, value)`` pairs.

    A value that ``backward()`` already released is :data:`FREED` instead of raising.
    """
    values = []
    for attr in _saved_attributes(type(node)):
        try:
            value = getattr(node, attr)
        except RuntimeError:
            value = FREED
        values.append((attr[len(SAVED_PREFIX):], value))
    return values


def custom_saved_tensors(node: Node) -> tuple[torch.Tensor, ...] | Freed:
    """The tensors a custom :class:`torch.autograd.Function` saved, or :data:`FREED`."""
    if not isinstance(node, BackwardCFunction):
        return ()
    try:
        return tuple(t for t in node.saved_tensors if t is not None)
    except RuntimeError:
        return FREED


@functools.cache
def _saved_attributes(node_type: type) -> tuple[str, ...]:
    # ``dir`` is slow; every node of one type saves the same names.
    return tuple(a for a in dir(node_type) if a.startswith(SAVED_PREFIX))
