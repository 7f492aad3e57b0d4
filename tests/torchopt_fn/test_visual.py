"""torchopt_fn.visual.make_dot on real models: node semantics, colours, rendering, diagnosis."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, NamedTuple

import graphviz
import pytest
import torch
from torch import nn

from torchopt_fn.visual import (
    NODE_MEANINGS,
    NODE_STYLES,
    GradientGraph,
    GraphvizNotInstalledError,
    make_dot,
    resize_graph,
)

# -- reading the DOT source back ---------------------------------------------------------------

_NODE_RE = re.compile(r"^\s*(n\d+) \[(.*)\]$")
_EDGE_RE = re.compile(r"^\s*(n\d+) -> (n\d+)(?: \[(.*)\])?$")
_ATTR_RE = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s\]]+)')


def _attrs(text: str | None) -> dict[str, str]:
    attrs = {}
    for key, value in _ATTR_RE.findall(text or ""):
        if value.startswith('"'):
            value = value[1:-1].replace("\\n", "\n")
        attrs[key] = value
    return attrs


Nodes = dict[str, dict[str, Any]]
Edges = list[tuple[str, str, dict[str, str]]]


def parse_dot(dot: graphviz.Digraph) -> tuple[Nodes, Edges]:
    """Nodes (id -> attributes, with ``classes`` split) and edges of a make_dot graph."""
    nodes, edges = {}, []
    for line in dot.source.splitlines():
        if match := _EDGE_RE.match(line):
            edges.append((match[1], match[2], _attrs(match[3])))
        elif match := _NODE_RE.match(line):
            attrs = _attrs(match[2])
            attrs["classes"] = set(attrs.get("class", "").split())
            attrs["lines"] = attrs.get("label", "").split("\n")
            nodes[match[1]] = attrs
    return nodes, edges


def assert_well_formed(dot: graphviz.Digraph) -> None:
    """Every edge joins declared nodes and no node is declared twice."""
    nodes, edges = parse_dot(dot)
    declared = [m[1] for line in dot.source.splitlines() if (m := _NODE_RE.match(line))]
    assert len(declared) == len(set(declared))
    assert all(a in nodes and b in nodes for a, b, _ in edges)


def nodes_of(dot: graphviz.Digraph, kind: str) -> dict[str, dict[str, str]]:
    return {i: a for i, a in parse_dot(dot)[0].items() if kind in a["classes"]}


def param_nodes(dot: graphviz.Digraph) -> dict[str, dict[str, str]]:
    """Named leaf parameter tensor nodes, by name."""
    return {a["lines"][0]: a for a in nodes_of(dot, "param").values()
            if "backward" not in a["classes"] and "fused" not in a["classes"]
            and len(a["lines"]) == 2}


def count_autograd_nodes(outputs: list[torch.Tensor]) -> int:
    """Backward functions reachable from ``outputs``, counted independently of the visualizer."""
    seen, stack = set(), [t.grad_fn for t in outputs if t.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(child for child, _ in node.next_functions if child is not None)
    return len(seen)


def reaches(edges: list[tuple[str, str, dict]], source: str, target: str) -> bool:
    """Whether a directed path of data edges (not saved-tensor links) leads source -> target."""
    forward: dict[str, list[str]] = {}
    for a, b, attrs in edges:
        if attrs.get("dir") != "none":
            forward.setdefault(a, []).append(b)
    seen, stack = {source}, [source]
    while stack:
        node = stack.pop()
        if node == target:
            return True
        for nxt in forward.get(node, []):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


# -- models ------------------------------------------------------------------------------------


def mlp_case() -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    loss = net(torch.randn(3, 4)).pow(2).mean()
    return [loss], dict(net.named_parameters())


def lstm_cell_case() -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    cell = nn.LSTMCell(4, 5)
    h, c = torch.zeros(2, 5), torch.zeros(2, 5)
    for x in torch.randn(2, 2, 4):
        h, c = cell(x, (h, c))
    return [h.sum() + c.sum()], dict(cell.named_parameters())


def cnn_case() -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 3, 3), nn.BatchNorm2d(3), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(27, 2))
    logits = net(torch.randn(2, 1, 8, 8))
    return [nn.functional.cross_entropy(logits, torch.tensor([0, 1]))], dict(net.named_parameters())


def double_backward_case() -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    params = dict(net.named_parameters())
    loss = net(torch.randn(3, 4)).pow(2).mean()
    grads = torch.autograd.grad(loss, list(params.values()), create_graph=True)
    penalty = sum(g.pow(2).sum() for g in grads)
    return [loss + 0.1 * penalty], params


CASES: dict[str, Callable[[], tuple[list[torch.Tensor], dict[str, torch.Tensor]]]] = {
    "mlp": mlp_case, "lstm_cell": lstm_cell_case, "cnn": cnn_case,
    "double_backward": double_backward_case,
}


# -- node semantics ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_named_parameters_and_one_node_per_backward_function(case: str) -> None:
    outputs, params = CASES[case]()
    dot = make_dot(outputs[0], params)
    assert_well_formed(dot)
    named = param_nodes(dot)
    assert set(named) == set(params)
    for name, attrs in named.items():
        assert attrs["fillcolor"] == "lightblue"
        assert attrs["lines"][1] == "(" + ", ".join(map(str, params[name].shape)) + ")"
    backward = nodes_of(dot, "backward")
    assert len(backward) == count_autograd_nodes(outputs)
    assert all(a["fillcolor"] == "lightgrey" for a in backward.values())
    (output,) = nodes_of(dot, "output").values()
    assert output["fillcolor"] == "darkolivegreen1"
    assert dot.unreached == []


@pytest.mark.parametrize("case", CASES)
def test_renders_valid_svg_png_and_pdf_with_dot(case: str) -> None:
    outputs, params = CASES[case]()
    dot = make_dot(outputs[0], params, show_attrs=True, show_saved=True)
    svg = dot.pipe(format="svg").decode()
    assert svg.lstrip().startswith("<?xml") and svg.rstrip().endswith("</svg>")
    for name in params:
        assert f">{name}</text>" in svg
    assert dot.pipe(format="png").startswith(b"\x89PNG\r\n\x1a\n")
    assert dot.pipe(format="pdf").startswith(b"%PDF")


def test_render_writes_file(tmp_path: Any) -> None:
    outputs, params = mlp_case()
    path = make_dot(outputs[0], params).render(tmp_path / "graph", format="svg")
    assert path.endswith(".svg") and "<svg" in open(path).read()


def test_jupyter_displays_svg() -> None:
    outputs, params = mlp_case()
    bundle = make_dot(outputs[0], params)._repr_mimebundle_()
    assert "<svg" in bundle["image/svg+xml"]


@pytest.mark.parametrize("case", CASES)
def test_show_attrs_and_show_saved_on_every_node_type(case: str) -> None:
    outputs, params = CASES[case]()
    dot = make_dot(outputs[0], params, show_attrs=True, show_saved=True, max_attr_chars=12)
    assert_well_formed(dot)
    nodes, edges = parse_dot(dot)
    saved = nodes_of(dot, "saved")
    assert saved and all(a["fillcolor"] == "orange" for a in saved.values())
    # every saved tensor hangs off the backward node that saved it, by an undirected edge
    owners = {b: a for a, b, attrs in edges if attrs.get("dir") == "none"}
    assert set(owners) == set(saved)
    assert all("backward" in nodes[owner]["classes"] for owner in owners.values())
    tables = [a["lines"] for a in nodes_of(dot, "backward").values() if len(a["lines"]) > 2]
    assert tables
    for lines in tables:
        assert set(lines[1]) == {"-"}
        assert all(len(line.split(": ", 1)[1]) <= 12 for line in lines[2:])


@pytest.mark.parametrize("case", CASES)
def test_show_saved_after_backward_draws_freed_placeholders(case: str) -> None:
    outputs, params = CASES[case]()
    outputs[0].backward()
    dot = make_dot(outputs[0], params, show_attrs=True, show_saved=True)
    freed = nodes_of(dot, "freed")
    assert freed and all(a["lines"][-1] == "[freed by backward]" for a in freed.values())
    assert not nodes_of(dot, "saved") or case == "double_backward"
    assert any("[freed by backward]" in line
               for a in nodes_of(dot, "backward").values() for line in a["lines"])


def test_show_saved_off_hides_builtin_saved_tensors_but_not_custom_ones() -> None:
    class Cube(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            (x,) = ctx.saved_tensors
            return 3 * x ** 2 * grad

    w = torch.randn(3, requires_grad=True)
    out = Cube.apply(w * 2).exp().sum()
    dot = make_dot(out, {"w": w})
    (saved,) = nodes_of(dot, "saved").values()
    assert saved["lines"] == ["saved_tensors[0]", "(3)"]
    assert any(a["lines"][0] == "CubeBackward" for a in nodes_of(dot, "backward").values())
    out.backward()
    (freed,) = nodes_of(make_dot(out, {"w": w}), "freed").values()
    assert freed["lines"] == ["saved_tensors", "[freed by backward]"]


def test_several_outputs_as_pytree_and_view_base() -> None:
    w = torch.randn(4, 3, requires_grad=True)
    y = w * 2
    row = y[0]  # a view of y
    dot = make_dot({"row": row, "total": (w.sum(),)}, {"w": w})
    _, edges = parse_dot(dot)
    outputs = nodes_of(dot, "output")
    assert sorted(a["lines"] for a in outputs.values()) == [["row", "(3)"], ["total[0]", "()"]]
    (base_id, base), = nodes_of(dot, "view_base").items()
    assert base["fillcolor"] == "darkolivegreen3" and base["lines"] == ["(4, 3)"]
    row_id = next(i for i, a in outputs.items() if a["lines"] == ["row", "(3)"])
    assert (base_id, row_id, {"style": "dotted"}) in edges
    assert len(nodes_of(dot, "backward")) == count_autograd_nodes([row, y, w.sum()])


def test_var_must_be_tensors() -> None:
    with pytest.raises(TypeError, match="pytree of tensors"):
        make_dot({"loss": 1.0})


# -- params forms ------------------------------------------------------------------------------


class ModuleState(NamedTuple):
    """TorchOpt 0.7.3's ModuleState layout (params, buffers, visual_contents, detach_buffers)."""

    params: tuple
    buffers: tuple
    visual_contents: dict | None = None
    detach_buffers: bool = False


def test_every_params_form_names_the_same_nodes() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    out = net(torch.randn(2, 3)).sum()
    expected = {name for name, _ in net.named_parameters()}
    torchopt_state = ModuleState((), (), {p: name for name, p in net.named_parameters()})
    id_state = ModuleState((), (), {id(p): name for name, p in net.named_parameters()})
    pairs_state = ModuleState((), (), dict(enumerate(net.named_parameters())))
    forms = [dict(net.named_parameters()), net.named_parameters(), list(net.named_parameters()),
             torchopt_state, id_state, pairs_state]
    for form in forms:
        assert set(param_nodes(make_dot(out, form))) == expected
    first, second = list(net.named_parameters())[:2], list(net.named_parameters())[2:]
    mixed = [dict(first), iter(second)]
    assert set(param_nodes(make_dot(out, mixed))) == expected


def test_module_state_non_leaf_names_label_their_grad_fn() -> None:
    # TorchOpt stores {grad_fn: (name, tensor)} for parameters produced by an optimizer step.
    w0 = torch.randn(3, requires_grad=True)
    w1 = w0 - 0.1 * w0.exp()
    state = ModuleState((), (), {w1.grad_fn: ("step1.w", w1)})
    dot = make_dot((w1 ** 2).sum(), [{"step0.w": w0}, state])
    (named,) = [a for a in nodes_of(dot, "backward").values() if "param" in a["classes"]]
    assert named["lines"] == ["SubBackward0", "step1.w", "(3)"]
    assert named["fillcolor"] == "lightblue"
    assert set(param_nodes(dot)) == {"step0.w"}


def test_bad_params_are_reported() -> None:
    out = torch.randn(2, requires_grad=True).sum()
    with pytest.raises(TypeError, match="params"):
        make_dot(out, 3)
    with pytest.raises(TypeError, match="not a tensor"):
        make_dot(out, {"w": 1.0})
    with pytest.raises(ValueError, match="enable_visual=True"):
        make_dot(out, ModuleState((), ()))


# -- broken-flow diagnosis ---------------------------------------------------------------------


class TwoTower(nn.Module):
    def __init__(self, detach: bool) -> None:
        super().__init__()
        self.encoder = nn.Linear(3, 4)
        self.head = nn.Linear(4, 1)
        self.detach = detach

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.encoder(x))
        return self.head(hidden.detach() if self.detach else hidden)


def test_detached_layer_is_listed_as_unreached_in_red() -> None:
    torch.manual_seed(0)
    net = TwoTower(detach=True)
    loss = net(torch.randn(2, 3)).pow(2).sum()
    dot = make_dot(loss, net.named_parameters())
    assert dot.unreached == ["encoder.weight", "encoder.bias"]
    red = nodes_of(dot, "unreached")
    assert sorted(a["lines"][0] for a in red.values()) == ["encoder.bias", "encoder.weight"]
    assert all(a["fillcolor"] == "red" for a in red.values())
    assert "subgraph cluster_unreached" in dot.source
    assert set(param_nodes(dot)) == {"head.weight", "head.bias"}
    # the diagnosis is right: backward leaves exactly those .grad as None
    loss.backward()
    assert [n for n, p in net.named_parameters() if p.grad is None] == dot.unreached


def test_copy_keeps_the_diagnosis() -> None:
    net = TwoTower(detach=True)
    dot = make_dot(net(torch.randn(2, 3)).sum(), net.named_parameters())
    duplicate = dot.copy()
    assert isinstance(duplicate, GradientGraph) and duplicate.source == dot.source
    assert duplicate.unreached == dot.unreached == ["encoder.weight", "encoder.bias"]


def test_connected_model_has_nothing_unreached() -> None:
    net = TwoTower(detach=False)
    dot = make_dot(net(torch.randn(2, 3)).sum(), net.named_parameters())
    assert dot.unreached == [] and not nodes_of(dot, "unreached")


def test_frozen_parameter_is_untracked_and_says_why() -> None:
    net = TwoTower(detach=False)
    net.encoder.weight.requires_grad_(False)
    dot = make_dot(net(torch.randn(2, 3)).sum(), net.named_parameters())
    assert dot.unreached == [] and dot.untracked == ["encoder.weight"]
    (frozen,) = nodes_of(dot, "untracked").values()
    assert "requires_grad=False" in frozen["lines"]
    assert "subgraph cluster_untracked" in dot.source


# -- large graphs ------------------------------------------------------------------------------


def test_20000_node_rnn_builds_without_recursion_error() -> None:
    torch.manual_seed(0)
    cell = nn.RNNCell(4, 4)
    h = torch.zeros(1, 4)
    for x in torch.randn(2000, 1, 4):
        h = torch.tanh(cell(x, h) * 0.5 + 0.1) - 0.01
    count = count_autograd_nodes([h])
    assert count >= 20000
    dot = make_dot(h, dict(cell.named_parameters()), large_graph=False)
    assert sum("class=backward" in line for line in dot.body) == count
    named = [line for line in dot.body if "class=param" in line]
    assert sorted(line.split('"')[1].split("\\n")[0] for line in named) == [
        "bias_hh", "bias_ih", "weight_hh", "weight_ih"]


def test_cluster_by_module_groups_layers() -> None:
    torch.manual_seed(0)
    net = nn.Sequential()
    net.add_module("encoder", nn.Sequential(nn.Linear(3, 4), nn.ReLU()))
    net.add_module("head", nn.Linear(4, 2))
    dot = make_dot(net(torch.randn(2, 3)).sum(), net.named_parameters(), cluster_by_module=True)
    clusters = dict(re.findall(r'subgraph "?cluster_([^"\s]+)"? \{\n(.*?)\n\t\}', dot.source,
                               re.S))
    assert set(clusters) == {"encoder.0", "head"}
    for module, body in clusters.items():
        names = {a["label"].split("\n")[0] for line in body.splitlines()
                 if "param" in (a := _attrs(line)).get("class", "")}
        assert names == {f"{module}.weight", f"{module}.bias"}
        assert "AddmmBackward0" in body
    # the activation between the layers belongs to neither
    assert "ReluBackward0" not in "".join(clusters.values())


def test_max_depth_collapses_the_rest() -> None:
    outputs, params = mlp_case()
    full = make_dot(outputs[0], params)
    shallow = make_dot(outputs[0], params, max_depth=2)
    full_nodes, shallow_nodes = parse_dot(full)[0], parse_dot(shallow)[0]
    (collapsed,) = nodes_of(shallow, "collapsed").values()
    hidden = int(collapsed["lines"][0].split()[0])
    assert len(shallow_nodes) - 1 + hidden == len(full_nodes)
    assert len(nodes_of(shallow, "backward")) == 2  # the output's grad_fn and the next one
    with pytest.raises(ValueError, match="max_depth"):
        make_dot(outputs[0], max_depth=-1)


# -- rendering support -------------------------------------------------------------------------


def test_missing_dot_explains_how_to_install(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Any) -> None:
    outputs, params = mlp_case()
    monkeypatch.setenv("PATH", str(tmp_path))
    dot = make_dot(outputs[0], params)  # building needs no Graphviz
    assert isinstance(dot, GradientGraph) and "AddmmBackward0" in dot.source
    for render in (lambda: dot.pipe(format="svg"), lambda: dot.render(tmp_path / "g"),
                   dot._repr_mimebundle_):
        with pytest.raises(GraphvizNotInstalledError, match="apt-get install graphviz") as info:
            render()
        assert "brew install graphviz" in str(info.value) and "conda" in str(info.value)
        assert isinstance(info.value, graphviz.ExecutableNotFound)


def test_resize_graph_grows_with_content() -> None:
    dot = graphviz.Digraph()
    resize_graph(dot)
    assert dot.graph_attr["size"] == "12.0,12.0"
    for i in range(100):
        dot.node(str(i))
    resize_graph(dot, size_per_element=0.5, min_size=12)
    assert dot.graph_attr["size"] == "50.0,50.0"
    outputs, params = mlp_case()
    auto = make_dot(outputs[0], params)
    side = max(12.0, len(auto.body) * 0.5)
    assert auto.graph_attr["size"] == f"{side},{side}"


def test_every_style_has_a_meaning() -> None:
    assert set(NODE_STYLES) == set(NODE_MEANINGS)
    assert NODE_STYLES["backward"]["fillcolor"] == "lightgrey"
    assert NODE_STYLES["param"]["fillcolor"] == "lightblue"
    assert NODE_STYLES["saved"]["fillcolor"] == "orange"
    assert NODE_STYLES["output"]["fillcolor"] == "darkolivegreen1"
    assert NODE_STYLES["view_base"]["fillcolor"] == "darkolivegreen3"
    assert NODE_STYLES["unreached"]["fillcolor"] == "red"
