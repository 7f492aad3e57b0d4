"""Draws the legend of :func:`torchopt_fn.visual.make_dot` and an example graph for the docs.

At ``builder-inited`` this writes into ``docs/_generated/`` (not committed): ``visual_legend.svg``
with one node per kind of :data:`torchopt_fn.visual.NODE_STYLES`, drawn as ``make_dot`` draws it,
``visual_legend_table.md`` with the meaning of each kind from
:data:`torchopt_fn.visual.NODE_MEANINGS`, and ``visual_example.svg``, the graph of one
differentiable ``MetaSGD`` step. The page ``guides/visualizer_legend.md`` includes them, so the
legend is always the one the code draws.
"""

from __future__ import annotations

import pathlib
from typing import Any

import graphviz
from sphinx.application import Sphinx

GENERATED = pathlib.Path(__file__).resolve().parent.parent / "_generated"


def _legend() -> graphviz.Digraph:
    from torchopt_fn.visual import NODE_MEANINGS, NODE_STYLES

    legend = graphviz.Digraph(graph_attr={"rankdir": "LR", "nodesep": "0.15"},
                              node_attr={"style": "filled", "shape": "box", "fontsize": "10",
                                         "fontname": "monospace"})
    for kind, style in NODE_STYLES.items():
        legend.node(kind, label=f"{kind}\n{NODE_MEANINGS[kind]}", **style)
    kinds = list(NODE_STYLES)
    half = (len(kinds) + 1) // 2
    for left, right in zip(kinds[:half], kinds[half:]):
        legend.edge(left, right, style="invis")
    return legend


def _example() -> graphviz.Digraph:
    import torch
    from torch import nn

    import torchopt_fn
    from torchopt_fn.visual import make_dot

    torch.manual_seed(0)
    net = nn.Linear(2, 1)
    optimizer = torchopt_fn.MetaSGD(net, lr=0.1)
    before = torchopt_fn.extract_state_dict(net, enable_visual=True, visual_prefix="step0.")
    x = torch.randn(4, 2)
    optimizer.step(net(x).pow(2).mean())
    after = torchopt_fn.extract_state_dict(net, enable_visual=True, visual_prefix="step1.")
    return make_dot(net(x).pow(2).mean(), [before, after])


def _table() -> str:
    from torchopt_fn.visual import NODE_MEANINGS, NODE_STYLES

    rows = ["| kind | drawn as | meaning |", "| --- | --- | --- |"]
    for kind, style in NODE_STYLES.items():
        drawn = ", ".join(f"{key} `{value}`" for key, value in style.items())
        rows.append(f"| `{kind}` | {drawn} | {NODE_MEANINGS[kind]} |")
    return "\n".join(rows) + "\n"


def generate(app: Sphinx) -> None:
    GENERATED.mkdir(exist_ok=True)
    for name, graph in (("visual_legend", _legend()), ("visual_example", _example())):
        svg = graph.pipe(format="svg")
        path = GENERATED / f"{name}.svg"
        if not path.exists() or path.read_bytes() != svg:
            path.write_bytes(svg)
    table = GENERATED / "visual_legend_table.md"
    if not table.exists() or table.read_text() != _table():
        table.write_text(_table())


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", generate)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
