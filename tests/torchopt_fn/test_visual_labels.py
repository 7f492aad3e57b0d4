"""make_dot's labels and API: output names, fused-step names, the legend, public step tagging,
clear messages for inputs that would draw an empty picture, tied weights, nested modules."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import optax_compat
from tests.torchopt_fn.test_visual import CASES, assert_well_formed, nodes_of, parse_dot
from tests.torchopt_fn.test_visual_meta import NAMES, functional_maml, meta_maml
from torchopt_fn.visual import NODE_MEANINGS, make_dot, tag_optimizer_step

# -- names -------------------------------------------------------------------------------------


def test_outputs_are_named_by_their_keys_and_positions() -> None:
    w = torch.randn(3, requires_grad=True)
    dot = make_dot({"loss": w.sum(), "aux": (w * 2, w.exp())})
    names = sorted(a["lines"][0] for a in nodes_of(dot, "output").values())
    assert names == ["aux[0]", "aux[1]", "loss"]
    dot = make_dot((w.sum(), w.mean()))
    assert sorted(a["lines"][0] for a in nodes_of(dot, "output").values()) == ["[0]", "[1]"]
    (single,) = nodes_of(make_dot(w.sum()), "output").values()
    assert single["lines"] == ["()"]


@pytest.mark.parametrize("optimizer", ["MetaSGD", "MetaAdam"])
def test_unnamed_fused_step_is_named_after_its_parameter(optimizer: str) -> None:
    outer, _ = meta_maml(optimizer)
    fused = nodes_of(make_dot(outer), "fused")
    assert sorted(a["lines"][:2] for a in fused.values()) == sorted(
        [f"{optimizer} step {s}", name] for s in (1, 2) for name in NAMES)
    assert all(a["fillcolor"] == "plum" for a in fused.values())


def test_legend_explains_the_colours_used() -> None:
    outer, snapshots = meta_maml("MetaAdam")
    plain = make_dot(outer, snapshots)
    assert not nodes_of(plain, "legend")
    dot = make_dot(outer, snapshots, legend=True)
    assert_well_formed(dot)
    legend = nodes_of(dot, "legend")
    used = {kind for a in parse_dot(plain)[0].values() for kind in a["classes"]}
    shown = {a["lines"][0] for a in legend.values()}
    assert shown == {NODE_MEANINGS[kind] for kind in used}
    assert "subgraph cluster_legend" in dot.source


# -- fusion of the functional API and of users' own loops ---------------------------------------


def test_functional_apply_updates_is_fused_per_parameter() -> None:
    outer, snapshots = functional_maml()
    dot = make_dot(outer, snapshots)
    assert_well_formed(dot)
    fused = nodes_of(dot, "fused")
    assert sorted(a["lines"][:2] for a in fused.values()) == sorted(
        [f"adam step {s}", f"step{s}.{n}"] for s in (1, 2) for n in NAMES)
    funnels = [a for a in nodes_of(dot, "backward").values()
               if sum(line.startswith("step") for line in a["lines"]) > 1]
    assert not funnels


def optax_compat_loop(tag: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
    params = dict(net.named_parameters())
    tx = optax_compat.adam(0.1)
    state = tx.init(params)
    x, y = torch.randn(8, 2), torch.randn(8, 1)

    def loss_of(params: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.mse_loss(torch.func.functional_call(net, params, (x,)), y)

    for step in (1, 2):
        grads = dict(zip(params, torch.autograd.grad(loss_of(params), list(params.values()),
                                                     create_graph=True)))
        updates, state = tx.update(grads, state, params)
        new_params = optax_compat.apply_updates(params, updates)
        if tag:
            tag_optimizer_step(new_params, (params, grads), "adam step", step=step)
        params = new_params
    return loss_of(params), dict(net.named_parameters())


def test_users_optax_compat_loop_fuses_once_tagged() -> None:
    outer, leaves = optax_compat_loop(tag=True)
    fused = nodes_of(make_dot(outer, leaves), "fused")
    assert sorted(a["lines"][:2] for a in fused.values()) == sorted(
        [f"adam step {s}", n] for s in (1, 2) for n in NAMES)


def test_untagged_optimizer_loop_gets_one_notice() -> None:
    outer, leaves = optax_compat_loop(tag=False)
    with pytest.warns(UserWarning, match="tag_optimizer_step"):
        make_dot(outer, leaves)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for _ in range(3):
            make_dot(outer, leaves)
    assert sum("tag_optimizer_step" in str(w.message) for w in caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_dot(outer, leaves, fuse_optimizer=False)
        for case in CASES.values():  # models, including a gradient penalty: no notice
            outputs, params = case()
            make_dot(outputs[0], params)


# -- clear messages instead of empty pictures ---------------------------------------------------


def test_output_that_does_not_require_grad_is_reported() -> None:
    loss = torch.randn(3, requires_grad=True).sum().detach()
    with pytest.warns(UserWarning, match="does not require grad"):
        make_dot(loss)
    with pytest.warns(UserWarning, match=r"'aux'.*does not require grad"):
        make_dot({"loss": torch.randn(2, requires_grad=True).sum(), "aux": torch.ones(2)})


@pytest.mark.parametrize("var", [None, [], {}])
def test_no_output_is_an_error(var: object) -> None:
    with pytest.raises(ValueError, match="no output tensor"):
        make_dot(var)


def test_consumed_named_parameters_generator_is_reported() -> None:
    net = nn.Linear(2, 1)
    out = net(torch.randn(3, 2)).sum()
    named = net.named_parameters()
    make_dot(out, named)
    with pytest.warns(UserWarning, match="already consumed"):
        make_dot(out, named)


def test_bare_parameters_suggest_named_parameters() -> None:
    net = nn.Linear(2, 1)
    out = net(torch.randn(3, 2)).sum()
    for params in (net.parameters(), list(net.parameters())):
        with pytest.raises(TypeError, match=r"named_parameters\(\)") as info:
            make_dot(out, params)
        assert "tensor(" not in str(info.value)


def test_inverted_dict_is_reported_without_printing_the_tensor() -> None:
    net = nn.Linear(2, 1)
    out = net(torch.randn(3, 2)).sum()
    with pytest.raises(TypeError, match="inverted") as info:
        make_dot(out, {p: n for n, p in net.named_parameters()})
    assert "tensor(" not in str(info.value) and "Parameter" not in str(info.value)


# -- tied weights and nested modules ------------------------------------------------------------


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 3)
        self.head = nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.embed(tokens))).sum()


@pytest.mark.parametrize("form", ["remove_duplicate=False", "state_dict"])
def test_tied_weights_show_every_name(form: str) -> None:
    model = TiedLM()
    out = model(torch.tensor([0, 3]))
    params = (dict(model.named_parameters(remove_duplicate=False)) if form != "state_dict"
              else model.state_dict())
    dot = make_dot(out, params)
    (tied,) = [a for a in nodes_of(dot, "param").values() if "backward" not in a["classes"]]
    assert tied["lines"] == ["embed.weight", "head.weight", "(5, 3)"]
    assert dot.unreached == []


def cluster_tree(source: str) -> dict[str, list[str]]:
    """Cluster name -> names of the clusters directly inside it (``""`` for the top level)."""
    children: dict[str, list[str]] = {"": []}
    stack = [""]
    for line in source.splitlines():
        if match := re.match(r'\s*subgraph "?cluster_([^"\s]+)"? \{', line):
            children[stack[-1]].append(match[1])
            children[match[1]] = []
            stack.append(match[1])
        elif line.strip() == "}" and len(stack) > 1:
            stack.pop()
    return children


def test_module_clusters_nest() -> None:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=4, nhead=2, dim_feedforward=8, dropout=0.0)
    out = layer(torch.randn(3, 1, 4)).sum()
    dot = make_dot(out, layer.named_parameters(), cluster_by_module=True)
    assert_well_formed(dot)
    tree = cluster_tree(dot.source)
    assert "self_attn.out_proj" in tree["self_attn"]
    assert "self_attn" in tree[""] and "self_attn.out_proj" not in tree[""]
    assert {"linear1", "linear2", "norm1", "norm2"} <= set(tree[""])
