"""What :func:`make_dot` draws, before it is written out as Graphviz statements."""

from __future__ import annotations

import dataclasses

# Edges by (source, target) identifier, with their Graphviz attributes; data flows source -> target.
Edges = dict[tuple[str, str], dict[str, str]]


@dataclasses.dataclass
class DisplayNode:
    """One node of the picture.

    Attributes:
      lines: The label, one entry per line.
      kinds: Keys of ``NODE_STYLES``, applied in order; the first says what the node is.
      param_names: Names from ``params`` the node shows.
      module: The Graphviz cluster the node is drawn in (a module path), if any.
      owner: For a saved tensor, the node that saved it (drawn, hidden and clustered with it).
      tooltip: Text shown when hovering over the rendered node.
      leaf: For an ``AccumulateGrad`` node, the node of the tensor whose ``.grad`` it fills.
    """

    lines: list[str]
    kinds: tuple[str, ...]
    param_names: tuple[str, ...] = ()
    module: str | None = None
    owner: str | None = None
    tooltip: str | None = None
    leaf: str | None = None
