"""optax_compat.TorchOptimizer and torchopt_fn's optimizers inside PyTorch's training stack.

Each tool (every ``torch.optim.lr_scheduler`` scheduler, ``GradScaler`` under bf16 autocast,
``clip_grad_norm_``, ``torch.distributed.checkpoint``, ``weights_only`` checkpoints) drives our
optimizer and ``torch.optim.AdamW`` side by side on the same inputs; the parameters must agree.
"""

from __future__ import annotations

import copy
import inspect
import io
import math

import pytest
import torch
from torch.distributed.checkpoint import state_dict as dcp_state_dict
from torch.nn.functional import mse_loss
from torch.optim import lr_scheduler

import optax_compat as optax
import torchopt_fn
from tests.conftest import TEST_DEVICE
from tests.optax_compat.test_alias import ALIASES
from tests.torchopt_fn.models import mlp

FLOAT32 = dict(rtol=1e-5, atol=1e-6)
HYPER = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)


def optax_adamw(params, lr, betas, eps, weight_decay):
    tx = optax.inject_hyperparams(optax.adamw)(learning_rate=lr, b1=betas[0], b2=betas[1],
                                               eps=eps, weight_decay=weight_decay)
    return optax.TorchOptimizer(params, tx)


IMPLEMENTATIONS = {"optax_compat": optax_adamw, "torchopt_fn": torchopt_fn.AdamW}


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def make(request):
    return IMPLEMENTATIONS[request.param]


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator(TEST_DEVICE).manual_seed(step)
    return torch.randn(16, 3, generator=generator, device=TEST_DEVICE), torch.randn(
        16, 2, generator=generator, device=TEST_DEVICE)


def train_step(model, optimizer, step: int) -> torch.Tensor:
    x, y = batch(step)
    optimizer.zero_grad()
    loss = mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.detach()


def pair(make, **hyper):
    """Our optimizer and torch.optim.AdamW on two copies of one model."""
    model = mlp()
    reference = copy.deepcopy(model)
    hyper = {**HYPER, **hyper}
    return model, make(model.parameters(), **hyper), reference, torch.optim.AdamW(
        reference.parameters(), **hyper)


def assert_same_params(model, reference, **tolerance):
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p, q, **(tolerance or FLOAT32))


def save_and_load(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


# ----------------------------------------------------------------------------------------------
# The protocol itself.


def test_is_a_torch_optimizer_with_torch_defaults(make):
    model = mlp()
    optimizer = make(model.parameters(), **HYPER)
    assert isinstance(optimizer, torch.optim.Optimizer)
    group = optimizer.param_groups[0]
    assert group["lr"] == 1e-2 and group["betas"] == (0.9, 0.99)
    assert group["params"] == list(model.parameters())
    train_step(model, optimizer, 0)
    assert all(p.grad is not None for p in model.parameters())
    optimizer.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_isinstance_of_every_torchopt_fn_optimizer():
    params = list(mlp().parameters())
    for name in ("SGD", "Adam", "AdamW", "Adamax", "Adadelta", "Adagrad", "RAdam", "RMSprop"):
        optimizer = getattr(torchopt_fn, name)(params, lr=0.1)
        assert isinstance(optimizer, torch.optim.Optimizer), name
    assert isinstance(torchopt_fn.Optimizer(params, torchopt_fn.sgd(0.1)), torch.optim.Optimizer)


def test_state_is_keyed_by_parameter():
    model = mlp()
    optimizer = optax.TorchOptimizer(model.parameters(), optax.adam(1e-2))
    train_step(model, optimizer, 0)
    weight = model[0].weight
    state = optimizer.state[weight]
    assert sorted(state) == ["0.count", "0.mu", "0.nu"]
    assert state["0.mu"].shape == weight.shape
    # The step count is the group's: one tensor shared by every parameter's entry.
    assert all(optimizer.state[p]["0.count"] is state["0.count"] for p in model.parameters())
    assert int(state["0.count"]) == 1


def test_per_group_hyperparameters_and_add_param_group_match_torch(make):
    model = mlp()
    reference = copy.deepcopy(model)
    optimizer = make([{"params": model[0].parameters(), "lr": 3e-2}], **HYPER)
    optimizer.add_param_group({"params": model[2].parameters(), "weight_decay": 0.0})
    reference_optimizer = torch.optim.AdamW(
        [{"params": reference[0].parameters(), "lr": 3e-2}], **HYPER)
    reference_optimizer.add_param_group({"params": reference[2].parameters(),
                                         "weight_decay": 0.0})
    assert [g["lr"] for g in optimizer.param_groups] == [3e-2, 1e-2]
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]
    for step in range(5):
        train_step(model, optimizer, step)
        train_step(reference, reference_optimizer, step)
    assert_same_params(model, reference)


def test_named_parameters_are_kept_in_groups_and_state_dict():
    model = mlp()
    optimizer = optax.TorchOptimizer(model.named_parameters(), optax.sgd(0.1, momentum=0.9))
    train_step(model, optimizer, 0)
    names = [name for name, _ in model.named_parameters()]
    assert optimizer.param_groups[0]["param_names"] == names
    assert optimizer.state_dict()["param_groups"][0]["param_names"] == names


def test_group_hyperparameter_the_transformation_does_not_have_raises():
    model = mlp()
    with pytest.raises(ValueError, match=r"\['lr'\].*inject_hyperparams"):
        optax.TorchOptimizer([{"params": model.parameters(), "lr": 0.1}], optax.adam(1e-3))
    optimizer = optax.TorchOptimizer(model[0].parameters(), optax.adam(1e-3))
    with pytest.raises(ValueError, match="'betas'"):
        optimizer.add_param_group({"params": model[2].parameters(), "betas": (0.8, 0.9)})
    assert len(optimizer.param_groups) == 1


def test_a_group_the_transformation_cannot_take_is_not_added():
    model = mlp()
    optimizer = optax.TorchOptimizer(model[0].parameters(), optax.sm3(0.1))
    with pytest.raises(ValueError, match="sm3 needs params of rank at least 1"):
        optimizer.add_param_group({"params": [torch.nn.Parameter(torch.tensor(1.0))]})
    assert len(optimizer.param_groups) == 1
    train_step(model, optimizer, 0)


def test_two_injected_learning_rates_are_refused():
    inject = optax.inject_hyperparams
    tx = optax.chain(inject(optax.sgd)(learning_rate=0.1), inject(optax.adam)(learning_rate=0.1))
    with pytest.raises(ValueError, match="both be the parameter group's 'lr'"):
        optax.TorchOptimizer(mlp().parameters(), tx)


def test_hyperparameter_dicts_are_not_taken_for_parameters(make):
    model = mlp()
    with pytest.raises(ValueError, match="'params'"):
        make([{"lr": 1e-2}], **HYPER)
    optimizer = make(model[0].parameters(), **HYPER)
    with pytest.raises(ValueError, match="'params'"):
        optimizer.add_param_group({"lr": 1e-2})
    assert len(optimizer.param_groups) == 1


def test_torchopt_fn_add_param_group_takes_a_tree_of_tensors():
    model = mlp()
    optimizer = torchopt_fn.Adam(model[0].parameters(), lr=1e-2)
    optimizer.add_param_group({"w": model[2].weight, "b": (model[2].bias,)})
    assert optimizer.param_groups[1]["params"] == [model[2].bias, model[2].weight]
    assert optimizer.param_groups[1]["lr"] == 1e-2
    with pytest.raises(ValueError, match="tree of tensors"):
        optimizer.add_param_group([1.0, 2.0])


def test_step_hooks_run_and_closure_loss_is_returned(make):
    model = mlp()
    optimizer = make(model.parameters(), **HYPER)
    calls = []
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: calls.append("pre"))
    optimizer.register_step_post_hook(lambda opt, args, kwargs: calls.append("post"))
    x, y = batch(0)

    def closure():
        optimizer.zero_grad()
        loss = mse_loss(model(x), y)
        loss.backward()
        return loss

    first = optimizer.step(closure)
    second = optimizer.step(closure)
    assert second < first
    assert calls == ["pre", "post", "pre", "post"]
    optimizer.register_state_dict_post_hook(lambda opt, sd: calls.append("saved") or sd)
    optimizer.register_load_state_dict_pre_hook(lambda opt, sd: calls.append("loading"))
    optimizer.register_load_state_dict_post_hook(lambda opt: calls.append("loaded"))
    optimizer.load_state_dict(optimizer.state_dict())
    assert calls[4:] == ["saved", "loading", "loaded"]


def test_closure_loss_feeds_polyak_sgd():
    model = mlp()
    optimizer = optax.TorchOptimizer(model.parameters(), optax.polyak_sgd(max_learning_rate=1.0))
    x, y = batch(0)

    def closure():
        optimizer.zero_grad()
        loss = mse_loss(model(x), y)
        loss.backward()
        return loss

    losses = [optimizer.step(closure).item() for _ in range(3)]
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("inplace", [False, True])
def test_parameters_without_grad_keep_their_values_and_state(inplace):
    model = mlp()
    optimizer = optax.TorchOptimizer(model.parameters(), optax.adam(1e-2), inplace=inplace)
    train_step(model, optimizer, 0)
    frozen = model[0].weight
    value, moments = frozen.detach().clone(), {k: v.clone() for k, v in
                                               optimizer.state[frozen].items() if "count" not in k}
    bias = model[2].bias.detach().clone()
    optimizer.zero_grad()
    x, y = batch(1)
    mse_loss(model[2](model[1](x @ torch.ones(3, 8))), y).backward()
    assert frozen.grad is None
    optimizer.step()
    assert torch.equal(frozen, value)
    assert all(torch.equal(optimizer.state[frozen][k], v) for k, v in moments.items())
    assert not torch.equal(model[2].bias, bias)


def test_inplace_gives_the_pure_numbers():
    model = mlp()
    twin = copy.deepcopy(model)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2))
    pure = optax.TorchOptimizer(model.parameters(), tx)
    fast = optax.TorchOptimizer(twin.parameters(), tx, inplace=True)
    for step in range(4):
        train_step(model, pure, step)
        train_step(twin, fast, step)
    assert_same_params(model, twin)


# ----------------------------------------------------------------------------------------------
# torch.compile: the step alone (PyTorch's recipe for compiling an optimizer), with no graph
# break, and the whole training step in default mode.


@pytest.mark.parametrize("inplace", [False, True], ids=["pure", "inplace"])
@pytest.mark.parametrize("compiled", ["step_fullgraph", "training_step_default"])
def test_compiled_step_matches_torch(make, compiled, inplace):
    model, optimizer, reference, torch_optimizer = pair(make)
    optimizer.inplace = inplace
    torch._dynamo.reset()
    if compiled == "step_fullgraph":
        optimizer.step = torch.compile(optimizer.step, fullgraph=True, backend="eager")
        step = train_step
    else:
        step = torch.compile(train_step, backend="eager")
    for i in range(3):
        step(model, optimizer, i)
        train_step(reference, torch_optimizer, i)
    assert_same_params(model, reference)
    assert sorted(optimizer.state[model[0].weight]) == sorted(
        optimizer.state[model[-1].bias])


def test_compiled_inplace_adam_leaves_the_gradients_alone():
    """Compiled, the in-place Adam step forms its denominators out of place (Inductor keeps them
    in registers: one write pass less); eager, in the buffers of copies of the gradients."""
    model = mlp()
    optimizer = optax.TorchOptimizer(model.parameters(), optax.adam(1e-2), inplace=True)
    torch._dynamo.reset()
    optimizer.step = torch.compile(optimizer.step, fullgraph=True, backend="eager")
    x, y = batch(0)
    mse_loss(model(x), y).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    optimizer.step()
    for p, grad in zip(model.parameters(), grads, strict=True):
        assert torch.equal(p.grad, grad)


COMPOSITE_STATES = {
    # A dict of label -> state (partition), masked per-parameter tuples, injected
    # hyper-parameters: the nodes Dynamo rebuilds from the layout's skeleton.
    "muon": lambda: optax.contrib.muon(1e-2),
    "masked_adamw": lambda: optax.adamw(1e-2, mask=lambda params: tuple(
        p.ndim > 1 for p in params)),
    "inject_adamw": lambda: optax.inject_hyperparams(optax.adamw)(learning_rate=1e-2),
}


@pytest.mark.parametrize("name", sorted(COMPOSITE_STATES))
def test_compiled_step_of_composite_states_matches_eager(name):
    model = mlp()
    reference = copy.deepcopy(model)
    optimizer = optax.TorchOptimizer(model.parameters(), COMPOSITE_STATES[name]())
    eager = optax.TorchOptimizer(reference.parameters(), COMPOSITE_STATES[name]())
    torch._dynamo.reset()
    optimizer.step = torch.compile(optimizer.step, fullgraph=True, backend="eager")
    for i in range(3):
        train_step(model, optimizer, i)
        train_step(reference, eager, i)
    assert_same_params(model, reference)


def test_compiled_step_with_a_tensor_lr_under_a_scheduler_compiles_once(make):
    """As with torch.optim, a tensor ``lr`` in the group lets a scheduler change it without a
    recompilation (a float is a constant of the compiled step)."""
    model = mlp()
    reference = copy.deepcopy(model)
    groups = [{"params": list(model.parameters()), "lr": torch.tensor(HYPER["lr"])}]
    optimizer = make(groups, **HYPER)
    torch_optimizer = torch.optim.AdamW(
        [{"params": list(reference.parameters()), "lr": torch.tensor(HYPER["lr"])}], **HYPER)
    schedulers = [lr_scheduler.StepLR(o, step_size=1, gamma=0.8)
                  for o in (optimizer, torch_optimizer)]
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    # Default mode: the scheduler wraps ``step`` in a function Dynamo does not trace.
    optimizer.step = torch.compile(optimizer.step, backend="eager")
    for i in range(5):
        train_step(model, optimizer, i)
        train_step(reference, torch_optimizer, i)
        for scheduler in schedulers:
            scheduler.step()
    assert_same_params(model, reference)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


# ----------------------------------------------------------------------------------------------
# Learning-rate schedulers: every one torch has.

STEPS = 12
SCHEDULERS = {
    "LambdaLR": lambda opt: lr_scheduler.LambdaLR(opt, lambda epoch: 0.9 ** epoch),
    "MultiplicativeLR": lambda opt: lr_scheduler.MultiplicativeLR(opt, lambda epoch: 0.95),
    "StepLR": lambda opt: lr_scheduler.StepLR(opt, step_size=3, gamma=0.5),
    "MultiStepLR": lambda opt: lr_scheduler.MultiStepLR(opt, milestones=[2, 5], gamma=0.5),
    "ConstantLR": lambda opt: lr_scheduler.ConstantLR(opt, factor=0.5, total_iters=4),
    "LinearLR": lambda opt: lr_scheduler.LinearLR(opt, 0.2, 1.0, total_iters=5),
    "ExponentialLR": lambda opt: lr_scheduler.ExponentialLR(opt, gamma=0.9),
    "SequentialLR": lambda opt: lr_scheduler.SequentialLR(
        opt, [lr_scheduler.LinearLR(opt, 0.1, 1.0, total_iters=3),
              lr_scheduler.ExponentialLR(opt, gamma=0.9)], milestones=[3]),
    "PolynomialLR": lambda opt: lr_scheduler.PolynomialLR(opt, total_iters=8, power=2.0),
    "CosineAnnealingLR": lambda opt: lr_scheduler.CosineAnnealingLR(opt, T_max=6),
    "ChainedScheduler": lambda opt: lr_scheduler.ChainedScheduler(
        [lr_scheduler.StepLR(opt, 2, 0.5), lr_scheduler.ExponentialLR(opt, 0.95)]),
    "CyclicLR": lambda opt: lr_scheduler.CyclicLR(  # cycles betas[0] too
        opt, base_lr=1e-3, max_lr=1e-2, step_size_up=3, base_momentum=0.8, max_momentum=0.9),
    "CosineAnnealingWarmRestarts": lambda opt: lr_scheduler.CosineAnnealingWarmRestarts(
        opt, T_0=4),
    "OneCycleLR": lambda opt: lr_scheduler.OneCycleLR(  # cycles betas[0] too
        opt, max_lr=2e-2, total_steps=STEPS),
    "ReduceLROnPlateau": lambda opt: lr_scheduler.ReduceLROnPlateau(opt, factor=0.5,
                                                                    patience=0, threshold=0.5),
    "SWALR": lambda opt: torch.optim.swa_utils.SWALR(opt, swa_lr=5e-3, anneal_epochs=4),
}


def test_every_torch_scheduler_is_tested():
    schedulers = {name for name, value in vars(lr_scheduler).items()
                  if inspect.isclass(value) and not name.startswith("_")
                  and issubclass(value, (lr_scheduler.LRScheduler,
                                         lr_scheduler.ReduceLROnPlateau))
                  and value is not lr_scheduler.LRScheduler}
    assert schedulers | {"SWALR"} == set(SCHEDULERS)


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_scheduler_matches_torch_adamw(make, name):
    model, optimizer, reference, reference_optimizer = pair(make)
    schedulers = [SCHEDULERS[name](optimizer), SCHEDULERS[name](reference_optimizer)]
    learning_rates = set()
    for step in range(STEPS):
        for net, opt, scheduler in zip((model, reference), (optimizer, reference_optimizer),
                                       schedulers, strict=True):
            loss = train_step(net, opt, step)
            if isinstance(scheduler, lr_scheduler.ReduceLROnPlateau):
                scheduler.step(float(loss))
            else:
                scheduler.step()
        ours, theirs = optimizer.param_groups[0], reference_optimizer.param_groups[0]
        assert ours["lr"] == pytest.approx(theirs["lr"], rel=1e-12)
        assert ours["betas"] == pytest.approx(theirs["betas"], rel=1e-12)
        learning_rates.add(ours["lr"])
    assert len(learning_rates) > 1
    assert_same_params(model, reference)


# ----------------------------------------------------------------------------------------------
# Gradient clipping, GradScaler under autocast, checkpoints.


def test_clip_grad_norm_before_step_matches_torch(make):
    model, optimizer, reference, reference_optimizer = pair(make)
    for step in range(6):
        for net, opt in ((model, optimizer), (reference, reference_optimizer)):
            x, y = batch(step)
            opt.zero_grad()
            (100.0 * mse_loss(net(x), y)).backward()
            norm = torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm=0.5)
            assert norm > 0.5
            opt.step()
    assert_same_params(model, reference)


def test_grad_scaler_with_bf16_autocast_matches_torch(make, device):
    model, optimizer, reference, reference_optimizer = pair(make)
    scaler = torch.amp.GradScaler(device.type, init_scale=2.0 ** 12, growth_interval=2)
    reference_scaler = torch.amp.GradScaler(device.type, init_scale=2.0 ** 12, growth_interval=2)
    poisoned = {3: math.inf, 5: math.nan}
    for step in range(8):
        x, y = batch(step)
        optimizer.zero_grad()
        reference_optimizer.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = mse_loss(model(x), y)
        assert loss.dtype == torch.float32 and model(x).dtype == torch.float32
        scaler.scale(loss).backward()
        reference_scaler.scale(loss.detach())  # the same scale, for the same gradients
        if step in poisoned:
            model[0].weight.grad[0, 0] = poisoned[step]
        for p, q in zip(model.parameters(), reference.parameters(), strict=True):
            q.grad = p.grad.clone()
        before = [p.detach().clone() for p in model.parameters()]
        counts = [v.clone() for k, v in optimizer.state[model[0].weight].items() if "count" in k]
        scale = scaler.get_scale()
        for opt, grad_scaler in ((optimizer, scaler), (reference_optimizer, reference_scaler)):
            grad_scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(opt.param_groups[0]["params"], max_norm=1.0)
            grad_scaler.step(opt)
            grad_scaler.update()
        assert scaler.get_scale() == reference_scaler.get_scale()
        assert (scaler.get_scale() == scale / 2) == (step in poisoned)
        skipped = all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))
        assert skipped == (step in poisoned)
        if skipped:
            after = [v for k, v in optimizer.state[model[0].weight].items() if "count" in k]
            assert all(torch.equal(a, b) for a, b in zip(after, counts, strict=True))
        assert_same_params(model, reference)


def test_state_dict_loads_with_weights_only_and_resumes_bit_identically(make):
    model, optimizer, _, _ = pair(make)
    scheduler = lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    for step in range(3):
        train_step(model, optimizer, step)
        scheduler.step()
    checkpoint = save_and_load({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    resumed_model = mlp(seed=7)
    resumed_model.load_state_dict(checkpoint["model"])
    resumed = make(resumed_model.parameters(), **HYPER)
    resumed.load_state_dict(checkpoint["optimizer"])
    assert resumed.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    for step in range(3, 7):
        train_step(model, optimizer, step)
        train_step(resumed_model, resumed, step)
    assert_same_params(model, resumed_model, rtol=0, atol=0)


@pytest.mark.parametrize("name", ALIASES)
def test_every_alias_state_dict_loads_with_weights_only(name):
    model = mlp()
    make = lambda params: optax.TorchOptimizer(params, getattr(optax, name)(
        **({"max_learning_rate": 0.1} if name == "polyak_sgd" else {"learning_rate": 0.01})))
    optimizer = make(model.parameters())
    x, y = batch(0)

    def closure(net, opt):
        opt.zero_grad()
        loss = mse_loss(net(x), y)
        loss.backward()
        return loss

    for _ in range(2):
        optimizer.step(lambda: closure(model, optimizer))
    resumed_model = copy.deepcopy(model)
    resumed = make(resumed_model.parameters())
    resumed.load_state_dict(save_and_load(optimizer.state_dict()))
    for _ in range(2):
        optimizer.step(lambda: closure(model, optimizer))
        resumed.step(lambda: closure(resumed_model, resumed))
    assert_same_params(model, resumed_model, rtol=0, atol=0)


@pytest.mark.parametrize("name", ALIASES)
def test_every_alias_step_compiles_and_matches_eager(name):
    """``torch.compile(optimizer.step)`` of every alias: no graph break (``fullgraph=True``;
    Polyak's step needs the loss, from a closure that runs backward: default mode)."""
    kwargs = {"max_learning_rate": 0.1} if name == "polyak_sgd" else {"learning_rate": 0.01}
    models = [mlp(), mlp()]
    optimizers = [optax.TorchOptimizer(m.parameters(), getattr(optax, name)(**kwargs))
                  for m in models]
    torch._dynamo.reset()
    compiled = torch.compile(optimizers[0].step, fullgraph=name != "polyak_sgd",
                             backend="eager")
    x, y = batch(0)
    for _ in range(2):
        for model, optimizer, step in zip(models, optimizers, (compiled, optimizers[1].step)):
            def closure(model=model, optimizer=optimizer):
                optimizer.zero_grad()
                loss = mse_loss(model(x), y)
                loss.backward()
                return loss
            if name == "polyak_sgd":
                step(closure)
            else:
                closure()
                step()
    assert_same_params(*models)


@pytest.mark.parametrize("source", ["another model", "another optimizer", "torch.optim.AdamW"])
def test_load_state_dict_that_does_not_fit_raises_and_changes_nothing(make, source):
    model, optimizer, _, _ = pair(make)
    train_step(model, optimizer, 0)
    other_model = mlp(hidden=5) if source == "another model" else mlp(seed=3)
    other = (torch.optim.AdamW(other_model.parameters()) if source == "torch.optim.AdamW"
             else optax.TorchOptimizer(other_model.parameters(), optax.sgd(0.1, momentum=0.9))
             if source == "another optimizer" else make(other_model.parameters(), **HYPER))
    train_step(other_model, other, 0)
    before = copy.deepcopy(optimizer.state_dict())
    with pytest.raises(ValueError, match="state"):
        optimizer.load_state_dict(other.state_dict())
    after = optimizer.state_dict()
    assert before["param_groups"] == after["param_groups"]
    for key, entries in before["state"].items():
        assert all(torch.equal(v, after["state"][key][k]) for k, v in entries.items())


def test_distributed_checkpoint_state_dict_round_trip(make, tmp_path):
    import torch.distributed.checkpoint as dcp

    model, optimizer, reference, reference_optimizer = pair(make)
    for step in range(3):
        train_step(model, optimizer, step)
        train_step(reference, reference_optimizer, step)
    saved = dcp_state_dict.get_optimizer_state_dict(model, optimizer)
    theirs = dcp_state_dict.get_optimizer_state_dict(reference, reference_optimizer)
    assert set(saved["state"]) == set(theirs["state"]) == {"0.weight", "0.bias", "2.weight",
                                                            "2.bias"}
    assert saved["state"]["0.weight"]["0.mu" if "0.mu" in saved["state"]["0.weight"]
                                      else "inner_state.0.mu"].shape == (8, 3)
    with pytest.warns(UserWarning, match="single process"):
        dcp.save({"optimizer": saved, "model": model.state_dict()}, checkpoint_id=tmp_path)

    resumed_model = mlp(seed=9)
    resumed = make(resumed_model.parameters(), **HYPER)
    loaded = {"optimizer": dcp_state_dict.get_optimizer_state_dict(resumed_model, resumed),
              "model": resumed_model.state_dict()}
    with pytest.warns(UserWarning, match="single process"):
        dcp.load(loaded, checkpoint_id=tmp_path)
    resumed_model.load_state_dict(loaded["model"])
    dcp_state_dict.set_optimizer_state_dict(resumed_model, resumed, loaded["optimizer"])
    for step in range(3, 6):
        train_step(model, optimizer, step)
        train_step(resumed_model, resumed, step)
    assert_same_params(model, resumed_model, rtol=0, atol=0)


# ----------------------------------------------------------------------------------------------
# Sparse gradients.


def embedding_step(optimizer, embedding, step):
    optimizer.zero_grad()
    indices = torch.tensor([[step % 5, 3], [1, 3]])
    embedding(indices).pow(2).sum().backward()
    optimizer.step()


@pytest.mark.parametrize("make_sparse", [
    lambda params: optax.TorchOptimizer(params, optax.adam(1e-2)),
    lambda params: torchopt_fn.Adam(params, lr=1e-2),
], ids=["TorchOptimizer", "Adam"])
def test_sparse_gradients_are_refused_with_the_alternative(make_sparse):
    embedding = torch.nn.Embedding(6, 3, sparse=True)
    optimizer = make_sparse(embedding.parameters())
    before = embedding.weight.detach().clone()
    with pytest.raises(RuntimeError, match=r"(TorchOptimizer|Adam) does not support sparse "
                                           r"gradients.*SparseAdam"):
        embedding_step(optimizer, embedding, 0)
    assert torch.equal(embedding.weight, before)


def test_sgd_supports_sparse_gradients_as_torch():
    embedding = torch.nn.Embedding(6, 3, sparse=True)
    reference = copy.deepcopy(embedding)
    optimizer = torchopt_fn.SGD(embedding.parameters(), lr=0.1, momentum=0.9)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    for step in range(4):
        embedding_step(optimizer, embedding, step)
        embedding_step(reference_optimizer, reference, step)
        assert reference.weight.grad.is_sparse
    torch.testing.assert_close(embedding.weight, reference.weight, **FLOAT32)


def test_one_cycle_cycles_the_momentum_of_sgd():
    model = mlp()
    reference = copy.deepcopy(model)
    optimizer = optax.torch_optimizer(
        optax.inject_hyperparams(optax.sgd)(learning_rate=0.1, momentum=0.9), model.parameters())
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    assert optimizer.param_groups[0]["momentum"] == 0.9 and "betas" not in optimizer.defaults
    schedulers = [lr_scheduler.OneCycleLR(opt, max_lr=0.2, total_steps=8)
                  for opt in (optimizer, reference_optimizer)]
    momenta = set()
    for step in range(8):
        for net, opt, scheduler in zip((model, reference), (optimizer, reference_optimizer),
                                       schedulers, strict=True):
            train_step(net, opt, step)
            scheduler.step()
        momenta.add(optimizer.param_groups[0]["momentum"])
        assert optimizer.param_groups[0]["momentum"] == reference_optimizer.param_groups[0][
            "momentum"]
    assert len(momenta) > 2
    assert_same_params(model, reference)


def matrices(params):
    return tuple(p.ndim > 1 for p in params)


@pytest.mark.parametrize(("tx", "bias_has_buffers"), [
    (optax.masked(optax.adam(1e-2), matrices), False),
    (optax.multi_transform({"adam": optax.adam(1e-2), "sgd": optax.sgd(0.1, momentum=0.9)},
                           lambda params: tuple("adam" if p.ndim > 1 else "sgd"
                                                for p in params)), True),
    (optax.chain(optax.clip_by_global_norm(1.0), optax.inject_hyperparams(optax.adamw)(
        learning_rate=optax.linear_schedule(1e-2, 1e-3, 5), weight_decay=0.1)), True),
    (optax.MultiSteps(optax.adam(1e-2), every_k_schedule=2).gradient_transformation(), True),
    (optax.apply_if_finite(optax.lion(1e-3), max_consecutive_errors=3), True),
], ids=["masked", "multi_transform", "chain-scheduled", "MultiSteps", "apply_if_finite"])
def test_combinator_states_spread_over_parameters_and_round_trip(tx, bias_has_buffers):
    model = mlp()
    optimizer = optax.TorchOptimizer(model.parameters(), tx)
    for step in range(3):
        train_step(model, optimizer, step)
    weight, bias = model[0].weight, model[0].bias
    assert any(v.shape == weight.shape for v in optimizer.state[weight].values())
    assert any(v.shape == bias.shape for v in optimizer.state[bias].values()) == bias_has_buffers
    resumed_model = copy.deepcopy(model)
    resumed = optax.TorchOptimizer(resumed_model.parameters(), tx)
    resumed.load_state_dict(save_and_load(optimizer.state_dict()))
    for step in range(3, 6):
        train_step(model, optimizer, step)
        train_step(resumed_model, resumed, step)
    assert_same_params(model, resumed_model, rtol=0, atol=0)
    # The same run on the raw transformation: the optimizer changes nothing in the numbers.
    raw = mlp()
    params = tuple(raw.parameters())
    state = tx.init(params)
    for step in range(6):
        x, y = batch(step)
        grads = torch.autograd.grad(mse_loss(raw(x), y), params)
        updates, state = tx.update(grads, state, params)
        with torch.no_grad():
            for p, u in zip(params, updates, strict=True):
                p.add_(u)
    assert_same_params(raw, model, rtol=0, atol=0)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # ZeRO uses torch.jit
def test_zero_redundancy_optimizer_shards_and_checkpoints_it():
    import datetime

    import torch.distributed as dist
    from torch.distributed.optim import ZeroRedundancyOptimizer

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        model = mlp()
        reference = copy.deepcopy(model)
        tx = optax.inject_hyperparams(optax.adamw)(learning_rate=1e-2, weight_decay=0.1)
        zero = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=optax.TorchOptimizer,
                                       tx=tx)
        reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2,
                                                weight_decay=0.1)
        for step in range(3):
            train_step(model, zero, step)
            train_step(reference, reference_optimizer, step)
        assert_same_params(model, reference)
        zero.consolidate_state_dict(to=0)
        checkpoint = copy.deepcopy(zero.state_dict())  # ZeRO puts its keyword `tx` in groups
        assert set(checkpoint["state"][0]) == {"count", "inner_state.0.count",
                                               "inner_state.0.mu", "inner_state.0.nu"}
        resumed_model = copy.deepcopy(model)
        resumed = ZeroRedundancyOptimizer(resumed_model.parameters(),
                                          optimizer_class=optax.TorchOptimizer, tx=tx)
        resumed.load_state_dict(checkpoint)
        for step in range(3, 5):
            train_step(model, zero, step)
            train_step(resumed_model, resumed, step)
        assert_same_params(model, resumed_model, rtol=0, atol=0)
    finally:
        dist.destroy_process_group()
