"""torchopt_fn.base: TorchOpt's transformation types and the adapters to optax_compat's."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import pytest
import torch

import optax_compat
import torchopt_fn
from torchopt_fn import base

ADAPTERS = {"from_optax.<locals>.update_fn", "to_optax.<locals>.update_fn"}


@contextlib.contextmanager
def adapter_calls() -> Iterator[list[str]]:
    """Records every call of a from_optax/to_optax adapter's ``update`` while active."""
    calls: list[str] = []

    def profile(frame, event, arg):
        del arg
        if (event == "call" and frame.f_code.co_filename == base.__file__
                and frame.f_code.co_qualname in ADAPTERS):
            calls.append(frame.f_code.co_qualname)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(previous)


def test_to_optax_gives_back_what_from_optax_adapted():
    tx = optax_compat.adam(1e-2)
    assert base.to_optax(base.from_optax(tx)) is tx
    plain = optax_compat.GradientTransformation(tx.init, tx.update)  # no extra args support
    unwrapped = base.to_optax(base.from_optax(plain))
    assert unwrapped.init is plain.init
    assert isinstance(unwrapped, optax_compat.GradientTransformationExtraArgs)


def test_to_optax_keeps_a_replaced_init():
    adapted = base.from_optax(optax_compat.scale_by_adam())
    frozen = torchopt_fn.transform.utils.with_moment_requires_grad(adapted, True)
    unwrapped = base.to_optax(frozen)
    assert unwrapped.init is frozen.init
    params = {"w": torch.ones(2)}
    assert unwrapped.init(params).mu["w"].requires_grad


def test_to_optax_adapts_other_transformations_once():
    def update(updates, state, *, params=None, inplace=True):
        del params
        return ({k: v * 2 if inplace else v * 3 for k, v in updates.items()}, state)

    doubled = base.GradientTransformation(lambda params: base.EmptyState(), update)
    tx = base.to_optax(doubled)
    grads = {"w": torch.ones(2)}
    # optax_compat's convention: pure unless ``inplace=True`` is passed.
    assert torch.equal(tx.update(grads, tx.init(grads))[0]["w"], torch.full((2,), 3.0))
    assert torch.equal(tx.update(grads, tx.init(grads), inplace=True)[0]["w"],
                       torch.full((2,), 2.0))
    assert base.from_optax(tx).update is not doubled.update
    assert base.to_optax(base.from_optax(tx)) is tx


@pytest.mark.parametrize("inplace", [False, True])
def test_a_chain_is_one_optax_chain_behind_one_adapter(inplace):
    # clip_grad_norm is written in TorchOpt's convention: it is adapted, once.
    chained = torchopt_fn.chain(torchopt_fn.adamw(1e-2, weight_decay=0.1),
                                torchopt_fn.chain(torchopt_fn.transform.scale(0.5),
                                                  torchopt_fn.clip_grad_norm(1.0)),
                                torchopt_fn.adam(1e-2, eps_root=1e-8))
    params = {"w": torch.ones(3), "b": torch.zeros(2)}
    grads = {"w": torch.full((3,), 2.0), "b": torch.ones(2)}
    state = chained.init(params)
    with adapter_calls() as calls:
        chained.update(grads, state, params=params, inplace=inplace)
    assert calls == ["from_optax.<locals>.update_fn", "to_optax.<locals>.update_fn"]


@pytest.mark.parametrize(("make", "adapted"), [
    (lambda params: torchopt_fn.Adam(params, lr=1e-2), 0),
    (lambda params: torchopt_fn.Adam(params, lr=1e-2, eps_root=1e-8), 0),
    (lambda params: torchopt_fn.Adam(params, lr=1e-2, use_accelerated_op=True), 0),
    (lambda params: torchopt_fn.AdamW(params, lr=1e-2), 0),
    (lambda params: torchopt_fn.MetaAdam(torch.nn.Linear(2, 2), lr=1e-2), 0),
    (lambda params: torchopt_fn.SGD(params, lr=1e-2, momentum=0.9), 0),
    (lambda params: torchopt_fn.Optimizer(params, torchopt_fn.chain(
        torchopt_fn.adam(1e-2), torchopt_fn.transform.scale(0.5))), 0),
    # clip_grad_norm is written in TorchOpt's convention: one adapter per step, for it.
    (lambda params: torchopt_fn.Optimizer(params, torchopt_fn.chain(
        torchopt_fn.clip_grad_norm(1.0), torchopt_fn.adam(1e-2))), 1),
], ids=["Adam", "Adam eps_root", "Adam accelerated", "AdamW", "MetaAdam", "SGD",
        "Optimizer of a chain", "Optimizer of a chain with clipping"])
def test_an_optimizer_step_goes_through_no_round_trip(make, adapted):
    params = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.zeros(2, 2))]
    optimizer = make(params)
    if isinstance(optimizer, torchopt_fn.MetaOptimizer):
        module = optimizer.param_containers_groups[0][0]
        loss = sum(p.sum() for p in module.values())
        with adapter_calls() as calls:
            optimizer.step(loss)
        assert calls == ["from_optax.<locals>.update_fn"]  # the alias, called by the optimizer
        return
    for param in params:
        param.grad = torch.ones_like(param)
    optimizer.step()  # the first step's lazy imports run unprofiled
    before = [p.detach().clone() for p in params]
    with adapter_calls() as calls:
        optimizer.step()
    assert calls == ["to_optax.<locals>.update_fn"] * adapted
    assert all(not torch.equal(p, b) for p, b in zip(params, before))
