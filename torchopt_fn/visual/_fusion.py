"""Optimizer-aware fusion: which autograd nodes belong to which optimizer step.

:func:`torchopt_fn._graph_tags.tag_optimizer_step` marks the outputs of a step (the new parameters)
and the nodes where the step began. Walking backward from one tagged output until it reaches a
node that existed before the step (a boundary node or anything it was computed from) collects the
step's work for that parameter. The walk follows tensors, not nodes, so a ``torch._foreach_*``
node shared by every parameter is split back into one part per parameter.

A node (or, for a foreach node, one of its outputs) reached by the walks of two steps or two
parameters belongs to neither and is drawn on its own, so fusion never hides a real connection.
"""

from __future__ import annotations

import collections
import dataclasses

from torch.autograd.graph import Node

from torchopt_fn._graph_tags import optimizer_step_tag
from torchopt_fn.visual._autograd import (
    foreach_output_count,
    input_readers,
    leaf_variable,
    node_name,
    output_inputs,
    walk,
)
from torchopt_fn.visual._params import ParameterNames


@dataclasses.dataclass(eq=False)
class FusedStep:
    """One parameter's share of one optimizer step, drawn as one node.

    Attributes:
      label: The tag's label, e.g. ``"MetaAdam step 1"``.
      node: The tagged ``grad_fn`` (of the new parameter).
      output_nr: Which output of ``node`` the new parameter is.
      parameter: The parameter's name or path the step was tagged with, if any.
      members: How many autograd nodes of each type it stands for (a foreach node shared by
        several parameters counts for each of them).
    """

    label: str
    node: Node
    output_nr: int
    parameter: str | None = None
    members: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


# Marks an output claimed by more than one step; also marks a foreach node split per output.
_SHARED = object()
# Backward nodes of additions, as in ``param - lr * grad`` or ``apply_updates``.
_ADDITIONS = ("AddBackward", "SubBackward", "ForeachAddBackward", "ForeachSubBackward")


class Fusion:
    """The fused steps of a graph and which nodes they absorb.

    Attributes:
      steps: The steps drawn as nodes, one per tagged output.
    """

    def __init__(self, nodes: list[Node], names: ParameterNames) -> None:
        walks = []
        # The nodes that existed before each step: its boundary and everything behind it. One
        # walk per distinct boundary, so K unrolled steps cost K walks of the graph.
        before: dict[frozenset[Node], set[Node]] = {}
        for node in nodes:
            tag = optimizer_step_tag(node)
            for output_nr in sorted(tag.output_nrs) if tag is not None else ():
                step = FusedStep(label=tag.label, node=node, output_nr=output_nr,
                                 parameter=tag.names.get(output_nr))
                if tag.boundary not in before:
                    before[tag.boundary] = set(walk(tag.boundary))
                walks.append((step, _walk_step(step, before[tag.boundary], tag.own_leaves,
                                               names)))
        # A step tagged inside another one (an optimizer's update inside a meta-optimizer's
        # step) is part of the outer step, which reached it.
        nested = set()
        for step, outputs in walks:
            nested.update(outputs - {(step.node, step.output_nr)})
        self._claims: dict[tuple[Node, int], object] = {}
        candidates = []
        for step, outputs in walks:
            if (step.node, step.output_nr) not in nested:
                candidates.append(step)
                for output in outputs:
                    if self._claims.setdefault(output, step) is not step:
                        self._claims[output] = _SHARED
        self._absorbed: dict[Node, object] = {}
        self.steps = self._absorb(candidates)

    def _absorb(self, candidates: list[FusedStep]) -> list[FusedStep]:
        claims_by_node: dict[Node, dict[int, object]] = {}
        for (node, output_nr), claimant in self._claims.items():
            claims_by_node.setdefault(node, {})[output_nr] = claimant
        owners: dict[Node, set[object]] = {}
        for node, claims in claims_by_node.items():
            claimants = set(claims.values())
            if _SHARED not in claimants and (
                    len(claimants) == 1
                    or set(claims) == set(range(foreach_output_count(node)))):
                owners[node] = claimants
        # A step whose own output node cannot be absorbed (a non-foreach node producing several
        # parameters) has no node to be drawn as; its nodes are drawn one by one instead.
        drawn = [step for step in candidates if step.node in owners]
        drawn_set = set(drawn)
        for node, claimants in owners.items():
            if not claimants <= drawn_set:
                continue
            for claimant in claimants:
                claimant.members[node_name(node)] += 1
            self._absorbed[node] = next(iter(claimants)) if len(claimants) == 1 else _SHARED
        return drawn

    def output_owner(self, node: Node, output_nr: int) -> FusedStep | None:
        """The step that output ``output_nr`` of ``node`` is drawn inside, if any."""
        owner = self._absorbed.get(node)
        if owner is _SHARED:
            return self._claims[(node, output_nr)]
        return owner

    def input_owners(self, node: Node, input_index: int) -> list[FusedStep] | None:
        """The steps reading input ``input_index`` of ``node``; ``None`` if it is not absorbed."""
        owner = self._absorbed.get(node)
        if owner is None:
            return None
        if owner is _SHARED:
            return list(dict.fromkeys(self._claims[(node, output_nr)]
                                      for output_nr in input_readers(node, input_index)))
        return [owner]

    def is_absorbed(self, node: Node) -> bool:
        """Whether ``node`` is drawn inside fused steps rather than on its own."""
        return node in self._absorbed


def _walk_step(step: FusedStep, before: set[Node], own_leaves: frozenset[Node],
               names: ParameterNames) -> set[tuple[Node, int]]:
    """The outputs ``(node, output_nr)`` a step computed on the way to one tagged output.

    The walk stops at nodes that existed before the step (so at earlier steps' outputs, but
    not at those of steps nested in this one), at named tensors and at leaves other than the
    step's own unnamed state leaves.
    """
    start = (step.node, step.output_nr)
    visited = {start}
    stack = [start]
    while stack:
        for child in output_inputs(*stack.pop()):
            node = child[0]
            leaf = leaf_variable(node)
            if (child in visited or node in before or child in names.by_output
                    or (leaf is not None and (node not in own_leaves
                                              or names.leaf_names(leaf)))):
                continue
            visited.add(child)
            stack.append(child)
    return visited


def looks_like_optimizer_steps(nodes: list[Node]) -> bool:
    """Whether an untagged graph seems to hold differentiable optimizer steps.

    It does when it holds a gradient computed with ``create_graph=True`` (a backward-of-backward
    node) or a ``torch._foreach_*`` node, and an addition that reads a leaf tensor directly, as
    ``param - lr * grad`` and ``apply_updates`` do.
    """
    names = {node: node_name(node) for node in nodes}
    if not any("BackwardBackward" in name or name.startswith("Foreach")
               for name in names.values()):
        return False
    return any(name.startswith(_ADDITIONS) and any(
        child is not None and leaf_variable(child) is not None for child, _ in node.next_functions)
        for node, name in names.items())
