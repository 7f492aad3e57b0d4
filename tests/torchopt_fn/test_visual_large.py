"""make_dot on large graphs: the default above the threshold, the warning, layout options,
repeated steps collapsed, max_depth.

Rendering here is bounded: only collapsed (small) graphs are laid out, with a timeout.
"""

from __future__ import annotations

import re
import subprocess
import warnings

import pytest
import torch
from torch import nn

from tests.torchopt_fn.test_visual import (
    assert_well_formed,
    count_autograd_nodes,
    nodes_of,
    param_nodes,
    parse_dot,
    reaches,
)
from torchopt_fn.visual import LARGE_GRAPH_NODES, make_dot


def unrolled_rnn(steps: int, cell_type: type[nn.Module] = nn.RNNCell) -> tuple[torch.Tensor,
                                                                             nn.Module]:
    torch.manual_seed(0)
    cell = cell_type(4, 4)
    h = torch.zeros(1, 4)
    state = (h, torch.zeros(1, 4)) if cell_type is nn.LSTMCell else h
    for x in torch.randn(steps, 1, 4):
        state = cell(x, state)
        if cell_type is nn.RNNCell:
            state = torch.tanh(state * 0.5 + 0.1) - 0.01
    out = state[0] + state[1] if cell_type is nn.LSTMCell else state
    return out.sum(), cell


def layout_svg(dot: object, seconds: float = 60.0) -> str:
    """Runs Graphviz on the DOT source, bounded in time (the graph attributes apply)."""
    result = subprocess.run(["dot", "-Tsvg"], input=dot.source.encode(), capture_output=True,
                            timeout=seconds, check=True)
    return result.stdout.decode()


def test_large_graph_warns_with_a_suggestion() -> None:
    out, cell = unrolled_rnn(LARGE_GRAPH_NODES // 8)
    assert count_autograd_nodes([out]) > LARGE_GRAPH_NODES
    with pytest.warns(UserWarning, match=r"large_graph=True.*max_depth"):
        make_dot(out, cell.named_parameters())
    small, _ = unrolled_rnn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_dot(small, cell.named_parameters())
        make_dot(out, cell.named_parameters(), large_graph=False)
        make_dot(out, cell.named_parameters(), large_graph=True)


def test_default_above_the_threshold_draws_for_a_fast_layout_and_keeps_every_node() -> None:
    # An RNN cell unrolled to about 1,000 nodes: Graphviz took minutes on its plain picture.
    out, cell = unrolled_rnn(100)
    plain = make_dot(out, cell.named_parameters(), large_graph=False)
    assert len(parse_dot(plain)[0]) > LARGE_GRAPH_NODES
    with pytest.warns(UserWarning, match=r"drawn for a fast layout.*nothing is left out"):
        default = make_dot(out, cell.named_parameters())
    fast = make_dot(out, cell.named_parameters(), large_graph=True, collapse_repeats=False)
    assert default.source == fast.source
    assert_well_formed(default)
    attrs = default.graph_attr
    assert float(attrs["nslimit"]) <= 1 and float(attrs["nslimit1"]) <= 1
    assert float(attrs["mclimit"]) < 1 and attrs["splines"] == "line"
    # Nothing collapsed: every node of the plain picture is still drawn, with its edges between
    # drawn nodes; what is new are the copies of the weights beside each reader.
    nodes, edges = parse_dot(default)
    plain_nodes, plain_edges = parse_dot(plain)
    assert set(plain_nodes) <= set(nodes)
    assert not nodes_of(default, "repeated") and not nodes_of(default, "collapsed")
    assert {i for i in nodes if i not in plain_nodes} == set(nodes_of(default, "copy"))
    assert nodes_of(default, "copy")
    assert len(nodes_of(default, "backward")) == len(nodes_of(plain, "backward"))
    copied = {(a, b) for a, b, _ in plain_edges} - {(a, b) for a, b, _ in edges}
    assert {a for a, _ in copied} <= set(nodes_of(plain, "param")) | {
        i for i, n in plain_nodes.items() if n["lines"][0] == "AccumulateGrad"}
    assert set(param_nodes(default)) == {name for name, _ in cell.named_parameters()}


def test_default_below_the_threshold_is_unchanged() -> None:
    for steps, bounded in ((2, False), (49, True)):  # 30 and exactly LARGE_GRAPH_NODES nodes
        out, cell = unrolled_rnn(steps)
        plain = make_dot(out, cell.named_parameters(), large_graph=False)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            default = make_dot(out, cell.named_parameters())
        assert len(parse_dot(default)[0]) <= LARGE_GRAPH_NODES
        assert default.body == plain.body
        layout = {"nslimit": "1", "nslimit1": "1", "mclimit": "0.1"} if bounded else {}
        assert default.graph_attr == {**plain.graph_attr, **layout}


def test_max_depth_decides_whether_a_graph_is_large() -> None:
    out, cell = unrolled_rnn(100)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        default = make_dot(out, cell.named_parameters(), max_depth=20)
    plain = make_dot(out, cell.named_parameters(), max_depth=20, large_graph=False)
    assert default.body == plain.body
    assert not nodes_of(default, "copy")


def test_layout_options_follow_the_size() -> None:
    small, cell = unrolled_rnn(2)
    assert "nslimit" not in make_dot(small, cell.named_parameters()).graph_attr
    out, cell = unrolled_rnn(30)
    attrs = make_dot(out, cell.named_parameters(), large_graph=False).graph_attr
    assert "nslimit" not in attrs
    attrs = make_dot(out, cell.named_parameters(), large_graph=True,
                     collapse_repeats=False).graph_attr
    assert float(attrs["nslimit"]) <= 1 and float(attrs["nslimit1"]) <= 1
    assert float(attrs["mclimit"]) < 1


@pytest.mark.parametrize("cell_type", [nn.RNNCell, nn.LSTMCell])
def test_repeated_steps_collapse_into_one_box_with_a_count(cell_type: type[nn.Module]) -> None:
    steps = 40
    out, cell = unrolled_rnn(steps, cell_type)
    full = make_dot(out, cell.named_parameters(), large_graph=False)
    dot = make_dot(out, cell.named_parameters(), large_graph=True)
    assert_well_formed(dot)
    (box_id, box), = nodes_of(dot, "repeated").items()
    count = int(re.fullmatch(r"repeated x(\d+)", box["lines"][0])[1])
    per_step = int(re.fullmatch(r"\[(\d+) nodes each\]", box["lines"][1])[1])
    assert steps - 6 <= count <= steps
    hidden = count * per_step
    assert len(parse_dot(dot)[0]) == len(parse_dot(full)[0]) - hidden + 1
    assert len(parse_dot(dot)[0]) < 80
    # the parameters are still named and still reach the output, through the box
    assert set(param_nodes(dot)) == {name for name, _ in cell.named_parameters()}
    _, edges = parse_dot(dot)
    (output,) = nodes_of(dot, "output")
    assert reaches(edges, box_id, output)
    assert (box_id, box_id) in {(a, b) for a, b, _ in edges}  # the loop, drawn as a self-edge
    assert "<svg" in layout_svg(dot)
    expanded = make_dot(out, cell.named_parameters(), large_graph=True, collapse_repeats=False)
    assert not nodes_of(expanded, "repeated")
    assert len(nodes_of(expanded, "backward")) == len(nodes_of(full, "backward"))


def test_different_steps_are_not_collapsed() -> None:
    torch.manual_seed(0)
    deep = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(12)])
    out = deep(torch.randn(2, 4)).sum()
    assert not nodes_of(make_dot(out, deep.named_parameters(), large_graph=True), "repeated")


def test_shared_tensors_are_drawn_beside_each_use() -> None:
    # A weight read by many different (not repeated) operations: its long edges make the
    # layout slow, so in large-graph mode each use gets a copy of the node.
    torch.manual_seed(0)
    w = torch.randn(4, requires_grad=True)
    h = torch.randn(4)
    ops = [torch.sin, torch.cos, torch.tanh, torch.sigmoid, torch.exp, torch.relu]
    for i in range(24):
        h = ops[i % len(ops)](h * w) + i
    dot = make_dot(h.sum(), {"w": w}, large_graph=True, collapse_repeats=False)
    assert_well_formed(dot)
    copies = nodes_of(dot, "copy")
    assert len(copies) == 24
    assert all(a["lines"][0] == "w" for a in copies.values())
    _, edges = parse_dot(dot)
    fan_out = {}
    for source, _, _ in edges:
        fan_out[source] = fan_out.get(source, 0) + 1
    assert max(fan_out.values()) <= 4


def test_max_depth_keeps_each_parameter_with_its_accumulate_grad() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    loss = net(torch.randn(3, 4)).pow(2).mean()
    params = dict(net.named_parameters())
    for depth in range(8):
        dot = make_dot(loss, params, max_depth=depth)
        assert_well_formed(dot)
        nodes, edges = parse_dot(dot)
        accumulate = {i for i, a in nodes.items() if a["lines"][0] == "AccumulateGrad"}
        into = {b: a for a, b, _ in edges}
        for identifier in accumulate:
            assert identifier in into and "param" in nodes[into[identifier]]["classes"]
