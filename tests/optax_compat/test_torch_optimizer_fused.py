"""TorchOptimizer(fused=True): the unfused optimizer's numbers, state_dicts and checkpoints."""

from __future__ import annotations

import collections
import inspect
import io
import pickle
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

import optax_compat as optax
from optax_compat import testing
from tests.conftest import FLOAT32_ATOL, TEST_DEVICE

STEPS = 3

# Every alias of the top level (and the contrib ones fused_step runs) that fuses, built small.
FUSABLE: dict[str, Callable[[], optax.GradientTransformation]] = {
    **{name: (lambda name=name: getattr(optax, name)(0.05)) for name in (
        "adabelief", "adadelta", "adafactor", "adagrad", "adam", "adamax", "adamaxw", "adamw",
        "adan", "amsgrad", "fromage", "lamb", "lars", "lion", "novograd", "optimistic_adam_v2",
        "optimistic_gradient_descent", "radam", "rmsprop", "rprop", "sign_sgd", "signum",
        "yogi")},
    "sgd": lambda: optax.sgd(0.05, momentum=0.9, nesterov=True),
    "inject_adamw": lambda: optax.inject_hyperparams(optax.adamw)(learning_rate=0.05,
                                                                  weight_decay=0.1),
    "clip_adamw_schedule": lambda: optax.chain(
        optax.clip_by_global_norm(0.5),
        optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 0.05, 2, 10))),
    **{name: (lambda name=name: getattr(optax.contrib, name)(0.05)) for name in (
        "acprop", "ademamix", "adopt", "schedule_free_adamw")},
    "prodigy": lambda: optax.contrib.prodigy(weight_decay=0.1),
}
# The top-level aliases that step unfused, with a warning: not declared fusable (L-BFGS, noisy
# SGD), reading the loss (Polyak), deprecated (optimistic_adam), or (SM3) keeping per-axis
# accumulators, which fused_step runs but torch's per-parameter layout keeps unpacked.
UNFUSABLE = {"lbfgs", "scale_by_lbfgs", "noisy_sgd", "polyak_sgd", "optimistic_adam", "sm3"}


def _model() -> torch.nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(),
                                   torch.nn.Linear(6, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2))


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator(TEST_DEVICE).manual_seed(step)
    return (torch.randn(8, 4, generator=generator, device=TEST_DEVICE),
            torch.randn(8, 2, generator=generator, device=TEST_DEVICE))


def _train(optimizer: torch.optim.Optimizer, model: torch.nn.Module, steps: range) -> None:
    dtype = next(model.parameters()).dtype
    for step in steps:
        x, y = (t.to(dtype) for t in _batch(step))
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


def _pair(make: Callable[[], optax.GradientTransformation], **fused: Any
          ) -> tuple[tuple[torch.nn.Module, optax.TorchOptimizer], ...]:
    """An unfused and a fused optimizer over two copies of the same model."""
    pairs = []
    for kwargs in ({}, {"fused": True, "fused_backend": None, **fused}):
        model = _model()
        pairs.append((model, optax.TorchOptimizer(model.parameters(), make(), **kwargs)))
    return tuple(pairs)


def _saved(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _assert_same(models: tuple[torch.nn.Module, ...], optimizers: tuple[Any, ...],
                 what: str, **tolerance: float) -> None:
    plain, fused = (optimizer.state_dict() for optimizer in optimizers)
    assert [sorted(s) for s in plain["state"].values()] == [
        sorted(s) for s in fused["state"].values()], what
    testing.assert_leaves_close(list(models[1].parameters()), list(models[0].parameters()),
                                what=f"{what}: params", **tolerance)
    testing.assert_leaves_close(fused["state"], plain["state"], what=f"{what}: state",
                                **tolerance)
    assert fused["param_groups"] == plain["param_groups"], what


def test_every_top_level_alias_is_known_to_fuse_or_not():
    module = optax._src.alias
    aliases = {name for name, value in vars(module).items()
               if inspect.isfunction(value) and value.__module__ == module.__name__
               and getattr(optax, name, None) is value}
    assert len(aliases) > 25
    assert aliases <= set(FUSABLE) | UNFUSABLE


@pytest.mark.parametrize("name", sorted(FUSABLE))
def test_fused_gives_the_unfused_numbers_state_dicts_and_checkpoints(name):
    (model, plain), (fused_model, fused) = _pair(FUSABLE[name])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning: the group really fuses
        _train(plain, model, range(STEPS))
        _train(fused, fused_model, range(STEPS))
    assert all(type(group).__name__ == "FusedGroup" for group in fused._fused)
    _assert_same((model, fused_model), (plain, fused), name)
    # A checkpoint of either loads into the other (weights_only) and resumes alike.
    plain_saved, fused_saved = _saved(plain), _saved(fused)
    plain.load_state_dict(fused_saved)
    fused.load_state_dict(plain_saved)
    _train(plain, model, range(STEPS, STEPS + 2))
    _train(fused, fused_model, range(STEPS, STEPS + 2))
    _assert_same((model, fused_model), (plain, fused), f"{name} resumed")


def test_state_entries_and_parameters_are_views_of_the_packed_buffers():
    (_, _), (model, fused) = _pair(lambda: optax.adam(0.05))
    _train(fused, model, range(1))
    engine = fused._fused[0].engine
    (buffer,) = engine.params
    for p in model.parameters():
        assert p.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()
        assert p.grad.untyped_storage().data_ptr() != buffer.untyped_storage().data_ptr()
        mu = fused.state[p]["0.mu"]
        assert mu.untyped_storage().data_ptr() == engine.state[0].mu[0].untyped_storage(
            ).data_ptr()


def test_gradients_kept_as_views_accumulate_and_are_not_copied_again():
    (model, plain), (fused_model, fused) = _pair(lambda: optax.adam(0.05))
    for optimizer, m in ((plain, model), (fused, fused_model)):
        for step in range(3):  # gradients zeroed, not set to None: accumulation in place
            x, y = _batch(step)
            optimizer.zero_grad(set_to_none=False)
            torch.nn.functional.mse_loss(m(x), y).backward()
            optimizer.step()
    _assert_same((model, fused_model), (plain, fused), "set_to_none=False")
    grads = fused._fused[0].engine.grads
    assert all(p.grad is view for p, view in zip(fused_model.parameters(), grads, strict=True))


def test_gradients_set_to_none_are_copied_without_being_replaced_by_views_after_the_first():
    (model, plain), (fused_model, fused) = _pair(lambda: optax.sgd(0.05, momentum=0.9))

    def train(steps, set_to_none):
        for step in steps:
            x, y = _batch(step)
            for optimizer, m in ((plain, model), (fused, fused_model)):
                optimizer.zero_grad(set_to_none=set_to_none)
                torch.nn.functional.mse_loss(m(x), y).backward()
                optimizer.step()
        views = fused._fused[0].engine.grads
        return [p.grad is view for p, view in zip(fused_model.parameters(), views, strict=True)]

    assert all(train(range(1), True))
    # Backward makes new gradients after zero_grad(): the views given at the first step
    # did not stay, so the next steps copy without setting ``.grad``.
    assert not any(train(range(1, 4), True))
    _assert_same((model, fused_model), (plain, fused), "set_to_none=True")
    # Kept gradients (accumulated in place) are those of the last step: views again.
    assert all(train(range(4, 6), False))
    _assert_same((model, fused_model), (plain, fused), "then set_to_none=False")


@pytest.mark.parametrize("size", [20_000, 100])
def test_new_gradients_of_large_tensors_go_to_sgds_kernel_reading_them_in_place(
        fused_sgd_calls, size):
    # Over large tensors, SGD's kernel reads new gradients where they are for less than
    # copying them into the gradient buffer costs; below the size the copy is cheaper.
    params = [torch.randn(size, requires_grad=True) for _ in range(4)]
    copies = [p.detach().clone().requires_grad_() for p in params]
    tx = optax.sgd(0.05, momentum=0.9)
    plain, fused = optax.TorchOptimizer(params, tx), optax.TorchOptimizer(copies, tx, fused=True)

    def train(steps, set_to_none):
        for _ in steps:
            for optimizer in (plain, fused):
                optimizer.zero_grad(set_to_none=set_to_none)
            for p, q in zip(params, copies):
                gradient = torch.randn_like(p)
                for tensor in (p, q):
                    if tensor.grad is None:
                        tensor.grad = gradient.clone()
                    else:
                        tensor.grad.add_(gradient)
            plain.step()
            fused.step()
        # The same kernel bit for bit; Inductor's packed step, to float32's tolerance.
        exact = {"rtol": 0.0, "atol": 0.0} if size == 20_000 and set_to_none else {}
        torch.testing.assert_close(copies, params, **exact)
        torch.testing.assert_close(_saved(fused), _saved(plain), **exact)

    train(range(3), True)
    # The unfused optimizer calls it at each step, the fused one too where the tensors are large.
    assert len(fused_sgd_calls) == (6 if size == 20_000 else 3)
    group = fused._fused[0]
    assert all(fused.state[q]["0.trace"] is view for q, view in zip(copies, group._views[0]))
    assert all(q.data_ptr() == view.data_ptr() for q, view in zip(copies, group.engine.params[0]
                                                                 .split(size)))
    # Gradients kept (accumulated in place) are those of the last step: from the step after,
    # they are the views of the gradient buffer, and the packed step runs.
    train(range(3), False)
    assert all(q.grad is view for q, view in zip(copies, group._grads))


def test_a_scheduler_drives_the_learning_rate_without_recompiling():
    make = lambda: optax.inject_hyperparams(optax.adamw)(learning_rate=0.1)
    (model, plain), (fused_model, fused) = _pair(make, fused_backend="aot_eager")
    schedulers = [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
                  for optimizer in (plain, fused)]
    compile_seconds = []
    for step in range(4):
        _train(plain, model, range(step, step + 1))
        _train(fused, fused_model, range(step, step + 1))
        for scheduler in schedulers:
            scheduler.step()
        compile_seconds.append(fused._fused[0].engine.compile_seconds)
    assert compile_seconds[0] > 0 and len(set(compile_seconds)) == 1  # compiled once
    assert fused.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5 ** 4)
    _assert_same((model, fused_model), (plain, fused), "StepLR")


def test_a_parameter_without_gradient_keeps_its_value_and_state():
    (model, plain), (fused_model, fused) = _pair(lambda: optax.adam(0.05))
    _train(plain, model, range(1))
    _train(fused, fused_model, range(1))
    for optimizer, m in ((plain, model), (fused, fused_model)):
        x, y = _batch(7)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        m[0].weight.grad = None
        optimizer.step()
    _assert_same((model, fused_model), (plain, fused), "a missing gradient")


def test_replaced_storage_and_state_are_taken_over_not_left_stale():
    (model, plain), (fused_model, fused) = _pair(lambda: optax.sgd(0.05, momentum=0.9))
    _train(plain, model, range(2))
    _train(fused, fused_model, range(2))
    for m, optimizer in ((model, plain), (fused_model, fused)):
        with torch.no_grad():
            m[0].weight.data = m[0].weight.data.clone() + 1.0  # new storage
        optimizer.state[m[2].bias]["0.trace"] = torch.full_like(m[2].bias, 0.25)
    _train(plain, model, range(2, 4))
    _train(fused, fused_model, range(2, 4))
    _assert_same((model, fused_model), (plain, fused), "replaced storage and state")
    assert fused_model[2].bias.untyped_storage().data_ptr() == fused_model[0].weight.\
        untyped_storage().data_ptr()  # packed anew, together


def test_a_torchopt_fn_group_that_falls_back_to_the_unfused_step_takes_plain_numbers():
    # Tied weights cannot be packed: the group steps unfused, with the unfused optimizer's
    # numbers bit for bit (float32 tensors would round ``1 - alpha`` from float32 ``alpha``).
    import torchopt_fn

    results = []
    for fused in (None, True):
        tied = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 6))
        view = torch.nn.Parameter(tied.detach()[:3])
        optimizer = torchopt_fn.RMSProp([tied, view], lr=0.01, alpha=0.9, momentum=0.9,
                                        centered=True, fused=fused)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for step in range(3):
                for p in (tied, view):
                    p.grad = torch.full_like(p, 0.5 + step)
                optimizer.step()
        results.append(tied.detach().clone())
        assert optimizer.group_is_fused(optimizer.param_groups[0]) is False
    assert torch.equal(results[0], results[1])


def test_compile_seconds_keep_the_groups_packed_anew():
    model = _model()
    optimizer = optax.TorchOptimizer(model.parameters(), optax.sgd(0.05, momentum=0.9),
                                     fused=True, fused_backend="aot_eager")
    _train(optimizer, model, range(1))
    first = optimizer.compile_seconds
    model.double()  # new storage: packed anew, compiled again for float64
    _train(optimizer, model, range(1, 2))
    again = optimizer._fused[0].engine.compile_seconds
    assert first > 0 and again > 0
    assert optimizer.compile_seconds == pytest.approx(first + again)


@pytest.mark.parametrize("replace", ["state[p]", "state"])
def test_a_new_state_of_a_parameter_or_a_new_state_is_taken_over(replace):
    # The fused step keeps the ``state[p]`` dicts it looked up while ``state`` sets no entry;
    # a new dict for one parameter, or a new ``state`` altogether, is read again.
    (model, plain), (fused_model, fused) = _pair(lambda: optax.sgd(0.05, momentum=0.9))
    _train(plain, model, range(2))
    _train(fused, fused_model, range(2))
    for m, optimizer in ((model, plain), (fused_model, fused)):
        if replace == "state[p]":
            optimizer.state[m[2].bias] = {"0.trace": torch.full_like(m[2].bias, 0.25)}
        else:
            optimizer.state = collections.defaultdict(dict, {
                p: {"0.trace": torch.full_like(p, 0.25)} for p in m.parameters()})
    _train(plain, model, range(2, 4))
    _train(fused, fused_model, range(2, 4))
    _assert_same((model, fused_model), (plain, fused), f"a new {replace}")


def test_groups_that_cannot_fuse_warn_once_and_step_unfused():
    model = _model()
    # On the CPU: a CUDA foreach kernel races on memory two parameters share (torch.optim's
    # too), so what the shared memory ends up holding is defined there only.
    tied = torch.nn.Parameter(torch.ones(3, device="cpu"))
    view = torch.nn.Parameter(tied.detach()[:2])  # shares tied's memory
    optimizer = optax.TorchOptimizer(
        [{"params": list(model.parameters())}, {"params": [tied, view]}],
        optax.sgd(0.1), fused=True, fused_backend=None)
    polyak = optax.TorchOptimizer(model.parameters(), optax.polyak_sgd(), fused=True)
    for p in [*model.parameters(), tied, view]:
        p.grad = torch.ones_like(p)
    with pytest.warns(UserWarning, match=r"group 1 steps unfused: two parameters share memory"):
        optimizer.step()
    with pytest.warns(UserWarning, match="group 0 steps unfused: TypeError: .*value"):
        polyak.step(lambda: torch.tensor(1.0))  # it reads the loss, which fused steps lack
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        optimizer.step()  # said once
    assert type(optimizer._fused[0]).__name__ == "FusedGroup"
    # Unfused, the shared memory takes both parameters' steps, as with torch.optim.
    assert tied.tolist() == pytest.approx([0.6, 0.6, 0.8])
    assert view.tolist() == pytest.approx([0.6, 0.6])


def test_fused_step_compiles_with_inductor_and_gives_the_unfused_numbers():
    (model, plain), (fused_model, fused) = _pair(lambda: optax.adamw(0.05),
                                                 fused_backend="inductor")
    _train(plain, model, range(STEPS))
    _train(fused, fused_model, range(STEPS))
    assert fused._fused[0].engine.compile_seconds > 0
    _assert_same((model, fused_model), (plain, fused), "inductor", rtol=1e-5, atol=FLOAT32_ATOL)


def test_grad_scaler_clipping_and_step_hooks_work_as_unfused():
    (model, plain), (fused_model, fused) = _pair(lambda: optax.adam(0.05))
    calls = []
    fused.register_step_post_hook(lambda optimizer, args, kwargs: calls.append("post"))
    for optimizer, m in ((plain, model), (fused, fused_model)):
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 8)
        for step in range(3):
            x, y = _batch(step)
            optimizer.zero_grad()
            scaler.scale(torch.nn.functional.mse_loss(m(x), y)).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.1)
            scaler.step(optimizer)
            scaler.update()
    assert calls == ["post"] * 3
    _assert_same((model, fused_model), (plain, fused), "GradScaler")


TORCHOPT_FN = {
    "Adam": {"lr": 0.05, "weight_decay": 0.1},
    "Adam_accelerated": {"lr": 0.05, "use_accelerated_op": True},
    "AdamW": {"lr": 0.05},
    "SGD": {"lr": 0.1, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.1,
            "maximize": True},
    "AdaMax": {"lr": 0.05},
    "AdaDelta": {"lr": 0.5},
    "AdaGrad": {"lr": 0.05},
    "RAdam": {"lr": 0.05},
    "RMSProp": {"lr": 0.05, "momentum": 0.9, "centered": True},
}


@pytest.mark.parametrize("name", sorted(TORCHOPT_FN))
def test_torchopt_fn_optimizers_fuse_with_the_unfused_numbers(name):
    import torchopt_fn

    cls = getattr(torchopt_fn, name.split("_")[0])
    models, optimizers = [], []
    for fused in (None, True):
        model = _model()
        optimizer = cls(model.parameters(), **TORCHOPT_FN[name], fused=fused)
        optimizer.fused_backend = None  # eagerly on the packed buffers: no compilation
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for step in range(STEPS + 1):
                _train(optimizer, model, range(step, step + 1))
                scheduler.step()
        models.append(model)
        optimizers.append(optimizer)
    assert type(optimizers[1]._fused[0]).__name__ == "FusedGroup"
    _assert_same(tuple(models), tuple(optimizers), name)


# Fused, the entries a scheduler moves are float32 tensors: ``1 - alpha`` is computed from the
# float32 ``alpha``, where the unfused step rounds the exact ``1 - 0.9``. Centered RMSProp's
# ``nu - mu ** 2`` cancels, which makes that relative 2e-7 a 5e-5.
_FLOAT32_ENTRIES = {"RMSProp": {"rtol": 1e-4, "atol": 1e-5}}

# Each torchopt_fn class with its numeric entries away from zero (each is then a tensor).
TORCHOPT_FN_ENTRIES = {
    "SGD": {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01, "dampening": 0.1},
    "Adam": {"lr": 0.05, "betas": (0.9, 0.99), "weight_decay": 0.01},
    "AdamW": {"lr": 0.05, "betas": (0.9, 0.99), "weight_decay": 0.01},
    "RMSProp": {"lr": 0.01, "alpha": 0.9, "momentum": 0.9, "centered": True,
                "weight_decay": 0.01},
    "Adagrad": {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.01},
    "Adadelta": {"lr": 1.0, "rho": 0.9, "weight_decay": 0.01},
    "Adamax": {"lr": 0.05, "betas": (0.9, 0.99), "weight_decay": 0.01},
    "RAdam": {"lr": 0.05, "betas": (0.9, 0.99), "weight_decay": 0.01},
}


@pytest.mark.parametrize("name", sorted(TORCHOPT_FN_ENTRIES))
def test_schedulers_drive_every_entry_of_a_fused_torchopt_fn_optimizer_without_recompiling(name):
    import torchopt_fn

    models, optimizers, compile_seconds = [], [], []
    for fused in (None, True):
        model = _model()
        optimizer = getattr(torchopt_fn, name)(model.parameters(), **TORCHOPT_FN_ENTRIES[name],
                                               fused=fused)
        optimizer.fused_backend = "aot_eager"
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        for step in range(4):
            _train(optimizer, model, range(step, step + 1))
            scheduler.step()
            for group in optimizer.param_groups:  # the other entries move too
                for key, value in group.items():
                    if isinstance(value, tuple):
                        group[key] = tuple(0.99 * item for item in value)
                    elif key not in ("lr", "params") and type(value) is float and value:
                        group[key] = 0.9 * value
            if fused:
                compile_seconds.append(optimizer.compile_seconds)
        models.append(model)
        optimizers.append(optimizer)
    # Compiled with the other entries as constants, once more when they first moved, and
    # not again.
    assert 0 < compile_seconds[0] < compile_seconds[1] and len(set(compile_seconds[1:])) == 1
    assert optimizers[1].param_groups[0]["lr"] == pytest.approx(
        TORCHOPT_FN_ENTRIES[name]["lr"] * 0.5 ** 4)
    _assert_same(tuple(models), tuple(optimizers), name,
                 **_FLOAT32_ENTRIES.get(name, {"rtol": 1e-5, "atol": 1e-6}))


@pytest.mark.parametrize("fused", [None, True])
@pytest.mark.parametrize(("name", "entry", "start", "end"), [
    ("SGD", "weight_decay", 0.01, 0.0), ("SGD", "momentum", 0.0, 0.9),
    ("Adam", "weight_decay", 0.0, 0.1), ("AdamW", "weight_decay", 0.01, 0.0)])
def test_a_torchopt_fn_optimizer_follows_torch_optim_when_an_entry_turns_to_or_from_zero(
        name, entry, start, end, fused):
    # A zero weight decay is no term of torchopt_fn's chain, and zero momentum no trace: the
    # group's state is planned anew and its entries carried over (before: a crash).
    import torchopt_fn

    arguments = {"lr": 0.05, **({"momentum": 0.9} if name == "SGD" else {}), entry: start}
    models = []
    for module in (torch.optim, torchopt_fn):
        model = _model()
        kwargs = {"fused": fused} if module is torchopt_fn else {}
        optimizer = getattr(module, name)(model.parameters(), **arguments, **kwargs)
        optimizer.fused_backend = None
        for step in range(4):
            if step == 2:
                optimizer.param_groups[0][entry] = end
            _train(optimizer, model, range(step, step + 1))
        models.append(model)
    testing.assert_leaves_close(list(models[1].parameters()), list(models[0].parameters()),
                                what=f"{name} {entry} {start} -> {end}", rtol=1e-5,
                                atol=FLOAT32_ATOL)


@pytest.mark.parametrize("fused", [None, True])
def test_a_torchopt_fn_checkpoint_saved_after_an_entry_turned_zero_resumes_exactly(fused):
    # Saved with weight_decay=0 (keys '0.trace'), loaded into the optimizer the script builds
    # with weight_decay=0.01 (keys '1.trace'): the state is loaded as the saved structure.
    import torchopt_fn

    def build(model):
        optimizer = torchopt_fn.SGD(model.parameters(), lr=0.05, momentum=0.9,
                                    weight_decay=0.01, fused=fused)
        optimizer.fused_backend = None
        return optimizer

    model = _model()
    optimizer = build(model)
    _train(optimizer, model, range(2))
    optimizer.param_groups[0]["weight_decay"] = 0.0
    _train(optimizer, model, range(2, 3))
    saved = pickle.loads(pickle.dumps((model.state_dict(), optimizer.state_dict())))
    assert "0.trace" in saved[1]["state"][0]
    resumed_model = _model()
    resumed_model.load_state_dict(saved[0])
    resumed = build(resumed_model)
    resumed.load_state_dict(saved[1])
    for continuing, run in ((optimizer, model), (resumed, resumed_model)):
        _train(continuing, run, range(3, 5))
    _assert_same((model, resumed_model), (optimizer, resumed), "resumed", rtol=0, atol=0)


def test_a_fused_torchopt_fn_optimizer_follows_its_scheduler_after_the_model_changes_dtype():
    import torchopt_fn

    models, optimizers = [], []
    for fused in (None, True):
        model = _model()
        optimizer = torchopt_fn.SGD(model.parameters(), lr=0.1, fused=fused)
        optimizer.fused_backend = None
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        for step in range(3):
            if step == 1:
                model.double()  # a new learning-rate tensor, in float64
            _train(optimizer, model, range(step, step + 1))
            scheduler.step()
        models.append(model)
        optimizers.append(optimizer)
    _assert_same(tuple(models), tuple(optimizers), "SGD, float32 then float64")


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("fused", [None, True])
@pytest.mark.parametrize("make", ["torchopt_fn.SGD", "TorchOptimizer(chain(trace, scale))"])
def test_momentum_follows_torch_optim_after_the_model_changes_dtype(make, fused, nesterov):
    # The trace, float32 from the first step, meets float64 gradients: in place it is written
    # into its buffer, never returned as the update the next transformation scales in place
    # (before: the stored trace became -lr times itself, 0.36 off after three steps).
    import torchopt_fn

    models = []
    for build in ("torch.optim", make):
        model = _model()
        if build == "torch.optim":
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9,
                                        nesterov=nesterov)
        elif build == "torchopt_fn.SGD":
            optimizer = torchopt_fn.SGD(model.parameters(), lr=0.1, momentum=0.9,
                                        nesterov=nesterov, fused=fused)
        else:
            tx = optax.chain(optax.trace(0.9, nesterov=nesterov), optax.scale(-0.1))
            optimizer = optax.TorchOptimizer(model.parameters(), tx, inplace=True,
                                             fused=fused, fused_backend=None)
        optimizer.fused_backend = None
        for step in range(4):
            if step == 1:
                model.double()
            _train(optimizer, model, range(step, step + 1))
        models.append(model)
    testing.assert_leaves_close(list(models[1].parameters()), list(models[0].parameters()),
                                what=f"{make}, fused={fused}, nesterov={nesterov}",
                                rtol=1e-6, atol=1e-7)  # the first step ran in float32


def test_accelerate_prepares_and_steps_a_fused_optimizer_like_the_unfused_one(tmp_path):
    accelerate = pytest.importorskip("accelerate")
    models, optimizers = [], []
    for fused in (None, True):
        accelerator = accelerate.Accelerator(cpu=TEST_DEVICE.type == "cpu")
        model = _model()
        tx = optax.inject_hyperparams(optax.adamw)(learning_rate=0.05)
        optimizer = optax.TorchOptimizer(model.parameters(), tx, fused=fused,
                                         fused_backend=None)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
        for step in range(STEPS):
            x, y = _batch(step)
            optimizer.zero_grad()
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            accelerator.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
            scheduler.step()
        accelerator.save_state(tmp_path / f"fused={fused}")
        models.append(model)
        optimizers.append(optimizer.optimizer)
    assert type(optimizers[1]._fused[0]).__name__ == "FusedGroup"
    _assert_same(tuple(models), tuple(optimizers), "Accelerate")
    saved = torch.load(tmp_path / "fused=True" / "optimizer.bin", weights_only=True)
    assert saved["state"].keys() == optimizers[0].state_dict()["state"].keys()


def test_a_group_added_later_and_a_dtype_change_are_packed_too():
    (model, plain), (fused_model, fused) = _pair(lambda: optax.adam(0.05))
    for m, optimizer in ((model, plain), (fused_model, fused)):
        _train(optimizer, m, range(1))
        extra = torch.nn.Linear(2, 2)
        torch.nn.init.constant_(extra.weight, 0.5)
        torch.nn.init.constant_(extra.bias, -0.1)
        m.append(extra)
        optimizer.add_param_group({"params": list(extra.parameters())})
        _train(optimizer, m, range(1, 3))
    assert len(fused._fused) == 2 and all(type(g).__name__ == "FusedGroup" for g in fused._fused)
    _assert_same((model, fused_model), (plain, fused), "an added group")
    for m, optimizer in ((model, plain), (fused_model, fused)):
        m.to(torch.float64)  # new storage for every parameter: packed anew
        _train(optimizer, m, range(3, 5))
    assert fused._fused[0].engine.params[0].dtype == torch.float64
    # Unfused, Adam's moments stay float32 (torch.optim's too); fused, they are packed anew
    # in float64: float32 rounding apart.
    _assert_same((model, fused_model), (plain, fused), "after model.to(float64)", rtol=1e-6,
                 atol=1e-7)


def test_a_compiled_step_runs_the_fused_step_eagerly_with_the_same_numbers():
    (model, plain), (fused_model, fused) = _pair(
        lambda: optax.inject_hyperparams(optax.adam)(learning_rate=0.05))
    compiled = torch.compile(fused.step, backend="eager")
    for step in range(STEPS):
        for m, optimizer, run in ((model, plain, plain.step), (fused_model, fused, compiled)):
            x, y = _batch(step)
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(m(x), y).backward()
            run()
    assert type(fused._fused[0]).__name__ == "FusedGroup"
    _assert_same((model, fused_model), (plain, fused), "torch.compile(step)")


def test_a_sparse_gradient_is_refused_by_name_and_changes_nothing():
    embedding = torch.nn.Embedding(10, 3, sparse=True)
    optimizer = optax.TorchOptimizer(embedding.named_parameters(), optax.sgd(0.1, momentum=0.9),
                                     fused=True, fused_backend=None)
    embedding(torch.tensor([1, 2])).sum().backward()
    before = embedding.weight.detach().clone()
    with pytest.raises(RuntimeError, match=r"does not support sparse gradients \('weight'"):
        optimizer.step()
    assert torch.equal(embedding.weight, before)


def test_a_parameter_reshaped_in_place_gets_a_clear_error_about_its_gradient():
    weight = torch.nn.Parameter(torch.arange(6.0))
    optimizer = optax.TorchOptimizer([weight], optax.sgd(0.1), fused=True, fused_backend=None)
    weight.grad = torch.ones(6)
    optimizer.step()
    weight.data = weight.data.view(2, 3)  # the same memory: the group is not packed anew
    weight.grad = torch.ones(2, 3)
    with pytest.raises(RuntimeError, match=r"A gradient has shape \(2, 3\), its parameter \(6,\)"):
        optimizer.step()
