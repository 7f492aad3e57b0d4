"""extract_state_dict / recover_state_dict / stop_gradient / module_clone / module_detach_."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.functional import mse_loss

import torchopt_fn as torchopt
from tests.torchopt_fn.models import sine_net, sine_task


def net_with_buffers() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1)).double()


def test_reference_extraction_restores_params_buffers_and_optimizer_state_exactly():
    net = net_with_buffers()
    original_params = list(net.parameters())
    original_buffers = [b.clone() for b in net.buffers()]
    optimizer = torchopt.MetaAdam(net, lr=0.1)
    x = torch.randn(8, 3, dtype=torch.float64)
    optimizer.step(net(x).pow(2).mean())
    net_state = torchopt.extract_state_dict(net, by="reference")
    optimizer_state = torchopt.extract_state_dict(optimizer, by="deepcopy")
    kept = [p for p in net.parameters()]
    optimizer.step(net(x).pow(2).mean())
    optimizer.step(net(x).pow(2).mean())
    torchopt.recover_state_dict(net, net_state)
    torchopt.recover_state_dict(optimizer, optimizer_state)
    assert all(p is q for p, q in zip(net.parameters(), kept, strict=True))
    assert all(p is not q for p, q in zip(net.parameters(), original_params, strict=True))
    # the batch-norm running statistics moved in the forward passes and are references too
    assert not all(torch.equal(b, c) for b, c in zip(net.buffers(), original_buffers,
                                                     strict=True))
    from optax_compat._runtime import tree_math
    restored = tuple(optimizer.state_groups)
    assert tree_math.treespec(restored) == tree_math.treespec(optimizer_state)
    for a, b in zip(tree_math.leaves(restored), tree_math.leaves(optimizer_state), strict=True):
        assert a is b


def test_copy_modes():
    net = net_with_buffers()
    weight = net[0].weight
    copied = torchopt.extract_state_dict(net, by="copy")
    assert copied.params[0]["weight"] is not weight
    assert copied.params[0]["weight"].grad_fn is not None  # CloneBackward, still connected
    deep = torchopt.extract_state_dict(net, by="deepcopy")
    assert deep.params[0]["weight"].grad_fn is None
    assert isinstance(deep.params[0]["weight"], nn.Parameter)
    assert torch.equal(deep.params[0]["weight"], weight)
    buffers = torchopt.extract_state_dict(net, detach_buffers=True).buffers
    assert buffers[0]["running_mean"] is not net[1].running_mean
    no_buffers = torchopt.extract_state_dict(net, with_buffers=False)
    assert no_buffers.buffers == ()
    with pytest.raises(ValueError, match="copy mode"):
        torchopt.extract_state_dict(net, by="shallow")


def test_visual_contents_name_parameters():
    net = sine_net(hidden=4)
    leaves = torchopt.extract_state_dict(net, enable_visual=True, visual_prefix="net.")
    assert set(leaves.visual_contents.values()) == {f"net.{n}" for n, _ in net.named_parameters()}
    x, y, _, _ = sine_task(torch.Generator().manual_seed(0))
    torchopt.MetaSGD(net, lr=0.1).step(mse_loss(net(x), y))
    stepped = torchopt.extract_state_dict(net, enable_visual=True, visual_prefix="step1.")
    for (node, output_nr), (name, tensor) in stepped.visual_contents.items():
        assert tensor.grad_fn is node and tensor.output_nr == output_nr
        assert name.startswith("step1.")
    assert len(stepped.visual_contents) == len(list(net.parameters()))


def test_stop_gradient_cuts_the_graph():
    net = sine_net(hidden=4)
    initial = list(net.parameters())
    optimizer = torchopt.MetaSGD(net, lr=0.1, momentum=0.9)
    x, y, _, _ = sine_task(torch.Generator().manual_seed(0))
    optimizer.step(mse_loss(net(x), y))
    torchopt.stop_gradient(net)
    torchopt.stop_gradient(optimizer)
    assert all(p.grad_fn is None and p.requires_grad for p in net.parameters())
    optimizer.step(mse_loss(net(x), y))
    loss = mse_loss(net(x), y)
    grads = torch.autograd.grad(loss, initial, allow_unused=True)
    assert all(g is None for g in grads)  # the outer gradient to the detached part is None
    detached = list(net.parameters())
    assert torchopt.module_detach_(net) is net
    assert all(p.grad_fn is None for p in net.parameters())
    assert all(p is q for p, q in zip(net.parameters(), detached, strict=True))


def test_stop_gradient_on_trees_and_module_states():
    leaf = torch.ones(2, requires_grad=True)
    tree = {"a": leaf * 2, "b": [leaf * 3]}
    torchopt.stop_gradient(tree)
    assert tree["a"].grad_fn is None and tree["b"][0].grad_fn is None
    net = sine_net(hidden=4)
    torchopt.MetaSGD(net, lr=0.1).step(mse_loss(*(lambda t: (net(t[0]), t[1]))(
        sine_task(torch.Generator().manual_seed(0)))))
    state = torchopt.extract_state_dict(net)
    torchopt.stop_gradient(state)
    assert all(t.grad_fn is None for c in state.params for t in c.values())


def test_module_clone():
    net = net_with_buffers()
    clone = torchopt.module_clone(net, by="deepcopy")
    assert clone is not net
    for p, q in zip(net.parameters(), clone.parameters(), strict=True):
        assert p is not q and torch.equal(p, q)
    referenced = torchopt.module_clone(net, by="reference")
    assert all(p is q for p, q in zip(net.parameters(), referenced.parameters(), strict=True))
    tree = {"x": torch.ones(2, requires_grad=True)}
    copied = torchopt.module_clone(tree, by="copy")
    assert copied["x"].grad_fn is not None and torch.equal(copied["x"], tree["x"])
    optimizer = torchopt.MetaAdam(sine_net(hidden=4), lr=0.1)
    assert isinstance(torchopt.module_clone(optimizer, by="deepcopy"), torchopt.MetaAdam)
