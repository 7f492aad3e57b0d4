"""Large graphs: layout options chosen by size, repeated steps collapsed, shared tensors copied.

Graphviz's ``dot`` lays out a graph in ranks and splits every edge that spans several ranks into
a chain of virtual nodes. An unrolled loop (an RNN over a sequence, an inner optimization loop)
is deep, and the parameters every step reads send one edge per step across the whole depth: an
RNN cell unrolled 100 steps (about 1,000 drawn nodes) does not finish its layout in minutes,
while the same graph with those edges cut lays out in about a second. So the large-graph mode
(``make_dot(..., large_graph=True)``)

* collapses repeated steps, the same loop body applied again, into one node with a count
  (:func:`collapse_repeats`);
* draws a tensor read by many nodes beside each of its readers instead of once with long edges
  (:func:`copy_shared_nodes`);
* bounds the network-simplex and crossing-minimisation passes (:func:`layout_attributes`).

``make_dot``'s default does the last two above :data:`LARGE_GRAPH_NODES` drawn nodes, and only
the last one below it: collapsing changes what the picture shows, so it stays opt-in.

Repeated steps are found without knowing the model. Nodes get a structural colour (their label
and, three times over, the colours of their neighbours, as in the Weisfeiler-Lehman test), so the
nodes at the same place of different steps share a colour. A colour whose nodes lie on one chain,
each computed from the previous one (an anchor per step), cuts the graph into steps: a node
belongs to the step of the last anchor it was computed from, or, if it follows no anchor, to the
step that reads it. Consecutive steps with the same structure, reading the same shared nodes, are
merged. This works whatever the loop carries (an LSTM's two states, an optimizer's moments).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Hashable

from torchopt_fn.visual._display import DisplayNode, Edges

LARGE_GRAPH_NODES = 500
"""Above this many drawn nodes, ``make_dot`` draws for a fast layout by default (a tensor read by
many nodes drawn beside each reader, nothing collapsed) and warns."""

_MIN_REPEATS = 3
_SHARED_FAN_OUT = 4
_COLOUR_ROUNDS = 3
_CANDIDATE_COLOURS = 5
_ENOUGH = 0.8  # stop trying candidates once this share of the nodes is collapsed
_COLLAPSIBLE = ("backward", "fused", "param")


def layout_attributes(node_count: int) -> dict[str, str]:
    """Graphviz graph attributes that keep the layout of ``node_count`` nodes fast.

    ``nslimit``/``nslimit1`` bound the network-simplex passes that rank nodes and place them,
    ``mclimit`` the crossing-minimisation passes; straight edges avoid spline routing. Pictures
    get a little less tidy; small graphs keep Graphviz's defaults.
    """
    if node_count < 150:
        return {}
    attributes = {"nslimit": "1", "nslimit1": "1", "mclimit": "0.1"}
    if node_count >= 1000:
        attributes.update(splines="line", remincross="false")
    return attributes


@dataclasses.dataclass
class _Run:
    """Consecutive steps with the same structure: their nodes and how many steps."""

    members: dict[str, int]  # node -> step
    steps: int
    per_step: list[str]  # the nodes of the first step


def collapse_repeats(nodes: dict[str, DisplayNode], edges: Edges,
                     new_id: Callable[[Hashable], str]) -> tuple[dict[str, DisplayNode], Edges]:
    """Replaces each run of at least three identical consecutive steps by one node.

    The node says how many steps it stands for and, on hover, what one step holds; an edge from
    the node to itself marks the loop. Edges into and out of the run are kept, from and to the
    new node. Saved tensors of hidden nodes are hidden too.
    """
    runs = _find_runs(nodes, edges)
    if not runs:
        return nodes, edges
    replaced: dict[str, str] = {}
    new_nodes = dict(nodes)
    for index, run in enumerate(runs):
        box = new_id(("repeated", index))
        members = collections.Counter(nodes[i].lines[0] for i in run.per_step)
        modules = {nodes[i].module for i in run.members}
        new_nodes[box] = DisplayNode(
            [f"repeated x{run.steps}", f"[{len(run.per_step)} nodes each]"], ("repeated",),
            module=modules.pop() if len(modules) == 1 else None,
            tooltip=(f"{run.steps} repetitions of: "
                     + ", ".join(f"{n} x {name}" for name, n in sorted(members.items()))
                     + "; make_dot(..., collapse_repeats=False) draws them all"))
        for identifier in run.members:
            replaced[identifier] = box
    for identifier, display in nodes.items():
        if identifier in replaced or display.owner in replaced:
            del new_nodes[identifier]
    steps = {i: step for run in runs for i, step in run.members.items()}
    new_edges: Edges = {}
    for (source, target), attrs in edges.items():
        if target not in new_nodes and target not in replaced:
            continue  # a hidden saved tensor
        new_source, new_target = replaced.get(source, source), replaced.get(target, target)
        if new_source == new_target:
            if steps.get(source) != steps.get(target):
                new_edges[(new_source, new_target)] = {"style": "dashed"}
            continue
        new_edges.setdefault((new_source, new_target), attrs)
    return new_nodes, new_edges


def _find_runs(nodes: dict[str, DisplayNode], edges: Edges) -> list[_Run]:
    # In drawing order, so that ties between candidates break the same way in every run.
    collapsible = {i: None for i, d in nodes.items()
                   if d.owner is None and d.kinds[0] in _COLLAPSIBLE}
    inputs: dict[str, list[str]] = collections.defaultdict(list)
    readers: dict[str, list[str]] = collections.defaultdict(list)
    for source, target in edges:
        if source in collapsible and target in collapsible:
            inputs[target].append(source)
            readers[source].append(target)
    order = _topological_order(collapsible, inputs, readers)
    labels = {i: hash((nodes[i].kinds, tuple(nodes[i].lines))) for i in collapsible}
    colours = _colours(labels, inputs, readers)
    counts = collections.Counter(colours.values())
    best: list[_Run] = []
    for colour, count in counts.most_common(_CANDIDATE_COLOURS):
        if count < _MIN_REPEATS:
            break
        anchors = {i for i in collapsible if colours[i] == colour}
        step = _steps(order, anchors, inputs, readers)
        if step is None:
            continue
        runs = _runs(step, labels, inputs)
        if sum(len(r.members) for r in runs) > sum(len(r.members) for r in best):
            best = runs
        if sum(len(r.members) for r in best) > _ENOUGH * len(collapsible):
            break
    return best


def _topological_order(ids: dict[str, None], inputs: dict[str, list[str]],
                       readers: dict[str, list[str]]) -> list[str]:
    pending = {i: len(inputs[i]) for i in ids}
    ready = [i for i, n in pending.items() if n == 0]
    order = []
    while ready:
        identifier = ready.pop()
        order.append(identifier)
        for reader in readers[identifier]:
            pending[reader] -= 1
            if pending[reader] == 0:
                ready.append(reader)
    return order


def _colours(labels: dict[str, int], inputs: dict[str, list[str]],
             readers: dict[str, list[str]]) -> dict[str, int]:
    colours = dict(labels)
    for _ in range(_COLOUR_ROUNDS):
        colours = {i: hash((c, tuple(sorted(colours[s] for s in inputs[i])),
                            tuple(sorted(colours[r] for r in readers[i]))))
                   for i, c in colours.items()}
    return colours


def _steps(order: list[str], anchors: set[str], inputs: dict[str, list[str]],
           readers: dict[str, list[str]]) -> dict[str, int] | None:
    """Step of each node (0: before the first anchor and read by several steps), or ``None``
    if the anchors do not form one chain."""
    step: dict[str, int] = {}
    for identifier in order:
        step[identifier] = max((step[s] for s in inputs[identifier]), default=0) + (
            identifier in anchors)
    if len({step[a] for a in anchors}) != len(anchors):
        return None
    for identifier in reversed(order):
        if step[identifier] == 0:
            reading_steps = {step[r] for r in readers[identifier]}
            if len(reading_steps) == 1:
                step[identifier] = reading_steps.pop()
    return step


def _runs(step: dict[str, int], labels: dict[str, int],
          inputs: dict[str, list[str]]) -> list[_Run]:
    groups: dict[int, list[str]] = collections.defaultdict(list)
    for identifier, index in step.items():
        if index:
            groups[index].append(identifier)

    def signature(index: int) -> tuple:
        def source(s: str) -> tuple:
            return ("step", step[s] - index) if step[s] else ("shared", s)
        return tuple(sorted((labels[i], tuple(sorted(map(source, inputs[i]))))
                            for i in groups[index]))

    runs: list[_Run] = []
    start, previous = 1, None
    last = max(groups, default=0)
    for index in range(1, last + 2):
        current = signature(index) if index <= last else None
        if current is None or current != previous:
            if previous is not None and index - start >= _MIN_REPEATS:
                members = {i: k for k in range(start, index) for i in groups[k]}
                runs.append(_Run(members, index - start, groups[start]))
            start, previous = index, current
    return runs


def copy_shared_nodes(nodes: dict[str, DisplayNode], edges: Edges,
                      new_id: Callable[[Hashable], str]) -> tuple[dict[str, DisplayNode], Edges]:
    """Draws an input read by more than four nodes as a dashed copy beside each reader.

    Only nodes computed from nothing drawn are copied: leaf tensors and ``AccumulateGrad``
    nodes, which are copied as the tensor they fill (the parameter's name). The original
    stays, saying how many copies stand for it. ``new_id`` names the copies.
    """
    computed = {target for source, target in edges if nodes[target].leaf != source}
    fan_out = collections.Counter(source for source, target in edges
                                  if nodes[target].owner is None and source not in computed)
    shared = {i: None for i, n in fan_out.items() if n > _SHARED_FAN_OUT}
    if not shared:
        return nodes, edges
    new_nodes = dict(nodes)
    new_edges: Edges = {}
    for (source, target), attrs in edges.items():
        if source not in shared or nodes[target].owner is not None:
            new_edges[(source, target)] = attrs
            continue
        original = nodes[nodes[source].leaf] if nodes[source].leaf else nodes[source]
        copy = new_id(("copy", source, target))
        new_nodes[copy] = DisplayNode(list(original.lines), (*original.kinds, "copy"),
                                      original.param_names, nodes[target].module)
        new_edges[(copy, target)] = attrs
    for identifier in shared:
        display = nodes[identifier]
        described = nodes[display.leaf] if display.leaf else display
        key = display.leaf or identifier
        new_nodes[key] = dataclasses.replace(
            described, lines=[*described.lines, f"read {fan_out[identifier]} times: drawn "
                              "beside each reader"])
    return new_nodes, new_edges
