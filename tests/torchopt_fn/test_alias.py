"""Functional aliases and transformations: inplace=True/False agree, bad input, building blocks."""

from __future__ import annotations

import math

import pytest
import torch

import torchopt_fn as torchopt
from optax_compat._runtime import tree_math
from optax_compat.testing import assert_trees_all_close
from tests.conftest import TEST_DEVICE
from torchopt_fn import _graph_tags

ALIASES = {
    "sgd": lambda: torchopt.sgd(0.1, momentum=0.9, weight_decay=0.01, nesterov=True),
    "sgd_dampening": lambda: torchopt.sgd(0.1, momentum=0.9, dampening=0.5, maximize=True),
    "adam": lambda: torchopt.adam(1e-2, weight_decay=0.01, maximize=True),
    "adam_accelerated": lambda: torchopt.adam(1e-2, eps_root=1e-8, use_accelerated_op=True),
    "adamw": lambda: torchopt.adamw(1e-2, weight_decay=0.1),
    "adamax": lambda: torchopt.adamax(1e-2, weight_decay=0.01),
    "adadelta": lambda: torchopt.adadelta(1.0, weight_decay=0.01),
    "adagrad": lambda: torchopt.adagrad(0.1, lr_decay=0.1, weight_decay=0.01),
    "radam": lambda: torchopt.radam(1e-2, weight_decay=0.01),
    "rmsprop": lambda: torchopt.rmsprop(1e-2, momentum=0.9, weight_decay=0.01),
    "rmsprop_centered": lambda: torchopt.rmsprop(1e-2, centered=True, maximize=True),
    "clipped_adam": lambda: torchopt.chain(torchopt.clip_grad_norm(0.5), torchopt.adam(1e-2)),
    "scheduled_sgd": lambda: torchopt.sgd(torchopt.schedule.linear_schedule(0.1, 0.01, 5)),
}


def params_and_grads(dtype: torch.dtype, step: int) -> tuple[dict, dict]:
    generator = torch.Generator(TEST_DEVICE).manual_seed(100 + step)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator, dtype=dtype, device=TEST_DEVICE)

    params = {"w": randn(4, 3), "b": randn(3), "none": None}
    grads = tree_math.tree_map(lambda p: randn(*p.shape), params)
    return params, grads


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", ALIASES)
def test_inplace_and_pure_updates_agree(name, dtype):
    tx = ALIASES[name]()
    params, _ = params_and_grads(dtype, 0)
    pure_params = tree_math.tree_map(torch.clone, params)
    inplace_state, pure_state = tx.init(params), tx.init(pure_params)
    for step in range(8):
        _, grads = params_and_grads(dtype, step)
        pure_grads = tree_math.tree_map(torch.clone, grads)
        snapshot = tree_math.tree_map(torch.clone, (pure_grads, pure_state))
        pure_updates, pure_state = tx.update(pure_grads, pure_state, params=pure_params,
                                             inplace=False)
        # the pure path leaves its inputs untouched
        for before, after in zip(tree_math.leaves(snapshot),
                                 tree_math.leaves((pure_grads, snapshot[1])), strict=True):
            assert torch.equal(before, after)
        updates, inplace_state = tx.update(grads, inplace_state, params=params, inplace=True)
        params = torchopt.apply_updates(params, updates, inplace=True)
        pure_params = torchopt.apply_updates(pure_params, pure_updates, inplace=False)
        assert_trees_all_close(params, pure_params,
                               rtol={torch.float32: 1e-6, torch.float64: 1e-14},
                               atol={torch.float32: 1e-7, torch.float64: 1e-15})


def test_rmsprop_keeps_pytorch_epsilon_placement():
    eps, g = 0.1, torch.tensor([0.2])
    tx = torchopt.rmsprop(lr=1.0, alpha=0.5, eps=eps)
    updates, _ = tx.update(g.clone(), tx.init(torch.zeros(1)), inplace=False)
    nu = 0.5 * 0.2 ** 2
    torch.testing.assert_close(updates, -g / (math.sqrt(nu) + eps))  # not g / sqrt(nu + eps)


def test_adam_moment_requires_grad_and_meta_gradient_through_pure_update():
    lr = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    tx = torchopt.adam(lr, moment_requires_grad=True)
    params = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    state = tx.init(params)
    moments = [t for t in tree_math.leaves(state) if t.is_floating_point()]
    assert moments and all(t.requires_grad for t in moments)
    grads = torch.autograd.grad((params ** 2).sum(), params, create_graph=True)[0]
    updates, _ = tx.update(grads, state, params=params, inplace=False)
    new_params = torchopt.apply_updates(params, updates, inplace=False)
    (d_lr,) = torch.autograd.grad(new_params.sum(), lr)
    # the first Adam step is -lr * sign(g) (up to eps): d(sum)/d(lr) = -sum(sign(g))
    torch.testing.assert_close(d_lr, torch.tensor(-2.0, dtype=torch.float64), atol=1e-6, rtol=0)


def test_functional_update_is_tagged_for_the_visualizer():
    tx = torchopt.adam(1e-2)
    params = torch.randn(3, requires_grad=True)
    grads = torch.autograd.grad((params ** 3).sum(), params, create_graph=True)[0]
    state = tx.init(params)
    updates, state = tx.update(grads, state, params=params, inplace=False)
    tag = _graph_tags.optimizer_step_tag(updates.grad_fn)
    assert tag is not None and tag.label == "adam step 1"
    updates, _ = tx.update(grads, state, params=params, inplace=False)
    assert _graph_tags.optimizer_step_tag(updates.grad_fn).label == "adam step 2"


def test_tagging_a_differentiable_step_does_not_read_the_device(monkeypatch):
    tx = torchopt.adam(1e-2)
    params = torch.randn(3, requires_grad=True)
    grads = torch.autograd.grad((params ** 3).sum(), params, create_graph=True)[0]
    state = tx.init(params)

    def no_sync(*args, **kwargs):
        raise AssertionError("host synchronisation during update")

    with monkeypatch.context() as patch:
        for method in ("item", "__int__", "__bool__", "__index__"):
            patch.setattr(torch.Tensor, method, no_sync)
        updates, _ = tx.update(grads, state, params=params, inplace=False)
    assert _graph_tags.optimizer_step_tag(updates.grad_fn).label == "adam step 1"


@pytest.mark.parametrize(("build", "message"), [
    (lambda: torchopt.sgd(-0.1), "Invalid learning rate"),
    (lambda: torchopt.sgd(0.1, momentum=-1.0), "Invalid momentum"),
    (lambda: torchopt.sgd(0.1, nesterov=True), "Nesterov momentum requires"),
    (lambda: torchopt.adam(betas=(1.0, 0.999)), "Invalid beta parameter at index 0"),
    (lambda: torchopt.adam(eps=-1.0), "Invalid epsilon"),
    (lambda: torchopt.adamw(weight_decay=-0.1), "Invalid weight_decay"),
    (lambda: torchopt.rmsprop(alpha=-0.5), "Invalid alpha"),
    (lambda: torchopt.adagrad(lr_decay=-1.0), "Invalid lr_decay"),
])
def test_bad_hyperparameters_fail_at_construction(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_weight_decay_without_params_and_mismatched_state_raise():
    tx = torchopt.sgd(0.1, weight_decay=0.1)
    params = {"a": torch.ones(2), "b": torch.ones(3)}
    with pytest.raises(ValueError, match="Parameters are required for weight decay"):
        tx.update(params, tx.init(params))
    tx = torchopt.rmsprop(0.1)
    with pytest.raises(ValueError, match="'c'"):
        tx.update({"a": torch.ones(2), "c": torch.ones(3)}, tx.init(params), inplace=False)


def test_apply_updates_inplace_through_a_graph_is_correct_or_raises():
    leaf = torch.tensor([1.0, 2.0], requires_grad=True)
    update = (leaf * 3.0).detach().requires_grad_()
    with pytest.raises(RuntimeError, match="inplace=False"):
        torchopt.apply_updates(leaf, update, inplace=True)
    # a parameter produced by an earlier differentiable step is updated within the graph
    meta = torch.tensor([0.5, -1.0], requires_grad=True)
    params = leaf * meta
    new_params = torchopt.apply_updates(params, meta * 2.0, inplace=True)
    assert new_params is params
    (grad,) = torch.autograd.grad(new_params.sum(), meta)
    torch.testing.assert_close(grad, leaf.detach() + 2.0)
    # outside a graph, the leaf is updated in place as an optimizer does
    with torch.no_grad():
        torchopt.apply_updates(leaf, torch.ones(2), inplace=True)
    torch.testing.assert_close(leaf.detach(), torch.tensor([2.0, 3.0]))


def test_apply_updates_rejects_mismatched_trees_and_skips_none_updates():
    with pytest.raises(ValueError, match="'y'"):
        torchopt.apply_updates({"x": torch.ones(1)}, {"y": torch.ones(1)}, inplace=False)
    params = {"a": torch.ones(2), "b": torch.ones(2)}
    for inplace in (False, True):
        new = torchopt.apply_updates(params, {"a": torch.ones(2), "b": None}, inplace=inplace)
        torch.testing.assert_close(new["a"], torch.full((2,), 2.0))
        torch.testing.assert_close(new["b"], torch.ones(2))


def test_clip_grad_norm_matches_torch(device):
    grads = [torch.randn(3, 4, generator=torch.Generator(device).manual_seed(1),
                         device=device) * 10,
             torch.randn(5, generator=torch.Generator(device).manual_seed(2), device=device)]
    reference = [g.clone().requires_grad_() for g in grads]
    for r, g in zip(reference, grads, strict=True):
        r.grad = g.clone()
    torch.nn.utils.clip_grad_norm_(reference, max_norm=1.0, norm_type=3.0)
    tx = torchopt.clip_grad_norm(1.0, norm_type=3.0)
    clipped, _ = tx.update(grads, tx.init(grads), inplace=False)
    for c, r in zip(clipped, reference, strict=True):
        torch.testing.assert_close(c, r.grad)
    with pytest.raises(RuntimeError, match="non-finite"):
        tx = torchopt.clip_grad_norm(1.0, error_if_nonfinite=True)
        tx.update([torch.tensor([math.inf])], tx.init(None))


def test_nan_to_num_and_hooks():
    tx = torchopt.nan_to_num(nan=0.5, posinf=1.0, neginf=-1.0)
    g = torch.tensor([math.nan, math.inf, -math.inf, 2.0])
    out, _ = tx.update(g, tx.init(g), inplace=False)
    torch.testing.assert_close(out, torch.tensor([0.5, 1.0, -1.0, 2.0]))
    assert math.isnan(g[0])  # pure
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    tx = torchopt.chain(torchopt.register_hook(torchopt.hook.zero_nan_hook), torchopt.sgd(1.0))
    updates, _ = tx.update(x * 1.0, tx.init(x), inplace=False)
    (updates * torch.tensor([math.nan, 1.0])).sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([0.0, -1.0]))


def test_chain_flattens_and_keeps_states():
    inner = torchopt.chain(torchopt.transform.scale(2.0), torchopt.transform.trace(0.5))
    tx = torchopt.chain(inner, torchopt.base.identity(), torchopt.transform.scale(-1.0))
    assert len(tx.transformations) == 3
    g = torch.ones(2)
    state = tx.init(g)
    assert len(state) == 3
    out, state = tx.update(g, state, inplace=False)
    out, state = tx.update(g, state, inplace=False)
    torch.testing.assert_close(out, torch.full((2,), -3.0))  # -(2 + 0.5 * 2)
    flat = torchopt.combine.chain_flat(torchopt.transform.scale(3.0))
    out, _ = flat.update({"a": g}, flat.init({"a": g}), inplace=False)
    torch.testing.assert_close(out["a"], 3 * g)


def test_schedules_follow_torchopt_signatures():
    decay = torchopt.schedule.exponential_decay(1.0, 0.5, transition_begin=2, transition_steps=2)
    assert float(decay(2)) == 1.0 and float(decay(6)) == pytest.approx(0.25)
    poly = torchopt.schedule.polynomial_schedule(1.0, 0.0, 2, transition_steps=4)
    assert float(poly(2)) == pytest.approx(0.25) and float(poly(10)) == 0.0
    assert float(torchopt.schedule.linear_schedule(1.0, 0.0, 4)(1)) == pytest.approx(0.75)


def test_accelerated_op_reports_the_fused_path():
    assert torchopt.accelerated_op_available("cpu") is True
    assert torchopt.accelerated_op_available(["cpu", "meta"]) is True
    assert torchopt.accelerated_op.fast_path("cpu") == "fused"
    if torch.cuda.is_available():
        assert torchopt.accelerated_op_available() is True
        assert torchopt.accelerated_op_available(["cpu", 0]) is True
        assert torchopt.accelerated_op.fast_path("cuda") == "fused"
    else:
        assert torchopt.accelerated_op_available() is False
        assert torchopt.accelerated_op_available(["cpu", 0]) is False
        assert torchopt.accelerated_op.fast_path("cuda") == "foreach"


@pytest.mark.parametrize("inplace", [False, True])
def test_adam_op_matches_torchopt_formula(inplace):
    b1, b2, eps, eps_root, count = 0.8, 0.9, 1e-3, 1e-4, 3
    mu, nu, g = torch.tensor([0.1, -0.2]), torch.tensor([0.3, 0.4]), torch.tensor([1.0, -2.0])
    new_mu = mu * b1 + (1 - b1) * g
    new_nu = nu * b2 + (1 - b2) * g * g
    expected = (new_mu / (1 - b1 ** count)) / (
        (new_nu / (1 - b2 ** count) + eps_root).sqrt() + eps)
    op = torchopt.accelerated_op.AdamOp(b1, b2, eps, eps_root=eps_root, inplace=inplace)
    out_mu, out_nu, out = op(mu.clone(), nu.clone(), g.clone(), count)
    torch.testing.assert_close((out_mu, out_nu, out), (new_mu, new_nu, expected))
    assert op(mu, nu, None, count) == (mu, nu, None)
