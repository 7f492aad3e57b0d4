"""Turns an autograd graph into Graphviz nodes and edges: :func:`make_dot`."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch.autograd.graph import Node

from optax_compat._src import tree_math
from torchopt_fn.typing import TensorTree
from torchopt_fn.visual._autograd import (
    FREED,
    Freed,
    custom_saved_tensors,
    leaf_variable,
    node_name,
    output_shape,
    saved_values,
    walk,
)
from torchopt_fn.visual._digraph import GradientGraph, resize_graph
from torchopt_fn.visual._fusion import FusedStep, Fusion
from torchopt_fn.visual._params import NamedParameter, ParameterNames

#: How each kind of node is drawn: Graphviz node attributes by kind (the legend of the picture).
NODE_STYLES: dict[str, dict[str, str]] = {
    "backward": {"fillcolor": "lightgrey"},
    "param": {"fillcolor": "lightblue"},
    "saved": {"fillcolor": "orange"},
    "freed": {"fillcolor": "orange", "style": "filled,dashed"},
    "output": {"fillcolor": "darkolivegreen1"},
    "view_base": {"fillcolor": "darkolivegreen3"},
    "fused": {"fillcolor": "plum", "shape": "box3d"},
    "unreached": {"fillcolor": "red", "fontcolor": "white"},
    "collapsed": {"fillcolor": "white", "style": "filled,dashed"},
}
#: What each kind of node of :data:`NODE_STYLES` means.
NODE_MEANINGS: dict[str, str] = {
    "backward": "backward function (autograd node)",
    "param": "leaf tensor that requires grad, or a named parameter",
    "saved": "tensor saved for backward",
    "freed": "saved tensor already freed by backward()",
    "output": "output tensor passed to make_dot",
    "view_base": "base tensor of an output that is a view (dotted edge)",
    "fused": "one optimizer step for one parameter (fuse_optimizer=True)",
    "unreached": "parameter in params that the output does not reach (.grad stays None)",
    "collapsed": "nodes beyond max_depth",
}

_NODE_ATTR = {"style": "filled", "shape": "box", "fontsize": "10", "ranksep": "0.1",
              "height": "0.2", "fontname": "monospace"}
_UNREACHED_CLUSTER = "unreached"


@dataclasses.dataclass
class _DisplayNode:
    lines: list[str]
    kinds: tuple[str, ...]
    param_names: tuple[str, ...] = ()
    module: str | None = None
    owner: str | None = None  # for a saved tensor, the node that saved it
    tooltip: str | None = None


def make_dot(
    var: TensorTree,
    params: Mapping[str, torch.Tensor] | Iterable[Any] | None = None,
    show_attrs: bool = False,
    show_saved: bool = False,
    max_attr_chars: int = 50,
    *,
    fuse_optimizer: bool = True,
    cluster_by_module: bool = False,
    max_depth: int | None = None,
) -> GradientGraph:
    """Draws the autograd graph behind ``var`` with Graphviz.

    Backward functions are grey; leaf tensors that require grad (whose ``.grad`` ``backward()``
    fills) and named parameters light blue; saved tensors orange; the outputs green; the base of
    an output that is a view dark green, joined by a dotted edge. With ``fuse_optimizer`` the
    nodes of each differentiable optimizer step (tagged by ``torchopt_fn``'s meta-optimizers and
    functional updates) become one 3-D box per parameter and step, light blue when the new
    parameter is named in ``params`` and plum otherwise. Parameters in ``params``
    that the outputs do not reach are drawn red in their own cluster and listed in
    ``.unreached``. Building the graph never runs Graphviz; rendering does.

    Args:
      var: Output tensor, or any pytree of output tensors.
      params: Names for tensors: a dict name -> tensor, an iterable of ``(name, tensor)`` pairs
        (``module.named_parameters()``), a ``ModuleState`` from
        ``extract_state_dict(..., enable_visual=True, visual_prefix=...)``, or a list of these.
      show_attrs: Show the non-tensor attributes backward functions saved (``_saved_*``).
      show_saved: Show the tensors built-in backward functions saved (those of custom
        :class:`torch.autograd.Function` are always shown).
      max_attr_chars: Longest attribute value shown by ``show_attrs``; longer ones end in
        ``...``.
      fuse_optimizer: Draw each optimizer step as one node per parameter.
      cluster_by_module: Group nodes in one Graphviz cluster per module prefix of the parameter
        names (``encoder.fc.weight`` -> ``encoder.fc``).
      max_depth: If given, draw only nodes at most this many edges from an output; the rest
        become one dashed node saying how many were left out.

    Returns:
      A :class:`GradientGraph` (a :class:`graphviz.Digraph`) whose ``unreached`` lists the
      names of unreached parameters.

    Raises:
      TypeError: if ``var`` has a leaf that is not a tensor or ``params`` has an unknown form.
      ValueError: if ``max_depth`` is negative.
    """
    if max_depth is not None and max_depth < 0:
        raise ValueError(f"make_dot: max_depth must be >= 0, got {max_depth}")
    outputs = _output_tensors(var)
    builder = _GraphBuilder(ParameterNames(params), show_attrs, show_saved, max_attr_chars)
    builder.add_outputs(outputs)
    nodes = walk(builder.roots)
    fusion = Fusion(nodes, builder.names) if fuse_optimizer else None
    builder.add_backward_nodes(nodes, fusion)
    unreached = builder.add_unreached(nodes)
    if cluster_by_module:
        builder.assign_modules()
    dot = builder.emit(max_depth)
    dot.unreached = unreached
    resize_graph(dot)
    return dot


def _output_tensors(var: Any) -> list[torch.Tensor]:
    outputs = tree_math.leaves(var)
    for leaf in outputs:
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(f"make_dot: `var` must be a tensor or a pytree of tensors; found a "
                            f"{type(leaf).__name__} leaf")
    return outputs


class _GraphBuilder:
    """Collects display nodes and edges, then writes them into a :class:`GradientGraph`."""

    def __init__(self, names: ParameterNames, show_attrs: bool, show_saved: bool,
                 max_attr_chars: int) -> None:
        self.names = names
        self.show_attrs = show_attrs
        self.show_saved = show_saved
        self.max_attr_chars = max(max_attr_chars, 3)
        self.roots: list[Node] = []
        self.nodes: dict[str, _DisplayNode] = {}
        self.edges: dict[tuple[str, str], dict[str, str]] = {}
        self._ids: dict[Any, str] = {}
        self._keep_alive: list[Any] = []
        self._reached_leaves: set[int] = set()
        self._fusion: Fusion | None = None

    # -- identifiers ---------------------------------------------------------------------------

    def _id(self, key: Any) -> str:
        identifier = self._ids.get(key)
        if identifier is None:
            identifier = self._ids[key] = f"n{len(self._ids)}"
        return identifier

    def _tensor_id(self, tensor: torch.Tensor) -> str:
        self._keep_alive.append(tensor)  # so that its id is not reused while we draw
        return self._id(("tensor", id(tensor)))

    def _output_id(self, node: Node, output_nr: int) -> str:
        step = self._fusion.output_owner(node, output_nr) if self._fusion else None
        return self._id(step) if step is not None else self._id(node)

    def _input_reader_ids(self, node: Node, input_index: int) -> list[str]:
        steps = self._fusion.input_owners(node, input_index) if self._fusion else None
        return [self._id(step) for step in steps] if steps is not None else [self._id(node)]

    # -- tensors -------------------------------------------------------------------------------

    def _tensor_node(self, tensor: torch.Tensor, kind: str) -> _DisplayNode:
        entry = (self.names.leaf_name(tensor) if tensor.grad_fn is None
                 else self.names.by_output.get((tensor.grad_fn, tensor.output_nr)))
        if entry is None:
            return _DisplayNode([_shape(tensor.shape)], (kind,))
        return _DisplayNode([entry.name, _shape(tensor.shape)], (kind,), (entry.name,))

    def add_outputs(self, outputs: list[torch.Tensor]) -> None:
        for tensor in outputs:
            self._add_tensor(tensor, "output")

    def _add_tensor(self, tensor: torch.Tensor, kind: str) -> str:
        identifier = self._tensor_id(tensor)
        if identifier in self.nodes:
            return identifier
        self.nodes[identifier] = self._tensor_node(tensor, kind)
        if tensor.grad_fn is not None:
            self.roots.append(tensor.grad_fn)
            self.edges[(("grad_fn", tensor.grad_fn, tensor.output_nr), identifier)] = {}
        elif tensor.requires_grad:
            self._reached_leaves.add(id(tensor))
        if tensor._is_view():
            base = self._add_tensor(tensor._base, "view_base")
            self.edges[(base, identifier)] = {"style": "dotted"}
        return identifier

    # -- backward functions --------------------------------------------------------------------

    def add_backward_nodes(self, nodes: list[Node], fusion: Fusion | None) -> None:
        self._fusion = fusion
        self._resolve_output_edges()
        for step in fusion.steps if fusion else ():
            self._add_step(step)
        for node in nodes:
            if fusion is None or not fusion.is_absorbed(node):
                self._add_backward(node)
            for index, (child, output_nr) in enumerate(node.next_functions):
                if child is None:
                    continue
                source = self._output_id(child, output_nr)
                for target in self._input_reader_ids(node, index):
                    if source != target:
                        self.edges.setdefault((source, target), {})

    def _resolve_output_edges(self) -> None:
        # Output edges were recorded before fusion was known; point them at the drawn nodes now.
        resolved = {}
        for (source, target), attrs in self.edges.items():
            if isinstance(source, tuple):
                source = self._output_id(source[1], source[2])
            resolved[(source, target)] = attrs
        self.edges = resolved

    def _add_step(self, step: FusedStep) -> None:
        lines = [step.label]
        kinds: tuple[str, ...] = ("fused",)
        entry = self.names.by_output.get((step.node, step.output_nr))
        names: tuple[str, ...] = ()
        if entry is None:
            lines.append(_shape(output_shape(step.node, step.output_nr)))
        else:
            lines += [entry.name, _shape(entry.tensor.shape)]
            kinds = ("fused", "param")
            names = (entry.name,)
        lines.append(f"[{step.members.total()} autograd nodes]")
        tooltip = ", ".join(f"{count} x {name}" for name, count in sorted(step.members.items()))
        self.nodes[self._id(step)] = _DisplayNode(lines, kinds, names, tooltip=tooltip)

    def _add_backward(self, node: Node) -> None:
        identifier = self._id(node)
        lines = [node_name(node)]
        kinds: tuple[str, ...] = ("backward",)
        named = self.names.by_node.get(node, [])
        if named:
            kinds = ("backward", "param")
            for entry in named:
                lines += [entry.name, _shape(entry.tensor.shape)]
        saved = saved_values(node) if self.show_attrs or self.show_saved else []
        if self.show_attrs:
            lines += _attribute_table(saved, self.max_attr_chars, len(lines[0]))
        self.nodes[identifier] = _DisplayNode(lines, kinds, tuple(e.name for e in named))
        variable = leaf_variable(node)
        if variable is not None:
            self._reached_leaves.add(id(variable))
            tensor_id = self._tensor_id(variable)
            self.nodes[tensor_id] = self._tensor_node(variable, "param")
            self.edges[(tensor_id, identifier)] = {}
        if self.show_saved:
            for attr, value in saved:
                self._add_saved(identifier, attr, value)
        self._add_saved(identifier, "saved_tensors", custom_saved_tensors(node))

    def _add_saved(self, owner: str, attr: str, value: Any) -> None:
        if isinstance(value, (tuple, list)):
            tensors = [(f"{attr}[{i}]", v) for i, v in enumerate(value)
                       if isinstance(v, torch.Tensor)]
        elif isinstance(value, (torch.Tensor, Freed)):
            tensors = [(attr, value)]
        else:
            return
        for label, tensor in tensors:
            identifier = self._id(("saved", owner, label))
            if isinstance(tensor, Freed):
                display = _DisplayNode([label, str(FREED)], ("freed",), owner=owner)
            else:
                display = _DisplayNode([label, _shape(tensor.shape)], ("saved",), owner=owner)
            self.nodes[identifier] = display
            self.edges[(owner, identifier)] = {"dir": "none"}

    # -- diagnosis -----------------------------------------------------------------------------

    def add_unreached(self, nodes: list[Node]) -> list[str]:
        reached_nodes = set(nodes)
        unreached = [entry for entry in self.names.parameters
                     if not self._is_reached(entry, reached_nodes)]
        for entry in unreached:
            lines = [entry.name]
            if entry.tensor is not None:
                lines.append(_shape(entry.tensor.shape))
                if not entry.tensor.requires_grad:
                    lines.append("requires_grad=False")
            lines.append("no path to the output")
            self.nodes[self._id(("unreached", id(entry)))] = _DisplayNode(
                lines, ("unreached",), (entry.name,), module=_UNREACHED_CLUSTER)
        return [entry.name for entry in unreached]

    def _is_reached(self, entry: NamedParameter, reached_nodes: set[Node]) -> bool:
        if entry.leaf_id is not None:
            return entry.leaf_id in self._reached_leaves
        return entry.tensor.grad_fn in reached_nodes

    # -- clusters ------------------------------------------------------------------------------

    def assign_modules(self) -> None:
        """Puts each node in the cluster of the module whose parameters it reads.

        A parameter belongs to the module prefix of its name. A node with one input inherits
        that input's module when the input belongs to a module through a parameter (a transpose
        or a view of a weight). Any other node joins a cluster when every module-owned input it
        reads comes from one module, so a layer's operation joins its layer but the activations
        between layers stay outside.
        """
        inputs: dict[str, list[str]] = collections.defaultdict(list)
        for source, target in self.edges:
            if self.nodes[target].owner is None:
                inputs[target].append(source)
        owned: dict[str, str | None] = {}
        for identifier, display in self.nodes.items():
            if display.module is not None or display.owner is not None:
                continue
            modules = {name.rsplit(".", 1)[0] for name in display.param_names if "." in name}
            if len(modules) == 1:
                owned[identifier] = modules.pop()
        for identifier, display in self.nodes.items():
            if display.module is not None or display.owner is not None:
                continue
            own = _owned_module(identifier, inputs, owned)
            readers = {_owned_module(i, inputs, owned) for i in inputs[identifier]} - {None}
            display.module = own or (readers.pop() if len(readers) == 1 else None)
        for display in self.nodes.values():
            if display.owner is not None:
                display.module = self.nodes[display.owner].module

    # -- output --------------------------------------------------------------------------------

    def emit(self, max_depth: int | None) -> GradientGraph:
        visible = set(self.nodes) if max_depth is None else self._within_depth(max_depth)
        dot = GradientGraph(node_attr=_NODE_ATTR, graph_attr={"size": "12,12"})
        clusters: dict[str | None, list[str]] = collections.defaultdict(list)
        for identifier in self.nodes:
            if identifier in visible:
                clusters[self.nodes[identifier].module].append(identifier)
        for identifier in clusters.pop(None, []):
            self._emit_node(dot, identifier)
        for module, members in clusters.items():
            with dot.subgraph(name=f"cluster_{module}") as cluster:
                label = ("not reached by the output: .grad stays None"
                         if module == _UNREACHED_CLUSTER else module)
                cluster.attr(label=label, style="rounded,dashed", color="grey40")
                for identifier in members:
                    self._emit_node(cluster, identifier)
        for (source, target), attrs in self.edges.items():
            if source in visible and target in visible:
                dot.edge(source, target, **attrs)
        hidden = len(self.nodes) - len(visible)
        if hidden:
            self._emit_collapsed(dot, visible, hidden, max_depth)
        return dot

    def _emit_node(self, dot: Any, identifier: str) -> None:
        display = self.nodes[identifier]
        style: dict[str, str] = {}
        for kind in display.kinds:  # a named backward or fused node takes the parameter's colour
            style.update(NODE_STYLES[kind])
        if display.tooltip:
            style["tooltip"] = display.tooltip
        dot.node(identifier, _label(display.lines), _attributes={"class": " ".join(display.kinds)},
                 **style)

    def _within_depth(self, max_depth: int) -> set[str]:
        inputs: dict[str, list[str]] = collections.defaultdict(list)
        for source, target in self.edges:
            inputs[target].append(source)
        depth = {i: 0 for i, d in self.nodes.items() if d.kinds[0] in ("output", "unreached")}
        queue = collections.deque(depth)
        while queue:
            identifier = queue.popleft()
            if depth[identifier] == max_depth:
                continue
            for source in inputs[identifier]:
                if source not in depth:
                    depth[source] = depth[identifier] + 1
                    queue.append(source)
        visible = set(depth)
        visible.update(i for i, d in self.nodes.items() if d.owner in depth)
        return visible

    def _emit_collapsed(self, dot: GradientGraph, visible: set[str], hidden: int,
                        max_depth: int | None) -> None:
        identifier = self._id("collapsed")
        dot.node(identifier, _label([f"{hidden} more nodes", f"beyond depth {max_depth}"]),
                 _attributes={"class": "collapsed"}, **NODE_STYLES["collapsed"])
        frontier = {target for source, target in self.edges
                    if target in visible and source not in visible}
        for target in sorted(frontier):
            dot.edge(identifier, target, style="dashed")


def _owned_module(identifier: str, inputs: dict[str, list[str]],
                  owned: dict[str, str | None]) -> str | None:
    """The module ``identifier`` belongs to through parameters alone (iterative, memoized)."""
    chain = []
    while identifier not in owned:
        chain.append(identifier)
        sources = inputs[identifier]
        if len(sources) != 1:
            owned[identifier] = None
            break
        identifier = sources[0]
    module = owned[identifier]
    for link in chain:
        owned[link] = module
    return module


def _shape(shape: torch.Size) -> str:
    return "(" + ", ".join(map(str, shape)) + ")"


def _attribute_table(saved: list[tuple[str, Any]], max_chars: int, name_width: int) -> list[str]:
    """Formats the non-tensor saved attributes as aligned ``name: value`` lines."""
    rows = {}
    for attr, value in saved:
        if isinstance(value, Freed):
            rows[attr] = str(value)
        elif isinstance(value, torch.Tensor):
            rows[attr] = "[saved tensor]"
        elif isinstance(value, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in value):
            rows[attr] = "[saved tensors]"
        else:
            rows[attr] = str(value)
    if not rows:
        return []
    key_width = max(map(len, rows))
    value_width = min(max(map(len, rows.values())), max_chars)

    def truncate(text: str) -> str:
        return text[:value_width - 3] + "..." if len(text) > value_width else text

    table = [f"{key:<{key_width}}: {truncate(value):>{value_width}}" for key, value in rows.items()]
    return ["-" * max(key_width + value_width + 2, name_width), *table]


def _label(lines: list[str]) -> str:
    # ``\n`` is Graphviz's line break; a literal backslash in the text must not start an escape.
    return "\\n".join(line.replace("\\", "\\\\") for line in lines)
