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


def reached_outputs(roots: Iterable[tuple[Node, int]]) -> set[tuple[Node, int]]:
    """Every output ``(node, output_nr)`` that the outputs ``roots`` are computed from.

    Exact where the node walk is not: an output of a shared node (one half of ``w.split(2)``,
    one parameter of a ``torch._foreach_*`` update) that nothing reads is not included.
    """
    reached: set[tuple[Node, int]] = set()
    expanded: set[Node] = set()
    stack = list(roots)
    while stack:
        output = stack.pop()
        if output in reached:
            continue
        reached.add(output)
        node, output_nr = output
        if foreach_output_count(node):
            stack.extend(output_inputs(node, output_nr))
        elif node not in expanded:
            expanded.add(node)
            stack.extend(child for child in node.next_functions if child[0] is not None)
    return reached


def output_inputs(node: Node, output_nr: int) -> list[tuple[Node, int]]:
    """The inputs ``(grad_fn, output_nr)`` that output ``output_nr`` of ``node`` depends on."""
    return [node.next_functions[i] for i in input_indices(node, output_nr)
            if node.next_functions[i][0] is not None]


def input_indices(node: Node, output_nr: int) -> range | list[int]:
    """Which entries of ``node.next_functions`` output ``output_nr`` is computed from.

    A ``torch._foreach_*`` op takes its list arguments first and its tensor scalars (one value
    for every element) last, and autograd lists its inputs in that order. So output ``i`` of an
    ``n``-output foreach node reads inputs ``i, n + i, ...`` of its ``k`` lists and all trailing
    inputs after ``k * n``. Every other node is taken to mix all its inputs into every output.
    """
    outputs = foreach_output_count(node)
    inputs = len(node.next_functions)
    if not outputs:
        return range(inputs)
    lists_end = inputs - inputs % outputs
    return [*range(output_nr, lists_end, outputs), *range(lists_end, inputs)]


def input_readers(node: Node, input_index: int) -> range | list[int]:
    """Which outputs of ``node`` read input ``input_index`` (the inverse of ``input_indices``)."""
    outputs = foreach_output_count(node)
    inputs = len(node.next_functions)
    if outputs and input_index < inputs - inputs % outputs:
        return [input_index % outputs]
    return range(max(outputs, 1))


def output_shape(node: Node, output_nr: int) -> torch.Size:
    """The shape of output ``output_nr`` of ``node``, as autograd recorded it."""
    return torch.Size(node._input_metadata[output_nr].shape)


def foreach_output_count(node: Node) -> int:
    """For a ``torch._foreach_*`` node with several outputs, the output count; else 0."""
    if not node_name(node).startswith("Foreach"):
        return 0
    outputs = len(node._input_metadata)
    return outputs if outputs > 1 and len(node.next_functions) >= outputs else 0


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
