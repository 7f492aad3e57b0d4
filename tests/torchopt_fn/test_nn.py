"""torchopt_fn.nn: MetaGradientModule bookkeeping and stateless reparametrization."""

import pytest
import torch
from torch import nn

import torchopt_fn.nn as tnn
from torchopt_fn.diff.implicit import ImplicitMetaGradientModule
from torchopt_fn.diff.zero_order import ZeroOrderGradientModule
from torchopt_fn.nn import MetaGradientModule, reparameterize, reparametrize, swap_state
from torchopt_fn.nn.stateless import MISSING


def test_public_names():
    assert tnn.ImplicitMetaGradientModule is ImplicitMetaGradientModule
    assert tnn.ZeroOrderGradientModule is ZeroOrderGradientModule
    assert reparameterize is reparametrize
    assert set(tnn.__all__) == {"MetaGradientModule", "ImplicitMetaGradientModule",
                                "ZeroOrderGradientModule", "reparametrize", "reparameterize",
                                "swap_state"}


class Inner(MetaGradientModule):
    def __init__(self, scale, meta_net, frozen_net):
        super().__init__()
        self.scale = scale
        self.meta_net = meta_net
        self.frozen_net = frozen_net
        self.weight = torch.zeros(3, requires_grad=True)
        self.net = nn.Linear(3, 1)
        self.register_buffer("count", torch.zeros(()))


def _inner():
    scale = torch.ones((), requires_grad=True)
    meta_net = nn.Linear(3, 2)
    frozen_net = nn.Linear(2, 2).eval()
    return Inner(scale, meta_net, frozen_net), scale, meta_net, frozen_net


def test_constructor_inputs_become_meta_parameters_and_meta_modules():
    inner, scale, meta_net, _ = _inner()
    assert dict(inner.named_meta_parameters()) == {
        "scale": scale, "meta_net.weight": meta_net.weight, "meta_net.bias": meta_net.bias}
    assert list(inner.meta_parameters()) == [scale, meta_net.weight, meta_net.bias]
    # Only tensors that are not constructor inputs are parameters; eval-mode modules are modules.
    assert set(dict(inner.named_parameters())) == {
        "weight", "frozen_net.weight", "frozen_net.bias", "net.weight", "net.bias"}
    assert list(inner.meta_children()) == [meta_net]
    assert dict(inner.named_meta_children()) == {"meta_net": meta_net}
    assert list(inner.meta_modules()) == [meta_net]
    assert inner.scale is scale and inner.meta_net is meta_net and inner.count.shape == ()
    assert set(inner.state_dict()) == {"weight", "frozen_net.weight", "frozen_net.bias",
                                       "net.weight", "net.bias", "count"}


def test_registration_rules():
    inner, scale, meta_net, _ = _inner()
    with pytest.raises(ValueError, match="meta-parameter"):
        inner.register_parameter("again", scale)
    with pytest.raises(ValueError, match="meta-module"):
        inner.add_module("again", meta_net)
    with pytest.raises(ValueError, match="requires_grad"):
        inner.register_meta_parameter("plain", torch.zeros(1))
    with pytest.raises(KeyError, match="already exists"):
        inner.register_meta_parameter("weight", torch.zeros(1, requires_grad=True))
    with pytest.raises(TypeError):
        inner.scale = 3.0
    inner.register_meta_module("extra", nn.Linear(1, 1))
    assert "extra.weight" in dict(inner.named_meta_parameters())
    del inner.scale
    assert "scale" not in dict(inner.named_meta_parameters())
    with pytest.raises(AttributeError):
        _ = inner.scale
    inner.weight = None
    assert "weight" not in dict(inner.named_parameters())


def test_swap_state_and_reparametrize():
    net = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    original = dict(net.named_parameters())
    replacement = {name: torch.zeros_like(p) for name, p in original.items()}
    with reparametrize(net, replacement) as same:
        assert same is net
        assert all(torch.equal(p, torch.zeros_like(p)) for p in net.state_dict().values())
        assert float(net(torch.ones(1, 2))) == 0.0
    assert dict(net.named_parameters()) == original

    with pytest.raises(RuntimeError, match="boom"), reparametrize(net, replacement.items()):
        raise RuntimeError("boom")
    assert dict(net.named_parameters()) == original

    previous = swap_state(net, {"0.weight": torch.ones(2, 2)})
    assert previous == {"0.weight": original["0.weight"]}
    swap_state(net, previous)
    assert net[0].weight is original["0.weight"]

    with pytest.raises(AttributeError):
        swap_state(net, {"0.extra": torch.ones(1)})
    with reparametrize(net, {"0.extra": torch.ones(1)}, allow_missing=True):
        assert torch.equal(net[0].extra, torch.ones(1))
    assert not hasattr(net[0], "extra")
    assert swap_state(net, {"0.other": torch.ones(1)}, allow_missing=True) == {"0.other": MISSING}


def test_reparametrized_calls_are_differentiable():
    net = nn.Linear(3, 1)
    weight = torch.randn(1, 3, requires_grad=True)
    x = torch.randn(5, 3)
    with reparametrize(net, {"weight": weight}):
        loss = net(x).sum()
    (grad,) = torch.autograd.grad(loss, weight)
    torch.testing.assert_close(grad, x.sum(0, keepdim=True))
