"""make_dot's ``unreached`` is exact: it names every named tensor the outputs do not depend on.

Each case is checked against ``torch.autograd.grad(..., allow_unused=True)``, which returns
``None`` exactly for the inputs an output does not reach.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

import torchopt_fn
from tests.torchopt_fn.test_visual import assert_well_formed, nodes_of, param_nodes, parse_dot
from torchopt_fn.visual import make_dot


def unused_by_autograd(output: torch.Tensor, named: dict[str, torch.Tensor]) -> list[str]:
    """The names whose tensor ``output`` does not reach, by asking autograd itself."""
    grads = torch.autograd.grad(output, list(named.values()), retain_graph=True,
                                allow_unused=True)
    return [name for name, grad in zip(named, grads) if grad is None]


def red_names(dot: object) -> list[str]:
    return sorted(line for a in nodes_of(dot, "unreached").values() for line in a["lines"]
                  if line in dot.unreached)


def test_unused_output_of_a_shared_node_is_unreached() -> None:
    w = torch.randn(6, requires_grad=True)
    a, b = w.split(3)
    named = {"a": a, "b": b}
    dot = make_dot(a.sum(), named)
    assert dot.unreached == unused_by_autograd(a.sum(), named) == ["b"]
    assert red_names(dot) == ["b"]
    assert_well_formed(dot)
    # the split node is drawn once and names only the output that is used
    (split,) = [n for n in nodes_of(dot, "backward").values() if n["lines"][0] == "SplitBackward0"]
    assert "a" in split["lines"] and "b" not in split["lines"]


def test_unused_output_of_a_foreach_node_is_unreached() -> None:
    w1, w2 = torch.randn(2, requires_grad=True), torch.randn(3, requires_grad=True)
    new1, new2 = torch._foreach_mul([w1, w2], 2.0)
    named = {"w1": w1, "w2": w2, "new1": new1, "new2": new2}
    out = new2.sum()
    dot = make_dot(out, named)
    assert dot.unreached == unused_by_autograd(out, named) == ["w1", "new1"]


def meta_adam_one_step() -> tuple[nn.Module, list[object]]:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
    inner = torchopt_fn.MetaAdam(net, lr=0.1)
    x, y = torch.randn(8, 2), torch.randn(8, 1)
    snapshots = [torchopt_fn.extract_state_dict(net, enable_visual=True, visual_prefix="step0.")]
    inner.step(F.mse_loss(net(x), y))
    snapshots.append(torchopt_fn.extract_state_dict(net, enable_visual=True,
                                                    visual_prefix="step1."))
    return net, snapshots


def test_meta_adam_parameters_unused_by_the_outer_loss_are_red() -> None:
    net, snapshots = meta_adam_one_step()
    outer = net[2].weight.pow(2).sum()
    named = {}
    for snapshot in snapshots:  # {leaf: name} and {(grad_fn, output_nr): (name, tensor)}
        for key, value in snapshot.visual_contents.items():
            name, tensor = value if isinstance(value, tuple) else (value, key)
            named[name] = tensor
    expected = unused_by_autograd(outer, named)
    assert expected == ["step1.0.weight", "step1.0.bias", "step1.2.bias"]
    for fuse in (False, True):
        dot = make_dot(outer, snapshots, fuse_optimizer=fuse)
        assert dot.unreached == expected
        assert red_names(dot) == sorted(expected)
        assert_well_formed(dot)
    fused = nodes_of(make_dot(outer, snapshots), "fused")
    red_steps = sorted(a["lines"][1] for a in fused.values() if "unreached" in a["classes"])
    assert red_steps == sorted(expected)
    assert all(a["fillcolor"] == "red" for a in fused.values() if "unreached" in a["classes"])


def test_state_dict_aliases_name_the_parameters() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
    out = net(torch.randn(3, 2)).sum()
    dot = make_dot(out, net.state_dict())
    assert dot.unreached == []
    assert set(param_nodes(dot)) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert not nodes_of(dot, "unreached")


class DetachedEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder, self.head = nn.Linear(2, 4), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).detach())


def test_state_dict_copy_of_a_parameter_outside_the_graph_is_untracked() -> None:
    torch.manual_seed(0)
    model = DetachedEncoder()
    out = model(torch.randn(3, 2)).sum()
    dot = make_dot(out, model.state_dict())
    assert set(param_nodes(dot)) == {"head.weight", "head.bias"}
    # a detached copy of a parameter autograd never met: frozen or unreached, make_dot cannot
    # tell, and says how to find out
    assert dot.unreached == []
    assert dot.untracked == ["encoder.weight", "encoder.bias"]
    assert "state_dict(keep_vars=True)" in dot.source
    kept = make_dot(out, model.state_dict(keep_vars=True))
    assert kept.unreached == ["encoder.weight", "encoder.bias"] and kept.untracked == []


def test_frozen_but_used_parameter_is_not_called_unreached() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
    net[2].weight.requires_grad_(False)
    out = net(torch.randn(3, 2)).sum()
    dot = make_dot(out, net.named_parameters())
    assert dot.unreached == []
    assert dot.untracked == ["2.weight"]
    labels = [line for a in parse_dot(dot)[0].values() for line in a["lines"]]
    assert "no path to the output" not in labels
    (frozen,) = nodes_of(dot, "untracked").values()
    assert frozen["lines"][:3] == ["2.weight", "(1, 4)", "requires_grad=False"]

