"""Optimizer checkpoints load with torch.load(weights_only=True) and resume bit-identically."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from torch.nn.functional import mse_loss

import torchopt_fn as torchopt
from tests.torchopt_fn.models import mlp, sine_net, sine_task


def save_and_load(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def train_step(model, optimizer, step):
    generator = torch.Generator().manual_seed(step)
    x, y = torch.randn(8, 3, generator=generator), torch.randn(8, 2, generator=generator)
    optimizer.zero_grad()
    mse_loss(model(x), y).backward()
    optimizer.step()


@pytest.mark.parametrize("make", [
    lambda p: torchopt.Adam(p, lr=1e-2),
    lambda p: torchopt.SGD(p, lr=0.1, momentum=0.9, dampening=0.1),
    lambda p: torchopt.RAdam(p, lr=1e-2),
    lambda p: torchopt.RMSprop(p, lr=1e-2, centered=True, momentum=0.9),
    lambda p: torchopt.Adagrad(p, lr=0.1, lr_decay=0.01),
], ids=["Adam", "SGD", "RAdam", "RMSprop", "Adagrad"])
def test_optimizer_checkpoint_resumes_bit_identically(make):
    model = mlp()
    optimizer = make(model.parameters())
    for step in range(3):
        train_step(model, optimizer, step)
    checkpoint = save_and_load({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    resumed_model = mlp(seed=5)
    resumed_model.load_state_dict(checkpoint["model"])
    resumed = make(resumed_model.parameters())
    resumed.load_state_dict(checkpoint["optimizer"])
    for step in range(3, 7):
        train_step(model, optimizer, step)
        train_step(resumed_model, resumed, step)
    for p, q in zip(model.parameters(), resumed_model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_unstepped_optimizer_checkpoint_round_trips():
    model = mlp()
    checkpoint = save_and_load(torchopt.Adam(model.parameters()).state_dict())
    resumed = torchopt.Adam(model.parameters())
    resumed.load_state_dict(checkpoint)
    train_step(model, resumed, 0)


def test_meta_optimizer_checkpoint_resumes_bit_identically():
    net = sine_net(torch.float64, hidden=8)
    optimizer = torchopt.MetaAdam(net, lr=0.05)
    x, y, _, _ = sine_task(torch.Generator().manual_seed(0))
    optimizer.step(mse_loss(net(x), y))
    torchopt.stop_gradient(net)
    torchopt.stop_gradient(optimizer)
    checkpoint = save_and_load({"net": net.state_dict(), "optimizer": optimizer.state_dict()})
    resumed_net = copy.deepcopy(sine_net(torch.float64, hidden=8))
    resumed_net.load_state_dict(checkpoint["net"])
    resumed = torchopt.MetaAdam(resumed_net, lr=0.05)
    resumed.load_state_dict(checkpoint["optimizer"])
    for _ in range(2):
        optimizer.step(mse_loss(net(x), y))
        resumed.step(mse_loss(resumed_net(x), y))
    for p, q in zip(net.parameters(), resumed_net.parameters(), strict=True):
        assert torch.equal(p, q)
