"""Turns an autograd graph into Graphviz nodes and edges: :func:`make_dot`."""

from __future__ import annotations

import collections
import warnings
from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import optree
import torch
from torch.autograd.graph import Node

from optax_compat._runtime import tree_math
from torchopt_fn._graph_tags import path_name
from torchopt_fn.typing import TensorTree
from torchopt_fn.visual import _large
from torchopt_fn.visual._autograd import (
    FREED,
    Freed,
    custom_saved_tensors,
    leaf_variable,
    node_name,
    output_shape,
    reached_outputs,
    saved_values,
    walk,
)
from torchopt_fn.visual._digraph import GradientGraph, resize_graph
from torchopt_fn.visual._display import DisplayNode, Edges
from torchopt_fn.visual._fusion import FusedStep, Fusion, looks_like_optimizer_steps
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
    "untracked": {"fillcolor": "lightyellow"},
    "collapsed": {"fillcolor": "white", "style": "filled,dashed"},
    "repeated": {"fillcolor": "khaki", "shape": "box3d"},
    "copy": {"style": "filled,dashed"},
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
    "unreached": "tensor in params that the output does not reach (.grad stays None)",
    "untracked": "tensor in params that does not require grad (frozen parameter, buffer or "
                 "detached copy): autograd does not track it",
    "collapsed": "nodes beyond max_depth",
    "repeated": "a step repeated several times in a row, drawn once with the count "
                "(large_graph=True)",
    "copy": "a tensor read by many nodes, drawn again beside each reader (large_graph=True, "
            "or by default above LARGE_GRAPH_NODES nodes)",
}

_NODE_ATTR = {"style": "filled", "shape": "box", "fontsize": "10", "ranksep": "0.1",
              "height": "0.2", "fontname": "monospace"}
_UNREACHED_CLUSTER = "unreached"
_UNTRACKED_CLUSTER = "untracked"
_CLUSTER_LABELS = {
    _UNREACHED_CLUSTER: "not reached by the output: .grad stays None",
    _UNTRACKED_CLUSTER: "requires_grad=False: not tracked by autograd, .grad stays None",
}
_STATE_DICT_HINT = ("state_dict() holds detached copies, so a parameter outside the graph looks "
                    "frozen: pass state_dict(keep_vars=True) to tell frozen from unreached")
_NO_PATH = "no path to the output"


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
    large_graph: bool | None = None,
    collapse_repeats: bool | None = None,
    legend: bool = False,
) -> GradientGraph:
    """Draws the autograd graph behind ``var`` with Graphviz.

    Backward functions are grey; leaf tensors that require grad (whose ``.grad`` ``backward()``
    fills) and named parameters light blue; saved tensors orange; the outputs green; the base of
    an output that is a view dark green, joined by a dotted edge. With ``fuse_optimizer`` the
    nodes of each differentiable optimizer step (tagged by ``torchopt_fn``'s meta-optimizers and
    functional updates) become one 3-D box per parameter and step, light blue when the new
    parameter is named in ``params`` and plum otherwise, labelled with the parameter's name.
    Tag your own optimizer loop with :func:`~torchopt_fn.visual.tag_optimizer_step` to fuse its
    steps too. Tensors in ``params`` that the outputs do not reach are drawn red and listed in
    ``.unreached``; those autograd does not track (``requires_grad=False``) are drawn pale
    yellow and listed in ``.untracked``. Building the graph never runs Graphviz; rendering does.

    Args:
      var: Output tensor, or any pytree of output tensors; outputs in a dict or a sequence are
        labelled with their key or position (``"loss"``, ``"aux[0]"``).
      params: Names for tensors: a dict name -> tensor (``module.state_dict()`` works: its
        detached copies name the parameters they alias), an iterable of ``(name, tensor)``
        pairs (``module.named_parameters()``; pass ``remove_duplicate=False`` to see every name
        of a tied weight), a ``ModuleState`` from
        ``extract_state_dict(..., enable_visual=True, visual_prefix=...)``, or a list of these.
      show_attrs: Show the non-tensor attributes backward functions saved (``_saved_*``).
      show_saved: Show the tensors built-in backward functions saved (those of custom
        :class:`torch.autograd.Function` are always shown).
      max_attr_chars: Longest attribute value shown by ``show_attrs``; longer ones end in
        ``...``.
      fuse_optimizer: Draw each optimizer step as one node per parameter.
      cluster_by_module: Group nodes in one Graphviz cluster per module prefix of the parameter
        names (``encoder.fc.weight`` -> ``encoder.fc``), nested as the modules are
        (``self_attn.out_proj`` inside ``self_attn``).
      max_depth: If given, draw only nodes at most this many edges from an output; the rest
        become one dashed node saying how many were left out. A parameter stays with its
        ``AccumulateGrad`` node.
      large_graph: Draw for a fast layout: repeated steps of an unrolled loop become one node
        with a count, a tensor read by many nodes is drawn beside each reader (the weights of
        an unrolled loop: their edges across the whole depth are what makes Graphviz's layout
        take minutes), and Graphviz's layout passes are bounded. ``None`` (the default) bounds
        the passes of graphs with many nodes; above ``LARGE_GRAPH_NODES`` drawn nodes it also
        draws shared tensors beside each reader and warns, but collapses nothing, so every
        node is still drawn (an RNN cell unrolled to 1,000 nodes lays out in seconds instead
        of minutes). ``False`` draws the plain picture at any size.
      collapse_repeats: Whether to collapse repeated steps; ``False`` draws every step
        (defaults to ``large_graph``: only ``large_graph=True`` collapses).
      legend: Add a box explaining the colours the picture uses.

    Returns:
      A :class:`GradientGraph` (a :class:`graphviz.Digraph`) whose ``unreached`` and
      ``untracked`` list the names of unreached and untracked ``params``.

    Raises:
      TypeError: if ``var`` has a leaf that is not a tensor, or ``params`` has an unknown form,
        holds bare tensors (``module.parameters()``) or is a dict tensor -> name.
      ValueError: if ``var`` holds no tensor or ``max_depth`` is negative.

    Warns:
      UserWarning: for outputs that do not require grad (nothing to draw behind them), a
        ``params`` iterator that yields nothing (a consumed generator), a graph above
        ``LARGE_GRAPH_NODES`` nodes drawn for a fast layout by default, and, once, for a
        graph that seems to hold optimizer steps none of which is tagged when
        ``fuse_optimizer`` is on.
    """
    if max_depth is not None and max_depth < 0:
        raise ValueError(f"make_dot: max_depth must be >= 0, got {max_depth}")
    outputs = _output_tensors(var)
    builder = _GraphBuilder(ParameterNames(params), show_attrs, show_saved, max_attr_chars)
    builder.add_outputs(outputs)
    nodes = walk(builder.roots)
    builder.find_reached(nodes)
    fusion = Fusion(nodes, builder.names) if fuse_optimizer else None
    if fusion is not None and not fusion.steps and looks_like_optimizer_steps(nodes):
        warnings.warn(_UNTAGGED_NOTICE, stacklevel=2)
    builder.add_backward_nodes(nodes, fusion)
    builder.add_unreached(nodes)
    if cluster_by_module:
        builder.assign_modules()
    if collapse_repeats if collapse_repeats is not None else large_graph:
        builder.nodes, builder.edges = _large.collapse_repeats(builder.nodes, builder.edges,
                                                                 builder.node_id)
    if large_graph is None and (drawn := builder.count_drawn(max_depth)) > _large.LARGE_GRAPH_NODES:
        warnings.warn(_LARGE_NOTICE.format(drawn=drawn, limit=_large.LARGE_GRAPH_NODES),
                      stacklevel=2)
        large_graph = True  # without collapse_repeats, which stays as the caller set it
    if large_graph:
        builder.nodes, builder.edges = _large.copy_shared_nodes(builder.nodes, builder.edges,
                                                                  builder.node_id)
    dot = builder.emit(max_depth, legend)
    if large_graph is not False:
        dot.graph_attr.update(_large.layout_attributes(builder.drawn))
    dot.unreached = [entry.name for entry in builder.unreached]
    dot.untracked = [entry.name for entry in builder.untracked]
    resize_graph(dot)
    return dot


_LARGE_NOTICE = (
    "make_dot: {drawn} nodes to draw, more than LARGE_GRAPH_NODES ({limit}), so they are drawn "
    "for a fast layout: a tensor read by many nodes is drawn beside each reader, nothing is "
    "left out. Pass large_graph=True to also draw repeated steps once with a count, max_depth=N "
    "to draw only the nodes near the output, or large_graph=False for the plain picture (its "
    "layout may take minutes); either silences this warning.")

_UNTAGGED_NOTICE = (
    "make_dot: fuse_optimizer=True found no tagged optimizer step, but this graph seems to hold "
    "some (a gradient taken with create_graph=True, added to a parameter). Steps of torchopt_fn's "
    "optimizers are tagged; tag your own loop after each step with "
    "torchopt_fn.visual.tag_optimizer_step(new_params, (params, grads), 'sgd step', step=i) "
    "to draw each step as one node per parameter.")


def _output_tensors(var: Any) -> list[tuple[str, torch.Tensor]]:
    """The output tensors with their names (paths in ``var``); checks there is something to
    draw behind them."""
    paths, outputs, _ = optree.tree_flatten_with_path(var, none_is_leaf=tree_math.NONE_IS_LEAF,
                                                      namespace=tree_math.NAMESPACE)
    if not outputs:
        raise ValueError(f"make_dot: `var` holds no output tensor (got {type(var).__name__}); "
                         "pass the tensor to draw the graph of, e.g. the loss")
    for leaf in outputs:
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(f"make_dot: `var` must be a tensor or a pytree of tensors; found a "
                            f"{type(leaf).__name__} leaf")
    named = [(path_name(path), leaf) for path, leaf in zip(paths, outputs, strict=True)]
    constant = [name or "the output" for name, leaf in named if not leaf.requires_grad]
    if constant:
        warnings.warn(
            f"make_dot: {', '.join(map(repr, constant))} does not require grad, so no autograd "
            "graph leads to it: was it computed under torch.no_grad(), detached, or from "
            "tensors that do not require grad?", stacklevel=3)
    return named


class _GraphBuilder:
    """Collects display nodes and edges, then writes them into a :class:`GradientGraph`."""

    def __init__(self, names: ParameterNames, show_attrs: bool, show_saved: bool,
                 max_attr_chars: int) -> None:
        self.names = names
        self.show_attrs = show_attrs
        self.show_saved = show_saved
        self.max_attr_chars = max(max_attr_chars, 3)
        self.roots: list[Node] = []
        self._output_edges: list[tuple[Node, int]] = []
        self._output_leaves: list[torch.Tensor] = []
        # Output tensors (and view bases) by node, with the names of the outputs they are.
        self._output_nodes: dict[str, tuple[torch.Tensor, list[str]]] = {}
        self.reached: set[tuple[Node, int]] = set()
        self._reached_entries: set[int] = set()
        self._graph_entries: set[int] = set()
        self.unreached: list[NamedParameter] = []
        self.untracked: list[NamedParameter] = []
        self._drawn_entries: set[int] = set()
        self.nodes: dict[str, DisplayNode] = {}
        self.edges: Edges = {}
        self._ids: dict[Any, str] = {}
        self._keep_alive: list[Any] = []
        self.drawn = 0
        self.cluster_labels = dict(_CLUSTER_LABELS)
        self._fusion: Fusion | None = None

    # -- identifiers ---------------------------------------------------------------------------

    def node_id(self, key: Hashable) -> str:
        """The node identifier of ``key``, a new one the first time."""
        identifier = self._ids.get(key)
        if identifier is None:
            identifier = self._ids[key] = f"n{len(self._ids)}"
        return identifier

    def _tensor_id(self, tensor: torch.Tensor) -> str:
        self._keep_alive.append(tensor)  # so that its id is not reused while we draw
        return self.node_id(("tensor", id(tensor)))

    def _output_id(self, node: Node, output_nr: int) -> str:
        step = self._fusion.output_owner(node, output_nr) if self._fusion else None
        return self.node_id(step) if step is not None else self.node_id(node)

    def _input_reader_ids(self, node: Node, input_index: int) -> list[str]:
        steps = self._fusion.input_owners(node, input_index) if self._fusion else None
        return [self.node_id(step) for step in steps] if steps is not None else [self.node_id(node)]

    # -- tensors -------------------------------------------------------------------------------

    def _tensor_entries(self, tensor: torch.Tensor) -> list[NamedParameter]:
        if tensor.grad_fn is None:
            return self.names.leaf_names(tensor)
        return self.names.by_output.get((tensor.grad_fn, tensor.output_nr), [])

    def _named_display(self, entries: list[NamedParameter], lines: list[str],
                       kinds: tuple[str, ...], reached: bool, **fields: Any) -> DisplayNode:
        """A node that shows ``entries``; drawn red when the outputs do not reach it."""
        names = tuple(entry.name for entry in entries)
        if entries and not reached:
            kinds = (*kinds, "unreached")
            lines = [*lines, _NO_PATH]
            self._drawn_entries.update(map(id, entries))
        return DisplayNode(lines, kinds, names, **fields)

    def _tensor_node(self, tensor: torch.Tensor, kind: str,
                     output_names: tuple[str, ...] = ()) -> DisplayNode:
        entries = self._tensor_entries(tensor)
        reached = all(id(entry) in self._reached_entries for entry in entries)
        lines = [*output_names, *(e.name for e in entries), _shape(tensor.shape)]
        return self._named_display(entries, lines, (kind,), reached)

    def add_outputs(self, outputs: list[tuple[str, torch.Tensor]]) -> None:
        for name, tensor in outputs:
            identifier = self._add_tensor(tensor, "output")
            if name:
                self._output_nodes[identifier][1].append(name)

    def _add_tensor(self, tensor: torch.Tensor, kind: str) -> str:
        identifier = self._tensor_id(tensor)
        if identifier in self.nodes:
            return identifier
        self.nodes[identifier] = DisplayNode([], (kind,))  # labelled by find_reached
        self._output_nodes[identifier] = (tensor, [])
        if tensor.grad_fn is not None:
            self.roots.append(tensor.grad_fn)
            self._output_edges.append((tensor.grad_fn, tensor.output_nr))
            self.edges[(("grad_fn", tensor.grad_fn, tensor.output_nr), identifier)] = {}
        elif tensor.requires_grad:
            self._output_leaves.append(tensor)
        if tensor._is_view():
            base = self._add_tensor(tensor._base, "view_base")
            self.edges[(base, identifier)] = {"style": "dotted"}
        return identifier

    def find_reached(self, nodes: list[Node]) -> None:
        """Finds which named tensors the outputs reach, then labels the output nodes."""
        self.reached = reached_outputs(self._output_edges)
        for leaf in [*self._output_leaves, *_leaves(node for node, _ in self.reached)]:
            self._reached_entries.update(map(id, self.names.leaf_names(leaf)))
        for output in self.reached:
            self._reached_entries.update(map(id, self.names.by_output.get(output, ())))
        for leaf in [*self._output_leaves, *_leaves(nodes)]:
            self._graph_entries.update(map(id, self.names.leaf_names(leaf)))
        for entry in self.names.parameters:
            if id(entry) in self._reached_entries:
                continue
            if entry.is_alias and id(entry) not in self._graph_entries:
                self.untracked.append(entry)
            else:
                self.unreached.append(entry)
        for identifier, (tensor, names) in self._output_nodes.items():
            self.nodes[identifier] = self._tensor_node(tensor, self.nodes[identifier].kinds[0],
                                                       tuple(names))

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
        entries = self.names.by_output.get((step.node, step.output_nr), [])
        lines = [step.label]
        kinds: tuple[str, ...] = ("fused",)
        if entries:
            lines += [entry.name for entry in entries]
            kinds = ("fused", "param")
        elif step.parameter:
            lines.append(step.parameter)
        lines += [_shape(output_shape(step.node, step.output_nr)),
                  f"[{step.members.total()} autograd nodes]"]
        tooltip = ", ".join(f"{count} x {name}" for name, count in sorted(step.members.items()))
        self.nodes[self.node_id(step)] = self._named_display(
            entries, lines, kinds, (step.node, step.output_nr) in self.reached, tooltip=tooltip)

    def _add_backward(self, node: Node) -> None:
        identifier = self.node_id(node)
        lines = [node_name(node)]
        kinds: tuple[str, ...] = ("backward",)
        # A name on an output that nothing reads gets its own red node (see add_unreached).
        named = [entry for entry in self.names.by_node.get(node, [])
                 if id(entry) in self._reached_entries]
        if named:
            kinds = ("backward", "param")
            for entry in named:
                lines += [entry.name, _shape(entry.tensor.shape)]
        saved = saved_values(node) if self.show_attrs or self.show_saved else []
        if self.show_attrs:
            lines += _attribute_table(saved, self.max_attr_chars, len(lines[0]))
        self.nodes[identifier] = DisplayNode(lines, kinds, tuple(e.name for e in named))
        variable = leaf_variable(node)
        if variable is not None:
            tensor_id = self._tensor_id(variable)
            self.nodes[tensor_id] = self._tensor_node(variable, "param")
            self.nodes[identifier].leaf = tensor_id
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
            identifier = self.node_id(("saved", owner, label))
            if isinstance(tensor, Freed):
                display = DisplayNode([label, str(FREED)], ("freed",), owner=owner)
            else:
                display = DisplayNode([label, _shape(tensor.shape)], ("saved",), owner=owner)
            self.nodes[identifier] = display
            self.edges[(owner, identifier)] = {"dir": "none"}

    # -- diagnosis -----------------------------------------------------------------------------

    def add_unreached(self, nodes: list[Node]) -> None:
        """Draws the named tensors not drawn elsewhere that the outputs do not reach (red, from
        the node that computed them if it is drawn) or that autograd does not track."""
        walked = set(nodes)
        for entry in self.unreached:
            if id(entry) in self._drawn_entries:
                continue
            identifier = self.node_id(("unreached", id(entry)))
            self.nodes[identifier] = DisplayNode(
                [entry.name, *_tensor_facts(entry.tensor), _NO_PATH], ("unreached",),
                (entry.name,), module=_UNREACHED_CLUSTER)
            if entry.leaf_id is None and entry.tensor.grad_fn in walked:
                source = self._output_id(entry.tensor.grad_fn, entry.tensor.output_nr)
                self.edges[(source, identifier)] = {"style": "dashed"}
        if self.untracked and self.names.from_state_dict:
            self.cluster_labels[_UNTRACKED_CLUSTER] += "\\n" + _STATE_DICT_HINT  # DOT line break
        for entry in self.untracked:
            self.nodes[self.node_id(("untracked", id(entry)))] = DisplayNode(
                [entry.name, *_tensor_facts(entry.tensor)], ("untracked",), (entry.name,),
                module=_UNTRACKED_CLUSTER)

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

    def count_drawn(self, max_depth: int | None) -> int:
        """How many nodes :meth:`emit` would draw, the dashed node for hidden ones included."""
        visible = self._visible(max_depth)
        return len(visible) + (len(visible) < len(self.nodes))

    def emit(self, max_depth: int | None, legend: bool = False) -> GradientGraph:
        """Writes the visible nodes and edges into a new :class:`GradientGraph`."""
        visible = self._visible(max_depth)
        dot = GradientGraph(node_attr=_NODE_ATTR, graph_attr={"size": "12,12"})
        members: dict[str | None, list[str]] = collections.defaultdict(list)
        for identifier in self.nodes:
            if identifier in visible:
                members[self.nodes[identifier].module].append(identifier)
        for identifier in members.pop(None, []):
            self._emit_node(dot, identifier)
        parents = _cluster_parents(set(members) - set(_CLUSTER_LABELS))
        children: dict[str | None, list[str]] = collections.defaultdict(list)
        for module in sorted(set(members) | set(parents)):
            children[parents.get(module)].append(module)
        for module in children[None]:
            self._emit_cluster(dot, module, members, children)
        for (source, target), attrs in self.edges.items():
            if source in visible and target in visible:
                dot.edge(source, target, **attrs)
        hidden = len(self.nodes) - len(visible)
        if hidden:
            self._emit_collapsed(dot, visible, hidden, max_depth)
        self.drawn = len(visible) + bool(hidden)
        if legend:
            kinds = {kind for i in visible for kind in self.nodes[i].kinds}
            self._emit_legend(dot, [k for k in NODE_STYLES if k in kinds or
                                    (k == "collapsed" and hidden)])
        return dot

    def _emit_cluster(self, dot: Any, module: str, members: dict[str | None, list[str]],
                      children: dict[str | None, list[str]]) -> None:
        with dot.subgraph(name=f"cluster_{module}") as cluster:
            cluster.attr(label=self.cluster_labels.get(module, module), style="rounded,dashed",
                         color="grey40")
            for identifier in members.get(module, ()):
                self._emit_node(cluster, identifier)
            for child in children[module]:
                self._emit_cluster(cluster, child, members, children)

    def _emit_legend(self, dot: GradientGraph, kinds: list[str]) -> None:
        with dot.subgraph(name="cluster_legend") as cluster:
            cluster.attr(label="legend", style="rounded", color="grey40")
            previous = None
            for kind in kinds:
                identifier = self.node_id(("legend", kind))
                cluster.node(identifier, _label([NODE_MEANINGS[kind]]),
                             _attributes={"class": "legend"}, **NODE_STYLES[kind])
                if previous is not None:  # stack the entries in one column
                    cluster.edge(previous, identifier, style="invis")
                previous = identifier

    def _emit_node(self, dot: Any, identifier: str) -> None:
        display = self.nodes[identifier]
        style: dict[str, str] = {}
        for kind in display.kinds:  # a named backward or fused node takes the parameter's colour
            style.update(NODE_STYLES[kind])
        if display.tooltip:
            style["tooltip"] = display.tooltip
        dot.node(identifier, _label(display.lines), _attributes={"class": " ".join(display.kinds)},
                 **style)

    def _visible(self, max_depth: int | None) -> set[str]:
        return set(self.nodes) if max_depth is None else self._within_depth(max_depth)

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
        visible.update(d.leaf for i, d in self.nodes.items() if i in depth and d.leaf)
        visible.update(i for i, d in self.nodes.items() if d.owner in depth)
        return visible

    def _emit_collapsed(self, dot: GradientGraph, visible: set[str], hidden: int,
                        max_depth: int | None) -> None:
        identifier = self.node_id("collapsed")
        dot.node(identifier, _label([f"{hidden} more nodes", f"beyond depth {max_depth}"]),
                 _attributes={"class": "collapsed"}, **NODE_STYLES["collapsed"])
        frontier = {target for source, target in self.edges
                    if target in visible and source not in visible}
        for target in sorted(frontier):
            dot.edge(identifier, target, style="dashed")


def _cluster_parents(modules: set[str]) -> dict[str, str | None]:
    """The enclosing cluster of each module cluster, adding the modules where paths branch.

    ``self_attn`` (which holds ``in_proj_weight``) encloses ``self_attn.out_proj``; ``layers``
    is drawn around ``layers.0`` and ``layers.1``, but ``encoder`` is not drawn around a lone
    ``encoder.0``.
    """
    branches: dict[str, set[str]] = collections.defaultdict(set)
    for module in modules:
        parts = module.split(".")
        for end in range(1, len(parts)):
            branches[".".join(parts[:end])].add(parts[end])
    clusters = modules | {prefix for prefix, below in branches.items() if len(below) > 1}
    parents: dict[str, str | None] = {}
    for module in clusters:
        parts = module.split(".")
        enclosing = [".".join(parts[:end]) for end in range(len(parts) - 1, 0, -1)
                     if ".".join(parts[:end]) in clusters]
        parents[module] = enclosing[0] if enclosing else None
    return parents


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


def _leaves(nodes: Iterable[Node]) -> list[torch.Tensor]:
    return [leaf for leaf in map(leaf_variable, nodes) if leaf is not None]


def _tensor_facts(tensor: torch.Tensor | None) -> list[str]:
    if tensor is None:
        return []
    return [_shape(tensor.shape), *([] if tensor.requires_grad else ["requires_grad=False"])]


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
