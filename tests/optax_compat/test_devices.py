"""State is created on the device of the params, and stays there (the meta device stands in
for a GPU: a state leaf built on the CPU beside meta params shows as a CPU tensor)."""

from __future__ import annotations

from typing import Any

import optree
import pytest
import torch

import optax_compat as ox
import torchopt_fn
from optax_compat import testing
from optax_compat._runtime import tree_math as tm

COMBINATORS = {
    "inject_hyperparams": lambda: ox.inject_hyperparams(ox.adam)(learning_rate=0.1),
    "inject_hyperparams_schedule": lambda: ox.inject_hyperparams(ox.adam)(
        learning_rate=ox.cosine_decay_schedule(0.1, 10)),
    "MultiSteps": lambda: ox.MultiSteps(ox.adam(0.1), 2).gradient_transformation(),
    "MultiSteps_skip_not_finite": lambda: ox.MultiSteps(
        ox.adam(0.1), 2, should_skip_update_fn=ox.skip_not_finite).gradient_transformation(),
    "apply_if_finite": lambda: ox.apply_if_finite(ox.adam(0.1), 3),
    "conditionally_transform": lambda: ox.conditionally_transform(
        ox.adam(0.1), lambda step: step > 0),
    "conditionally_mask": lambda: ox.conditionally_mask(ox.adam(0.1), lambda step: step > 0),
}


def off_device(tree: Any, device: str) -> list[tuple[Any, torch.device]]:
    paths, leaves, _ = optree.tree_flatten_with_path(tree, none_is_leaf=tm.NONE_IS_LEAF,
                                                     namespace=tm.NAMESPACE)
    return [(path, leaf.device) for path, leaf in zip(paths, leaves, strict=True)
            if isinstance(leaf, torch.Tensor) and leaf.device.type != device]


@pytest.mark.parametrize("name", sorted(COMBINATORS))
def test_combinator_state_is_created_and_kept_on_the_params_device(name: str) -> None:
    tx = COMBINATORS[name]()
    params = {"w": torch.ones(4, 3, device="meta"), "b": torch.ones(3, device="meta")}
    state = tx.init(params)
    assert off_device(state, "meta") == []
    for _ in range(2):
        updates, state = tx.update(params, state, params)
        assert off_device((updates, state), "meta") == []


ALIASES = ("adabelief", "adadelta", "adafactor", "adagrad", "adam", "adamax", "adamaxw", "adamw",
           "adan", "amsgrad", "fromage", "lamb", "lars", "lion", "nadam", "nadamw", "novograd",
           "optimistic_adam_v2", "optimistic_gradient_descent", "polyak_sgd", "radam",
           "rmsprop", "rprop", "sgd", "sign_sgd", "signum", "sm3", "yogi")
ELSEWHERE = {
    **{name: (lambda name=name: getattr(ox, name)(0.1)) for name in ALIASES},
    "noisy_sgd": lambda: ox.noisy_sgd(0.1, key=0),  # the same noise in both runs
    "sgd_momentum": lambda: ox.sgd(0.1, momentum=0.9),
    "muon": lambda: ox.contrib.muon(0.1),
    **COMBINATORS,
    "quantize_state": lambda: ox.memory.quantize_state(ox.adamw(0.1), min_size=4),
    "cast_state": lambda: ox.memory.cast_state(ox.adamw(0.1), torch.bfloat16),
    "kahan_summation": lambda: ox.chain(ox.adamw(0.1), ox.memory.kahan_summation()),
}


@pytest.mark.parametrize("name", sorted(ELSEWHERE))
def test_state_and_updates_stay_on_the_params_device_whatever_the_default_device(name):
    """Under ``torch.set_default_device`` (here ``with torch.device("meta")``) the state and the
    updates stay on the params' device, with the numbers of a step under the params' own
    default, as torch.optim's do. ``torch.as_tensor(count)`` there copied the count to the
    default device (and failed to copy it out of ``meta`` on CUDA); ``torch.tensor(x)``
    created scalars there."""
    with torch.device("cpu"):  # whatever the test device
        params = {"w": torch.linspace(-1, 1, 12).reshape(4, 3), "b": torch.full((3,), 0.5)}
        extra = {"value": torch.tensor(1.0)} if name == "polyak_sgd" else {}
    results = []
    for default in ("meta", "cpu"):
        tx = ELSEWHERE[name]()
        with torch.device(default):
            state = tx.init(params)
            for _ in range(2):
                updates, state = tx.update(params, state, params, **extra)
        assert off_device((updates, state), "cpu") == [], default
        results.append(updates)
    testing.assert_trees_all_close(*results, rtol=0, atol=0)


def _tiny_model() -> torch.nn.Module:
    with torch.device("cpu"), torch.random.fork_rng():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))


OPTIMIZERS = {
    "TorchOptimizer sgd": lambda ps: ox.TorchOptimizer(ps, ox.sgd(0.1, momentum=0.9)),
    "TorchOptimizer adamw": lambda ps: ox.TorchOptimizer(ps, ox.adamw(0.1)),
    "TorchOptimizer adamw fused": lambda ps: ox.TorchOptimizer(ps, ox.adamw(0.1), fused=True,
                                                               fused_backend=None),
    "TorchOptimizer 8-bit": lambda ps: ox.TorchOptimizer(
        ps, ox.memory.quantize_state(ox.adamw(0.1), min_size=4)),
    "torchopt_fn Adam": lambda ps: torchopt_fn.Adam(ps, lr=0.1),
    "torchopt_fn Adam fused": lambda ps: torchopt_fn.Adam(ps, lr=0.1, fused=True),
    "torchopt_fn SGD": lambda ps: torchopt_fn.SGD(ps, lr=0.1, momentum=0.9),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_steps_keep_to_the_params_device_whatever_the_default_device(name):
    """``step()`` under another default device (as ``torch.set_default_device`` sets) keeps
    the state on the parameters' device and gives the numbers of a step without it, as
    torch.optim's optimizers do."""
    models = [_tiny_model(), _tiny_model()]
    optimizers = [OPTIMIZERS[name](model.parameters()) for model in models]
    with torch.device("cpu"):
        x = torch.linspace(-1, 1, 8).reshape(2, 4)
    for _ in range(3):
        for model, optimizer, default in zip(models, optimizers, ("meta", "cpu"), strict=True):
            optimizer.zero_grad()
            model(x).sum().backward()
            with torch.device(default):
                optimizer.step()
    assert off_device([dict(state) for state in optimizers[0].state.values()], "cpu") == []
    testing.assert_trees_all_close(list(models[0].parameters()), list(models[1].parameters()),
                                   rtol=0, atol=0)
