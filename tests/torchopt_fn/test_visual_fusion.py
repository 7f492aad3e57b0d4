"""Optimizer-aware fusion in make_dot, with hand-written differentiable steps that tag themselves.

The steps below do what torchopt_fn's functional update does: ``torch._foreach_*`` arithmetic
over all parameters at once (one autograd node per operation, shared by every parameter), or
TorchOpt's leaf-by-leaf arithmetic (one node per operation and parameter).
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch
from torch import nn

from tests.torchopt_fn.test_visual import (
    assert_well_formed,
    count_autograd_nodes,
    nodes_of,
    parse_dot,
    reaches,
)
from torchopt_fn._graph_tags import optimizer_step_tag, tag_optimizer_step
from torchopt_fn.visual import make_dot

Params = list[torch.Tensor]


def adam_step(params: Params, state: tuple, loss: torch.Tensor, step: int, foreach: bool,
              lr: Any = 0.1, b1: float = 0.9, b2: float = 0.999,
              eps: float = 1e-8) -> tuple[Params, tuple]:
    grads = list(torch.autograd.grad(loss, params, create_graph=True))
    mu, nu = state
    if foreach:
        mu2 = torch._foreach_add(torch._foreach_mul(grads, 1 - b1), torch._foreach_mul(mu, b1))
        nu2 = torch._foreach_add(torch._foreach_mul(torch._foreach_mul(grads, grads), 1 - b2),
                                 torch._foreach_mul(nu, b2))
        mu_hat = torch._foreach_div(mu2, 1 - b1 ** step)
        nu_hat = torch._foreach_div(nu2, 1 - b2 ** step)
        updates = torch._foreach_div(mu_hat, torch._foreach_add(torch._foreach_sqrt(nu_hat), eps))
        new = list(torch._foreach_sub(params, torch._foreach_mul(updates, [lr] * len(params))
                                      if isinstance(lr, torch.Tensor) else
                                      torch._foreach_mul(updates, lr)))
    else:
        mu2 = [(1 - b1) * g + b1 * m for g, m in zip(grads, mu)]
        nu2 = [(1 - b2) * g * g + b2 * v for g, v in zip(grads, nu)]
        new = [p - lr * (m / (1 - b1 ** step)) / ((v / (1 - b2 ** step)).sqrt() + eps)
               for p, m, v in zip(params, mu2, nu2)]
    tag_optimizer_step(new, (params, grads), f"MetaAdam step {step}", state=state)
    return new, (list(mu2), list(nu2))


def sgd_step(params: Params, loss: torch.Tensor, step: int, lr: float = 0.1) -> Params:
    grads = torch.autograd.grad(loss, params, create_graph=True)
    new = [p - lr * g for p, g in zip(params, grads)]
    tag_optimizer_step(new, (params, grads), f"MetaSGD step {step}")
    return new


def maml(optimizer: str, foreach: bool = True, steps: int = 2,
         lr: Any = 0.1) -> tuple[torch.Tensor, list[dict[str, torch.Tensor]], list[str]]:
    """An inner loop of ``steps`` steps on a small MLP, the outer loss, and per-step snapshots."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    names = [name for name, _ in net.named_parameters()]
    params = list(net.parameters())
    x, y = torch.randn(6, 4), torch.randn(6, 1)
    state = ([torch.zeros_like(p) for p in params], [torch.zeros_like(p) for p in params])
    snapshots = [{f"step0.{n}": p for n, p in zip(names, params)}]

    def loss_of(params: Params) -> torch.Tensor:
        return (torch.func.functional_call(net, dict(zip(names, params)), (x,)) - y).pow(2).mean()

    for step in range(1, steps + 1):
        if optimizer == "adam":
            params, state = adam_step(params, state, loss_of(params), step, foreach, lr=lr)
        else:
            params = sgd_step(params, loss_of(params), step)
        snapshots.append({f"step{step}.{n}": p for n, p in zip(names, params)})
    return loss_of(params), snapshots, names


def named_nodes(dot: Any) -> dict[str, str]:
    """Node id of every named tensor (leaf or produced by a step), by name."""
    found = {}
    for identifier, attrs in parse_dot(dot)[0].items():
        for line in attrs["lines"]:
            if line.startswith("step"):
                found[line] = identifier
    return found


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("fuse", [False, True])
def test_maml_snapshots_are_named_and_connected(optimizer: str, fuse: bool) -> None:
    outer, snapshots, names = maml(optimizer)
    dot = make_dot(outer, snapshots, fuse_optimizer=fuse)
    assert_well_formed(dot)
    found = named_nodes(dot)
    assert set(found) == {f"step{s}.{n}" for s in range(3) for n in names}
    nodes, edges = parse_dot(dot)
    (output,) = nodes_of(dot, "output")
    assert all(reaches(edges, identifier, output) for identifier in found.values())
    assert dot.unreached == []
    for name, identifier in found.items():
        assert nodes[identifier]["fillcolor"] == "lightblue", name


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("foreach", [False, True])
def test_fusion_draws_one_node_per_parameter_and_step(optimizer: str, foreach: bool) -> None:
    outer, snapshots, names = maml(optimizer, foreach)
    label = "MetaAdam" if optimizer == "adam" else "MetaSGD"
    fused = nodes_of(make_dot(outer, snapshots), "fused")
    assert sorted(a["lines"][:2] for a in fused.values()) == sorted(
        [f"{label} step {s}", f"step{s}.{n}"] for s in (1, 2) for n in names)
    assert all(a["fillcolor"] == "lightblue" and a["shape"] == "box3d" for a in fused.values())
    unfused = make_dot(outer, snapshots, fuse_optimizer=False)
    assert not nodes_of(unfused, "fused")
    assert len(nodes_of(unfused, "backward")) == count_autograd_nodes([outer])


@pytest.mark.parametrize("fuse", [False, True])
@pytest.mark.parametrize("after_backward", [False, True])
def test_show_attrs_and_saved_on_maml_graph(fuse: bool, after_backward: bool) -> None:
    outer, snapshots, _ = maml("adam")
    if after_backward:
        outer.backward()
    dot = make_dot(outer, snapshots, show_attrs=True, show_saved=True, fuse_optimizer=fuse)
    kind = "freed" if after_backward else "saved"
    assert nodes_of(dot, kind)
    assert dot.unreached == []
    assert "<svg" in dot.pipe(format="svg").decode()


def test_fusion_halves_leafwise_adam_graph() -> None:
    # TorchOpt's leaf-by-leaf Adam: ~13 autograd nodes per parameter and step.
    outer, snapshots, _ = maml("adam", foreach=False)
    fused = len(parse_dot(make_dot(outer, snapshots))[0])
    unfused = len(parse_dot(make_dot(outer, snapshots, fuse_optimizer=False))[0])
    assert 2 * fused <= unfused


def test_fusion_shrinks_foreach_adam_graph() -> None:
    # Foreach Adam shares each of its ~13 nodes among all parameters; fusing splits them per
    # parameter, so the saving is smaller than the leaf-by-leaf one but the picture is the same.
    outer, snapshots, _ = maml("adam", foreach=True)
    fused = len(parse_dot(make_dot(outer, snapshots))[0])
    unfused = len(parse_dot(make_dot(outer, snapshots, fuse_optimizer=False))[0])
    assert fused < unfused


def test_fusion_without_names_uses_plum_nodes() -> None:
    outer, _, names = maml("adam")
    fused = nodes_of(make_dot(outer), "fused")
    assert len(fused) == 2 * len(names)
    assert all(a["fillcolor"] == "plum" and "param" not in a["classes"] for a in fused.values())
    assert all(a["lines"][-1].endswith("autograd nodes]") for a in fused.values())
    # unnamed, each step is labelled with the new parameter's position in the tagged list
    assert sorted(a["lines"][1:3] for a in fused.values()) == sorted(
        [["[0]", "(8, 4)"], ["[1]", "(8)"], ["[2]", "(1, 8)"], ["[3]", "(1)"]] * 2)


def test_node_shared_by_all_parameters_stays_visible() -> None:
    # A learned learning rate feeds every parameter's update: it belongs to no single fused node.
    raw_lr = torch.tensor(-2.0, requires_grad=True)
    lr = nn.functional.softplus(raw_lr)
    outer, snapshots, names = maml("adam", lr=lr)
    dot = make_dot(outer, [*snapshots, {"raw_lr": raw_lr}])
    nodes, edges = parse_dot(dot)
    (softplus,) = [i for i, a in nodes.items() if a["lines"][0] == "SoftplusBackward0"]
    fused = nodes_of(dot, "fused")
    assert len(fused) == 2 * len(names)
    assert all(reaches(edges, softplus, step) for step in fused)
    assert dot.unreached == []


def test_step_tagged_inside_another_step_is_part_of_it() -> None:
    # A meta-optimizer tags its new parameters; the optimizer inside tags its updates, from the
    # same inputs. The inner tag must not split the outer step.
    w = torch.randn(3, requires_grad=True)
    old = w * 1.0
    grad = old.exp()
    updates = [grad.sqrt() * -0.1]
    tag_optimizer_step(updates, ([old], [grad]), "adam step 1")
    new = [old + updates[0]]
    tag_optimizer_step(new, ([old], [grad]), "MetaAdam step 1")
    dot = make_dot(new[0].sum())
    (fused,) = nodes_of(dot, "fused").values()
    assert fused["lines"] == ["MetaAdam step 1", "[0]", "(3)", "[3 autograd nodes]"]
    assert fused["tooltip"] == "1 x AddBackward0, 1 x MulBackward0, 1 x SqrtBackward0"
    assert 'title="1 x AddBackward0' in dot.pipe(format="svg").decode()
    assert_well_formed(dot)


def test_step_without_a_node_of_its_own_is_drawn_unfused() -> None:
    # Two parameters produced by one non-foreach node (unbind) cannot each get that node.
    w = torch.randn(2, 3, requires_grad=True)
    grad = w.exp()
    rows = (w - 0.1 * grad).unbind(0)
    tag_optimizer_step(list(rows), ([w], [grad]), "MetaSGD step 1")
    out = rows[0].sum() + rows[1].sum()
    dot = make_dot(out, {"w": w})
    assert_well_formed(dot)
    assert not nodes_of(dot, "fused")
    assert len(nodes_of(dot, "backward")) == count_autograd_nodes([out])


# -- the tag itself ----------------------------------------------------------------------------


def test_tag_records_label_outputs_and_boundary() -> None:
    w = torch.randn(3, requires_grad=True)
    g = w * 2
    new = torch._foreach_sub([w, w * 1], [g, g])
    tag_optimizer_step({"a": new[0], "b": new[1]}, ([w], [g], None), "MetaSGD step 1")
    tag = optimizer_step_tag(new[0].grad_fn)
    assert tag.label == "MetaSGD step 1"
    assert tag.output_nrs == {0, 1}
    assert tag.boundary == frozenset({g.grad_fn})


def test_tag_is_a_no_op_without_grad() -> None:
    w = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        new = w - 1
    tag_optimizer_step([new, torch.ones(2)], [w], "MetaSGD step 1")
    y = w * 2
    with torch.no_grad():
        tag_optimizer_step([y], [w], "MetaSGD step 1")
    assert optimizer_step_tag(y.grad_fn) is None


def test_tag_keeps_no_tensor_alive() -> None:
    w = torch.randn(3, requires_grad=True)
    grad = w.exp()
    new = w - grad
    refs = [weakref.ref(grad), weakref.ref(new)]
    tag_optimizer_step([new], ([w], [grad]), "MetaSGD step 1")
    node = new.grad_fn
    del grad, new
    gc.collect()
    assert all(ref() is None for ref in refs)
    assert optimizer_step_tag(node).label == "MetaSGD step 1"


@pytest.mark.parametrize("name_the_state", [False, True])
def test_state_leaves_are_fused_unless_named(name_the_state: bool) -> None:
    # An initial state that requires grad belongs to the step, unless the caller named it.
    param = torch.randn(3, requires_grad=True)
    momentum = torch.zeros(3, requires_grad=True)
    (grad,) = torch.autograd.grad(param.pow(2).sum(), [param], create_graph=True)
    new_param = param - 0.1 * (0.9 * momentum + grad)
    tag_optimizer_step([new_param], ([param], [grad]), "momentum step 1", state=[momentum])
    names = {"param": param, "momentum": momentum} if name_the_state else {"param": param}
    dot = make_dot(new_param.sum(), names)
    leaves = [a["lines"][0] for a in nodes_of(dot, "param").values()
              if "backward" not in a["classes"] and "fused" not in a["classes"]]
    assert sorted(leaves) == sorted(names)
    assert dot.unreached == []
