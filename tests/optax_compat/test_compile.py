"""``torch.compile`` (default mode and ``fullgraph=True``, no graph break) and the meta device.

A representative subset runs here (graph capture with the ``eager`` backend, to stay fast);
``benchmarks/bench_compile.py`` compiles every alias with Inductor and reports the table.
"""

from __future__ import annotations

import warnings
from typing import Any

import optree
import pytest
import torch

import optax_compat as ox
from optax_compat.testing import check_compilable, make_tree

ALIASES = (
    "adabelief adadelta adafactor adagrad adam adamax adamaxw adamw adan amsgrad fromage lamb "
    "lars lion nadam nadamw noisy_sgd novograd optimistic_adam optimistic_adam_v2 "
    "optimistic_gradient_descent polyak_sgd radam rmsprop rprop sgd sign_sgd signum sm3 yogi"
).split()

COMPILED = {
    "adam": lambda: ox.adam(0.1),
    "chain": lambda: ox.chain(ox.clip_by_global_norm(1.0), ox.adamw(0.1)),
    "masked": lambda: ox.masked(ox.adam(0.1), lambda params: optree.tree_map(
        lambda p: p.ndim > 1, params, none_is_leaf=False)),
    # A mask or label tree that is a constant of the step, not a function of the params.
    "masked_tree": lambda: ox.masked(
        ox.adam(0.1), {"bias": False, "layer": True, "pair": (True, False), "empty": None}),
    # A mask function whose tree holds a dict of Python constants, built while tracing (optree
    # 0.20's metadata for such a dict broke Dynamo, hence optree<0.20).
    "masked_subdict": lambda: ox.adamw(0.1, mask=lambda params: {
        "bias": True, "layer": {"w": False, "b": False}, "pair": (True, True), "empty": None}),
    "partition": lambda: ox.partition(
        {"decay": ox.adamw(0.1), "plain": ox.sgd(0.1)},
        {"bias": "plain", "layer": "decay", "pair": ("decay", "plain"), "empty": None}),
    "muon": lambda: ox.contrib.muon(0.1),
    "lbfgs_without_linesearch": lambda: ox.lbfgs(0.1, linesearch=None),
    "inject_hyperparams": lambda: ox.inject_hyperparams(ox.adam)(
        learning_rate=ox.cosine_decay_schedule(0.1, 10)),
    "MultiSteps": lambda: ox.MultiSteps(ox.adam(0.1), 2),
    "apply_if_finite": lambda: ox.apply_if_finite(ox.adam(0.1), 3),
    "noisy_sgd": lambda: ox.noisy_sgd(0.1, key=3),
}


@pytest.mark.parametrize("name", sorted(COMPILED))
def test_update_compiles_without_graph_breaks(name: str) -> None:
    tx = COMPILED[name]()
    params = make_tree()
    check_compilable(tx, params, make_tree(seed=1), backend="eager")


@pytest.mark.parametrize("fullgraph", [False, True], ids=["default", "fullgraph"])
def test_full_training_step_compiles(fullgraph: bool) -> None:
    generator = torch.Generator().manual_seed(0)
    params = {"w": torch.randn(4, 3, generator=generator), "b": torch.zeros(3)}
    inputs, targets = torch.randn(8, 4, generator=generator), torch.randn(8, 3,
                                                                          generator=generator)
    tx = ox.adamw(0.1)

    def loss_fn(params: dict) -> torch.Tensor:
        return ((inputs @ params["w"] + params["b"] - targets) ** 2).mean()

    def step(params: dict, state: Any) -> Any:
        grads = torch.func.grad(loss_fn)(params)
        updates, state = tx.update(grads, state, params)
        return ox.apply_updates(params, updates), state

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=fullgraph, backend="eager")
    eager_params, eager_state = params, tx.init(params)
    compiled_params, compiled_state = params, tx.init(params)
    for _ in range(3):
        eager_params, eager_state = step(eager_params, eager_state)
        compiled_params, compiled_state = compiled(compiled_params, compiled_state)
    torch.testing.assert_close(compiled_params, eager_params, rtol=1e-6, atol=1e-7)
    assert int(compiled_state[0].count) == 3


@pytest.mark.parametrize("name", ALIASES)
def test_meta_device(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        tx = (ox.polyak_sgd(max_learning_rate=0.1) if name == "polyak_sgd"
              else ox.noisy_sgd(0.1, key=0) if name == "noisy_sgd"
              else getattr(ox, name)(0.1))
    params = {"w": torch.ones(4, 3, device="meta"), "b": torch.ones(3, device="meta")}
    extra = {"value": torch.tensor(1.0, device="meta")} if name == "polyak_sgd" else {}
    state = tx.init(params)
    for _ in range(2):
        updates, state = tx.update(params, state, params, **extra)
    assert all(u.device.type == "meta" for u in updates.values())
