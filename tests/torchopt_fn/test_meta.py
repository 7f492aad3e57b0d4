"""MetaOptimizer / FuncOptimizer: MAML meta-gradients vs finite differences, training, errors."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.func import functional_call
from torch.nn.functional import mse_loss

import torchopt_fn as torchopt
from tests.torchopt_fn.models import sine_net, sine_task
from torchopt_fn import _graph_tags

META_OPTIMIZERS = {
    "MetaSGD": lambda net: torchopt.MetaSGD(net, lr=0.1, momentum=0.5),
    "MetaAdam": lambda net: torchopt.MetaAdam(net, lr=0.05),
}


def adapted_query_loss(net: torch.nn.Module, make_optimizer, task, inner_steps: int = 2):
    x_support, y_support, x_query, y_query = task
    optimizer = make_optimizer(net)
    for _ in range(inner_steps):
        optimizer.step(mse_loss(net(x_support), y_support))
    return mse_loss(net(x_query), y_query)


def meta_gradient(net, make_optimizer, task):
    initial = list(net.parameters())
    state = torchopt.extract_state_dict(net)
    loss = adapted_query_loss(net, make_optimizer, task)
    grads = torch.autograd.grad(loss, initial)
    torchopt.recover_state_dict(net, state)
    return grads


@pytest.mark.parametrize("name", META_OPTIMIZERS)
def test_maml_meta_gradient_matches_finite_differences(name):
    make_optimizer = META_OPTIMIZERS[name]
    net = sine_net(torch.float64, hidden=8)
    task = sine_task(torch.Generator().manual_seed(0))
    grads = meta_gradient(net, make_optimizer, task)
    generator = torch.Generator().manual_seed(1)
    step = 1e-6
    for _ in range(3):
        direction = [torch.randn(p.shape, generator=generator, dtype=p.dtype)
                     for p in net.parameters()]

        def loss_at(sign: float) -> float:
            moved = copy.deepcopy(net)
            with torch.no_grad():
                for p, d in zip(moved.parameters(), direction, strict=True):
                    p.add_(sign * step * d)
            return adapted_query_loss(moved, make_optimizer, task).item()

        finite_difference = (loss_at(1.0) - loss_at(-1.0)) / (2 * step)
        analytic = float(sum((g * d).sum() for g, d in zip(grads, direction, strict=True)))
        assert analytic == pytest.approx(finite_difference, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("name", META_OPTIMIZERS)
def test_an_inner_loop_under_torch_compile_gives_the_eager_meta_gradient(name):
    """The inner steps compiled (default mode: Dynamo breaks the graph at the inner
    gradient, ``autograd.grad(create_graph=True)``, and captures the update) give eager's
    adapted loss and meta-gradient. The ``eager`` backend: AOTAutograd, under Inductor, does
    not differentiate its compiled backward, which the inner gradient of a compiled forward
    would need (PyTorch raises "does not currently support double backward")."""
    make_optimizer = META_OPTIMIZERS[name]
    task = sine_task(torch.Generator().manual_seed(0))
    net = sine_net(torch.float64, hidden=8)
    eager = meta_gradient(copy.deepcopy(net), make_optimizer, task)

    def compiled_adapted_query_loss(net, make_optimizer, task):
        x_support, y_support, x_query, y_query = task
        optimizer = make_optimizer(net)
        inner_step = torch.compile(
            lambda: optimizer.step(mse_loss(net(x_support), y_support)), backend="eager")
        for _ in range(2):
            inner_step()
        return mse_loss(net(x_query), y_query)

    torch._dynamo.reset()
    initial = list(net.parameters())
    compiled = torch.autograd.grad(compiled_adapted_query_loss(net, make_optimizer, task),
                                   initial)
    torch.testing.assert_close(compiled, eager, rtol=1e-12, atol=1e-14)


def test_meta_step_leaves_module_params_differentiable_and_tagged():
    net = sine_net(torch.float64, hidden=4)
    initial = list(net.parameters())
    optimizer = torchopt.MetaAdam(net, lr=0.05)
    x, y, _, _ = sine_task(torch.Generator().manual_seed(0))
    for step in (1, 2):
        optimizer.step(mse_loss(net(x), y))
        for p in net.parameters():
            assert p.grad_fn is not None
            tag = _graph_tags.optimizer_step_tag(p.grad_fn)
            assert tag is not None and tag.label == f"MetaAdam step {step}"
    assert all(p is not q for p, q in zip(net.parameters(), initial, strict=True))


def test_functional_api_matches_meta_optimizer():
    net = sine_net(torch.float64, hidden=8)
    task = sine_task(torch.Generator().manual_seed(3))
    x_support, y_support, x_query, y_query = task
    expected = meta_gradient(net, lambda n: torchopt.MetaSGD(n, lr=0.1, momentum=0.5), task)

    params = dict(net.named_parameters())
    optimizer = torchopt.FuncOptimizer(torchopt.sgd(lr=0.1, momentum=0.5))
    adapted = params
    for _ in range(2):
        loss = mse_loss(functional_call(net, adapted, (x_support,)), y_support)
        adapted = optimizer.step(loss, adapted)
    query_loss = mse_loss(functional_call(net, adapted, (x_query,)), y_query)
    grads = torch.autograd.grad(query_loss, list(params.values()))
    for g, e in zip(grads, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-14)


def test_functional_alias_matches_meta_adam():
    net = sine_net(torch.float64, hidden=8)
    task = sine_task(torch.Generator().manual_seed(4))
    x_support, y_support, x_query, y_query = task
    expected = meta_gradient(net, lambda n: torchopt.MetaAdam(n, lr=0.05), task)

    params = dict(net.named_parameters())
    tx = torchopt.adam(lr=0.05, moment_requires_grad=True)
    state, adapted = tx.init(params), params
    for _ in range(2):
        loss = mse_loss(functional_call(net, adapted, (x_support,)), y_support)
        grads = dict(zip(adapted, torch.autograd.grad(loss, list(adapted.values()),
                                                      create_graph=True), strict=True))
        updates, state = tx.update(grads, state, params=adapted, inplace=False)
        adapted = torchopt.apply_updates(adapted, updates, inplace=False)
    query_loss = mse_loss(functional_call(net, adapted, (x_query,)), y_query)
    grads = torch.autograd.grad(query_loss, list(params.values()))
    for g, e in zip(grads, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-14)


INNER_LR = 0.05


def post_adaptation_loss(net, tasks) -> float:
    total = 0.0
    for task in tasks:
        state = torchopt.extract_state_dict(net)
        total += adapted_query_loss(net, lambda n: torchopt.MetaSGD(n, lr=INNER_LR), task, 1).item()
        torchopt.recover_state_dict(net, state)
    return total / len(tasks)


@pytest.mark.parametrize("functional", [False, True], ids=["MetaSGD", "functional_call"])
def test_short_maml_training_lowers_post_adaptation_loss(functional):
    net = sine_net(torch.float32, hidden=16)
    generator = torch.Generator().manual_seed(0)
    evaluation = [sine_task(generator, torch.float32) for _ in range(8)]
    before = post_adaptation_loss(net, evaluation)
    outer = torchopt.Adam(net.parameters(), lr=2e-2)
    for _ in range(40):
        outer.zero_grad()
        for _ in range(4):
            task = sine_task(generator, torch.float32)
            if functional:
                x_support, y_support, x_query, y_query = task
                params = dict(net.named_parameters())
                inner = torchopt.FuncOptimizer(torchopt.sgd(lr=INNER_LR))
                loss = mse_loss(functional_call(net, params, (x_support,)), y_support)
                params = inner.step(loss, params)
                mse_loss(functional_call(net, params, (x_query,)), y_query).backward()
            else:
                state = torchopt.extract_state_dict(net)
                make_inner = lambda n: torchopt.MetaSGD(n, lr=INNER_LR)
                adapted_query_loss(net, make_inner, task, 1).backward()
                torchopt.recover_state_dict(net, state)
        outer.step()
    after = post_adaptation_loss(net, evaluation)
    assert after < 0.85 * before  # about 0.75 with these seeds


def test_step_on_loss_not_using_all_parameters_keeps_them_and_their_state():
    net = torch.nn.ModuleDict({"used": torch.nn.Linear(2, 1), "unused": torch.nn.Linear(2, 1)})
    unused_before = [p.detach().clone() for p in net["unused"].parameters()]
    optimizer = torchopt.MetaAdam(net, lr=0.1)
    for _ in range(2):
        optimizer.step(net["used"](torch.ones(3, 2)).sum())
    for param, before in zip(net["unused"].parameters(), unused_before):
        torch.testing.assert_close(param, before, rtol=0, atol=0)
    (adam_state, *_), = optimizer.state_groups
    # Leaves in modules() order: used.weight, used.bias, unused.weight, unused.bias.
    assert [bool(m.abs().sum() > 0) for m in adam_state.mu] == [True, True, False, False]
    assert int(adam_state.count) == 2
    with pytest.raises(RuntimeError, match="does not require grad"):
        optimizer.step(torch.tensor(1.0))


def test_func_optimizer_leaves_unused_leaves_and_their_state():
    params = {"used": torch.tensor([1.0, 2.0], requires_grad=True),
              "unused": torch.tensor([3.0], requires_grad=True)}
    optimizer = torchopt.FuncOptimizer(torchopt.adam(lr=0.1))
    new = optimizer.step((params["used"] ** 2).sum(), params)
    assert new["unused"] is params["unused"]
    assert not torch.equal(new["used"], params["used"])
    adam_state = optimizer.optim_state[0]
    torch.testing.assert_close(adam_state.mu["unused"], torch.zeros(1), rtol=0, atol=0)


def test_inplace_functional_step_of_a_leaf_updates_it_outside_autograd_and_warns_once():
    # TorchOpt adds such updates to p.data; the meta-gradient through the step is lost.
    params = {"w": torch.tensor([1.0, 2.0], requires_grad=True)}
    optimizer = torchopt.FuncOptimizer(torchopt.sgd(lr=0.1, weight_decay=0.5), inplace=True)
    with pytest.warns(UserWarning, match=r"parameter at \['w'\] outside autograd") as record:
        new = optimizer.step((params["w"] ** 2).sum(), params)
        new = optimizer.step((new["w"] ** 2).sum(), new)
    assert len(record) == 1
    assert new["w"] is params["w"] and new["w"].is_leaf
    torch.testing.assert_close(new["w"].detach(), torch.tensor([1.0, 2.0]) * (1 - 0.1 * 2.5) ** 2)


def test_meta_load_state_dict_mismatch_raises_and_keeps_state():
    net = sine_net(torch.float64, hidden=4)
    optimizer = torchopt.MetaAdam(net, lr=0.05)
    x, y, _, _ = sine_task(torch.Generator().manual_seed(0))
    optimizer.step(mse_loss(net(x), y))
    state = optimizer.state_groups[0]
    other_net = sine_net(torch.float64, hidden=4)
    other = torchopt.MetaSGD(other_net, lr=0.1, momentum=0.9)
    other.step(mse_loss(other_net(x), y))
    with pytest.raises(ValueError, match="state"):
        optimizer.load_state_dict(other.state_dict())
    assert optimizer.state_groups[0] is state
    wider = sine_net(torch.float64, hidden=5)
    with pytest.raises(ValueError, match="shape"):
        torchopt.MetaAdam(wider, lr=0.05).load_state_dict(optimizer.state_dict())


@pytest.mark.parametrize("make", [
    lambda: torchopt.sgd(0.1, momentum=0.9), lambda: torchopt.adam(0.1),
    lambda: torchopt.adamw(0.1), lambda: torchopt.rmsprop(0.1), lambda: torchopt.radam(0.1),
    lambda: torchopt.adagrad(0.1), lambda: torchopt.adadelta(1.0), lambda: torchopt.adamax(0.1),
], ids=["sgd", "adam", "adamw", "rmsprop", "radam", "adagrad", "adadelta", "adamax"])
def test_inplace_steps_inside_an_unrolled_graph_are_correct_or_raise(make):
    def meta_gradient_after_three_steps(inplace: bool) -> torch.Tensor:
        meta = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
        optimizer = torchopt.FuncOptimizer(make())
        params = {"w": meta * 1.0}  # not a leaf: the in-place path is allowed to try
        weights = torch.arange(1.0, 4.0, dtype=torch.float64)
        for _ in range(3):
            params = optimizer.step((((params["w"] - 1.0) ** 2) * weights).sum(), params,
                                    inplace=inplace)
        return torch.autograd.grad(params["w"].sum(), meta)[0]

    expected = meta_gradient_after_three_steps(inplace=False)
    try:
        result = meta_gradient_after_three_steps(inplace=True)
    except RuntimeError:
        return  # autograd refused the in-place step: loud, not a silent wrong meta-gradient
    torch.testing.assert_close(result, expected)
