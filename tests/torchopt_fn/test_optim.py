"""torchopt_fn.Optimizer classes against torch.optim, step for step, and their state dicts."""

from __future__ import annotations

import copy

import pytest
import torch

import torchopt_fn as torchopt
from optax_compat.testing import tolerance
from tests.conftest import TEST_DEVICE
from tests.torchopt_fn.models import mlp

# (ours, torch's, keyword arguments common to both)
CASES = [
    (torchopt.SGD, torch.optim.SGD, dict(lr=0.1)),
    (torchopt.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.1)),
    (torchopt.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True)),
    (torchopt.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.3, maximize=True)),
    (torchopt.Adam, torch.optim.Adam, dict(lr=1e-2)),
    (torchopt.Adam, torch.optim.Adam, dict(lr=1e-2, betas=(0.8, 0.99), weight_decay=0.1,
                                           maximize=True)),
    (torchopt.AdamW, torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    (torchopt.Adam, torch.optim.Adam, dict(lr=1e-2, use_accelerated_op=True)),
    (torchopt.AdamW, torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, use_accelerated_op=True)),
    (torchopt.AdamW, torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1, maximize=True)),
    (torchopt.Adamax, torch.optim.Adamax, dict(lr=2e-2, weight_decay=0.1)),
    (torchopt.Adadelta, torch.optim.Adadelta, dict(lr=1.0, rho=0.8, weight_decay=0.1)),
    (torchopt.Adagrad, torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.05, weight_decay=0.1,
                                                 initial_accumulator_value=0.1)),
    (torchopt.Adagrad, torch.optim.Adagrad, dict(lr=0.1, maximize=True)),
    (torchopt.RAdam, torch.optim.RAdam, dict(lr=1e-2, weight_decay=0.1)),
    (torchopt.RMSprop, torch.optim.RMSprop, dict(lr=1e-2)),
    (torchopt.RMSprop, torch.optim.RMSprop, dict(lr=1e-2, centered=True, momentum=0.9,
                                                 weight_decay=0.1)),
    (torchopt.RMSprop, torch.optim.RMSprop, dict(lr=1e-2, momentum=0.5, maximize=True)),
]
IDS = [f"{ours.__name__}-{'-'.join(map(str, kwargs))}" for ours, _, kwargs in CASES]


def batch(step: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator(TEST_DEVICE).manual_seed(step)
    return (torch.randn(16, 3, generator=generator, dtype=dtype, device=TEST_DEVICE),
            torch.randn(16, 2, generator=generator, dtype=dtype, device=TEST_DEVICE))


def train_step(model: torch.nn.Module, optimizer, step: int, dtype: torch.dtype) -> None:
    x, y = batch(step, dtype)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("ours", "theirs", "kwargs"), CASES, ids=IDS)
def test_matches_torch_optim(ours, theirs, kwargs, dtype):
    model = mlp(dtype)
    reference = copy.deepcopy(model)
    optimizer = ours(model.parameters(), **kwargs)
    reference_kwargs = dict(kwargs)
    if reference_kwargs.pop("use_accelerated_op", False):
        assert optimizer._step_functions(optimizer.param_groups[0])[1] is not None
        reference_kwargs["fused"] = True
    reference_optimizer = theirs(reference.parameters(), **reference_kwargs)
    for step in range(10):  # RAdam rectifies from step 6 on
        train_step(model, optimizer, step, dtype)
        train_step(reference, reference_optimizer, step, dtype)
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p, q, **tolerance(p, q)._asdict())


@pytest.mark.parametrize(("ours", "theirs", "kwargs"), CASES, ids=IDS)
def test_state_dict_round_trip_continues_bit_identically(ours, theirs, kwargs):
    del theirs
    model = mlp(torch.float32)
    optimizer = ours(model.parameters(), **kwargs)
    for step in range(3):
        train_step(model, optimizer, step, torch.float32)
    resumed_model = copy.deepcopy(model)
    resumed = ours(resumed_model.parameters(), **kwargs)
    resumed.load_state_dict(optimizer.state_dict())
    for step in range(3, 6):
        train_step(model, optimizer, step, torch.float32)
        train_step(resumed_model, resumed, step, torch.float32)
    for p, q in zip(model.parameters(), resumed_model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_fused_and_foreach_adam_share_their_state():
    model = mlp(torch.float64)
    fused = torchopt.Adam(model.parameters(), lr=1e-2, use_accelerated_op=True)
    for step in range(2):
        train_step(model, fused, step, torch.float64)
    reference = copy.deepcopy(model)
    foreach = torchopt.Adam(reference.parameters(), lr=1e-2)
    foreach.load_state_dict(fused.state_dict())
    for step in range(2, 5):
        train_step(model, fused, step, torch.float64)
        train_step(reference, foreach, step, torch.float64)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, **tolerance(p, q)._asdict())


def test_param_groups_match_torch_optim():
    model = mlp(torch.float64)
    reference = copy.deepcopy(model)
    first, second = model[0], model[2]
    optimizer = torchopt.Adam(first.parameters(), lr=1e-2)
    optimizer.add_param_group(tuple(second.parameters()))
    reference_optimizer = torch.optim.Adam(reference[0].parameters(), lr=1e-2)
    reference_optimizer.add_param_group({"params": reference[2].parameters()})
    for step in range(4):
        train_step(model, optimizer, step, torch.float64)
        train_step(reference, reference_optimizer, step, torch.float64)
    assert len(optimizer.state_dict()["param_groups"]) == 2
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, **tolerance(p, q)._asdict())


def test_step_with_closure_returns_loss_and_zero_grad_set_to_none():
    model = mlp()
    optimizer = torchopt.SGD(model.parameters(), lr=0.1)
    x, y = batch(0, torch.float32)

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    first = optimizer.step(closure)
    second = optimizer.step(closure)
    assert second < first
    optimizer.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in model.parameters())


def test_accepts_optax_compat_transformations():
    from optax_compat._src import alias as optax_alias

    model, reference = mlp(torch.float64), mlp(torch.float64)
    optimizer = torchopt.Optimizer(model.parameters(), optax_alias.sgd(0.1))
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(3):
        train_step(model, optimizer, step, torch.float64)
        train_step(reference, reference_optimizer, step, torch.float64)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q)
    with pytest.raises(TypeError, match="not a GradientTransformation"):
        torchopt.Optimizer(model.parameters(), lambda g: g)


@pytest.mark.parametrize("other", [
    lambda params: torchopt.SGD(params, lr=0.1, momentum=0.9),  # another optimizer
    lambda params: torchopt.Adam(list(params)[:2], lr=1e-2),  # another parameter layout
])
def test_load_state_dict_mismatch_raises_and_leaves_optimizer_unchanged(other):
    model = mlp()
    optimizer = torchopt.Adam(model.parameters(), lr=1e-2)
    train_step(model, optimizer, 0, torch.float32)
    before = [t.clone() for t in _tensors(optimizer.state_dict())]
    source_model = mlp(seed=1)
    source = other(source_model.parameters())
    train_step(source_model, source, 0, torch.float32)
    with pytest.raises(ValueError, match="state"):
        optimizer.load_state_dict(source.state_dict())
    after = _tensors(optimizer.state_dict())
    assert len(before) == len(after)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_load_state_dict_wrong_group_count_raises():
    optimizer = torchopt.SGD(mlp().parameters(), lr=0.1)
    state_dict = optimizer.state_dict()
    with pytest.raises(ValueError, match="1 parameter groups, the state dict has 2"):
        optimizer.load_state_dict({**state_dict, "param_groups": state_dict["param_groups"] * 2})


def _tensors(state):
    from optax_compat._runtime import tree_math

    return [t for t in tree_math.leaves(state) if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize(("ours", "theirs", "kwargs"), [
    (torchopt.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.1)),
    (torchopt.RMSprop, torch.optim.RMSprop, dict(lr=1e-2, centered=True)),
    (torchopt.Adagrad, torch.optim.Adagrad, dict(lr=0.1)),
], ids=["SGD", "RMSprop", "Adagrad"])
def test_parameters_without_grad_are_skipped_as_by_torch_optim(ours, theirs, kwargs):
    model = mlp(torch.float64)
    reference = copy.deepcopy(model)
    optimizer, reference_optimizer = ours(model.parameters(), **kwargs), theirs(
        reference.parameters(), **kwargs)
    for step in range(6):
        for net, opt in ((model, optimizer), (reference, reference_optimizer)):
            if step % 2:  # every other step, the first layer gets no gradient
                step_without_first_layer_grad(net, opt, step)
            else:
                train_step(net, opt, step, torch.float64)
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, **tolerance(p, q)._asdict())


@pytest.mark.parametrize("use_accelerated_op", [False, True])
def test_adam_keeps_parameters_without_grad_and_their_moments(use_accelerated_op):
    # The step counter is shared by the group (Optax's state), so unlike torch.optim's
    # per-parameter counters it still advances; the parameter and its moments do not move.
    model = mlp(torch.float64)
    optimizer = torchopt.Adam(model.parameters(), lr=1e-2,
                              use_accelerated_op=use_accelerated_op)
    train_step(model, optimizer, 0, torch.float64)
    weight = model[0].weight.detach().clone()
    first = model[0].weight
    moments = [optimizer.state[first][key].clone() for key in ("0.mu", "0.nu")]
    bias = model[2].bias.detach().clone()
    step_without_first_layer_grad(model, optimizer, 1)
    assert torch.equal(model[0].weight, weight)
    assert all(torch.equal(optimizer.state[first][key], m)
               for key, m in zip(("0.mu", "0.nu"), moments, strict=True))
    assert not torch.equal(model[2].bias, bias)


def step_without_first_layer_grad(net, optimizer, step):
    optimizer.zero_grad(set_to_none=True)
    x, y = batch(step, torch.float64)
    features = x @ torch.ones(3, 8, dtype=torch.float64)
    torch.nn.functional.mse_loss(net[2](net[1](features)), y).backward()
    assert net[0].weight.grad is None
    optimizer.step()
