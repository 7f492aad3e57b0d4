"""make_dot on MAML with torchopt_fn's own MetaSGD/MetaAdam, functional API and snapshots."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torchopt_fn
from tests.torchopt_fn.test_visual import (
    assert_well_formed,
    count_autograd_nodes,
    nodes_of,
    parse_dot,
    reaches,
)
from torchopt_fn.visual import make_dot

NAMES = ["0.weight", "0.bias", "2.weight", "2.bias"]
SHAPES = {"0.weight": "(4, 2)", "0.bias": "(4)", "2.weight": "(1, 4)", "2.bias": "(1)"}


def meta_maml(optimizer: str, steps: int = 2) -> tuple[torch.Tensor, list[Any]]:
    """Inner loop with a MetaOptimizer; ``extract_state_dict`` snapshots before and after."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
    inner = getattr(torchopt_fn, optimizer)(net, lr=0.1)
    x, y = torch.randn(8, 2), torch.randn(8, 1)
    snapshots = [torchopt_fn.extract_state_dict(net, enable_visual=True, visual_prefix="step0.")]
    for step in range(1, steps + 1):
        inner.step(F.mse_loss(net(x), y))
        snapshots.append(torchopt_fn.extract_state_dict(net, enable_visual=True,
                                                        visual_prefix=f"step{step}."))
    return F.mse_loss(net(x), y), snapshots


def functional_maml(steps: int = 2) -> tuple[torch.Tensor, list[dict[str, torch.Tensor]]]:
    """Inner loop with ``adam(...).update(..., inplace=False)`` and ``apply_updates``."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
    params = dict(net.named_parameters())
    optimizer = torchopt_fn.adam(lr=0.1, moment_requires_grad=True)
    state = optimizer.init(params)
    x, y = torch.randn(8, 2), torch.randn(8, 1)
    snapshots = [{f"step0.{k}": v for k, v in params.items()}]

    def loss_of(params: dict[str, torch.Tensor]) -> torch.Tensor:
        return F.mse_loss(torch.func.functional_call(net, params, (x,)), y)

    for step in range(1, steps + 1):
        grads = torch.autograd.grad(loss_of(params), list(params.values()), create_graph=True)
        updates, state = optimizer.update(dict(zip(params, grads)), state, params=params,
                                          inplace=False)
        params = torchopt_fn.apply_updates(params, updates, inplace=False)
        snapshots.append({f"step{step}.{k}": v for k, v in params.items()})
    return loss_of(params), snapshots


def drawn(dot: Any) -> int:
    return len(parse_dot(dot)[0])


@pytest.mark.parametrize("optimizer", ["MetaSGD", "MetaAdam"])
@pytest.mark.parametrize("fuse", [False, True])
def test_snapshots_are_named_and_connected_to_the_output(optimizer: str, fuse: bool) -> None:
    outer, snapshots = meta_maml(optimizer)
    dot = make_dot(outer, snapshots, fuse_optimizer=fuse)
    assert_well_formed(dot)
    nodes, edges = parse_dot(dot)
    named = {line: i for i, a in nodes.items() for line in a["lines"] if line.startswith("step")}
    assert set(named) == {f"step{s}.{n}" for s in range(3) for n in NAMES}
    assert all(nodes[i]["fillcolor"] == "lightblue" for i in named.values())
    (output,) = nodes_of(dot, "output")
    assert all(reaches(edges, i, output) for i in named.values())
    assert dot.unreached == []


@pytest.mark.parametrize("optimizer", ["MetaSGD", "MetaAdam"])
def test_meta_optimizer_steps_fuse_per_parameter(optimizer: str) -> None:
    outer, snapshots = meta_maml(optimizer)
    fused = nodes_of(make_dot(outer, snapshots), "fused")
    assert sorted(a["lines"][:3] for a in fused.values()) == sorted(
        [f"{optimizer} step {s}", f"step{s}.{n}", SHAPES[n]] for s in (1, 2) for n in NAMES)
    unfused = make_dot(outer, snapshots, fuse_optimizer=False)
    assert not nodes_of(unfused, "fused")
    assert len(nodes_of(unfused, "backward")) == count_autograd_nodes([outer])


def test_meta_adam_fusion_halves_the_graph() -> None:
    # MetaAdam.step(loss) computes the gradients itself, so each fused node holds one
    # parameter's Adam arithmetic, its part of the inner backward and its initial moments.
    outer, snapshots = meta_maml("MetaAdam")
    fused = make_dot(outer, snapshots)
    unfused = make_dot(outer, snapshots, fuse_optimizer=False)
    assert 2 * drawn(fused) <= drawn(unfused)
    assert fused.unreached == []


@pytest.mark.parametrize("optimizer", ["MetaSGD", "MetaAdam"])
def test_meta_step_fuses_its_own_gradient_computation(optimizer: str) -> None:
    outer, snapshots = meta_maml(optimizer)
    for attrs in nodes_of(make_dot(outer, snapshots), "fused").values():
        # d loss / d weight is a matrix product, d loss / d bias a sum over the batch.
        own_backward = "MmBackward0" if attrs["lines"][1].endswith("weight") else "SumBackward1"
        assert own_backward in attrs["tooltip"]


def leaf_tensors(dot: Any) -> list[str]:
    """First label line of every drawn leaf tensor (named or not)."""
    return [a["lines"][0] for a in nodes_of(dot, "param").values()
            if "backward" not in a["classes"] and "fused" not in a["classes"]]


@pytest.mark.parametrize("inner_loop", ["MetaAdam", "functional"])
def test_initial_moments_are_drawn_inside_the_first_step(inner_loop: str) -> None:
    # Both inner loops start Adam's moments as leaves that require grad.
    outer, snapshots = functional_maml() if inner_loop == "functional" else meta_maml(inner_loop)
    assert sorted(leaf_tensors(make_dot(outer, snapshots))) == sorted(f"step0.{n}" for n in NAMES)
    unfused = leaf_tensors(make_dot(outer, snapshots, fuse_optimizer=False))
    assert len(unfused) == 3 * len(NAMES)  # the parameters, mu and nu


def test_functional_update_steps_fuse_per_parameter() -> None:
    outer, snapshots = functional_maml()
    dot = make_dot(outer)
    assert_well_formed(dot)
    fused = nodes_of(dot, "fused")
    # unnamed, each step is labelled with the key of its parameter in the params dict
    assert sorted(a["lines"][:3] for a in fused.values()) == sorted(
        [f"adam step {s}", n, SHAPES[n]] for s in (1, 2) for n in NAMES)
    assert all(a["fillcolor"] == "plum" for a in fused.values())
    assert dot.unreached == []
    unfused = make_dot(outer, snapshots, fuse_optimizer=False)
    assert drawn(make_dot(outer, snapshots)) < drawn(unfused)


@pytest.mark.parametrize("fuse", [False, True])
def test_show_attrs_and_saved_on_meta_graphs(fuse: bool) -> None:
    outer, snapshots = meta_maml("MetaAdam")
    dot = make_dot(outer, snapshots, show_attrs=True, show_saved=True, fuse_optimizer=fuse)
    assert nodes_of(dot, "saved")
    outer.backward()
    dot = make_dot(outer, snapshots, show_attrs=True, show_saved=True, fuse_optimizer=fuse)
    assert nodes_of(dot, "freed")
    assert "<svg" in dot.pipe(format="svg").decode()


def test_module_state_names_match_named_parameters() -> None:
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
    out = net(torch.randn(3, 2)).sum()
    state = torchopt_fn.extract_state_dict(net, enable_visual=True, visual_prefix="step0.")
    by_state = {a["lines"][0] for a in nodes_of(make_dot(out, state), "param").values()}
    assert by_state == {f"step0.{n}" for n in NAMES}


def test_detached_snapshot_parameters_are_unreached() -> None:
    # Stopping the gradient between inner and outer loop cuts step0 off the outer loss.
    outer, snapshots = meta_maml("MetaSGD", steps=1)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
    state = torchopt_fn.extract_state_dict(net, enable_visual=True, visual_prefix="fresh.")
    dot = make_dot(outer.detach() + net(torch.randn(1, 2)).sum() * 0, [snapshots[0], state])
    assert dot.unreached == [f"step0.{n}" for n in NAMES]
