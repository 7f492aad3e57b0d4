"""Transformations under ``torch.func.vmap``, as JAX code runs ``jax.vmap(tx.update)``.

``torch._foreach_*`` kernels have no batching rule; under ``vmap`` the tree-math layer runs each
op leaf by leaf instead. A vmapped update over stacked leaves must give, stack entry by stack
entry, the update of the unstacked leaves (which the other test files compare with Optax).
"""

from __future__ import annotations

import warnings

import pytest
import torch

import optax_compat as optax
from optax_compat import _runtime as bb
from optax_compat import testing
from optax_compat._runtime import tree_math as tm

BATCH = 3
STEPS = 3

ALIASES = {
    "sgd_nesterov": lambda: optax.sgd(0.1, momentum=0.9, nesterov=True),
    "adam": lambda: optax.adam(0.1),
    "adamw": lambda: optax.adamw(0.1, weight_decay=0.1),
    "nadamw": lambda: optax.nadamw(0.1),
    "amsgrad": lambda: optax.amsgrad(0.1),
    "adabelief": lambda: optax.adabelief(0.1),
    "adadelta": lambda: optax.adadelta(0.1),
    "adagrad": lambda: optax.adagrad(0.1),
    "adamax": lambda: optax.adamax(0.1),
    "adan": lambda: optax.adan(0.1),
    "lion": lambda: optax.lion(0.1),
    "radam": lambda: optax.radam(0.1),
    "rmsprop": lambda: optax.rmsprop(0.1, centered=True, momentum=0.9),
    "rprop": lambda: optax.rprop(0.1),
    "yogi": lambda: optax.yogi(0.1),
    "sign_sgd": lambda: optax.sign_sgd(0.1),
    "signum": lambda: optax.signum(0.1),
    "optimistic_adam": lambda: optax.optimistic_adam(0.1),
    "adafactor": lambda: optax.adafactor(0.1, min_dim_size_to_factor=2, momentum=0.9),
    "lamb": lambda: optax.lamb(0.1, weight_decay=0.01),
    "lars": lambda: optax.lars(0.1),
    "novograd": lambda: optax.novograd(0.1),
    "sm3": lambda: optax.sm3(0.1),
    "fromage": lambda: optax.fromage(0.1),
    "acprop": lambda: optax.contrib.acprop(0.1),
    "ademamix": lambda: optax.contrib.ademamix(0.1),
    "adopt": lambda: optax.contrib.adopt(0.1),
    "schedule_free_adamw": lambda: optax.contrib.schedule_free_adamw(0.1),
    "inject_adam_schedule": lambda: optax.inject_hyperparams(optax.adam)(
        learning_rate=optax.schedules.linear_schedule(0.1, 0.01, 3)),
    "clip_block_rms_trace": lambda: optax.chain(optax.clip_by_block_rms(0.5),
                                                optax.trace(0.9), optax.scale(-0.1)),
}


def _stacks(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A stack of matrices and one of vectors, each of ``BATCH`` leaves."""
    tree = testing.random_tree({"w": (BATCH, 3, 4), "b": (BATCH, 4)}, seed=seed)
    return tree["w"], tree["b"]


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_vmapped_updates_equal_the_unstacked_leaves_updates(name):
    tx = ALIASES[name]()
    params = _stacks(0)
    state = torch.func.vmap(tx.init)(params)
    unstacked = [tuple(stack[i] for stack in params) for i in range(BATCH)]
    unstacked_states = [tx.init(leaves) for leaves in unstacked]

    def step(grads, state, params):
        updates, new_state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), new_state

    for seed in range(1, STEPS + 1):
        grads = _stacks(seed)
        with warnings.catch_warnings():  # no op may fall back to a loop over the batch
            warnings.filterwarnings("error", message="There is a performance drop")
            params, state = torch.func.vmap(step)(grads, state, params)
        for i in range(BATCH):
            leaves = tuple(stack[i] for stack in grads)
            unstacked[i], unstacked_states[i] = step(leaves, unstacked_states[i], unstacked[i])
            testing.assert_leaves_close([stack[i] for stack in params], unstacked[i],
                                        what=f"{name}, step {seed}, leaf {i}: params")
            testing.assert_leaves_close(tm.tree_map(lambda x, i=i: x[i], state),
                                        unstacked_states[i],
                                        what=f"{name}, step {seed}, leaf {i}: state")


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_the_aliases_here_run_stacked_in_fused_step(name):
    assert bb.why_not(ALIASES[name](), bb.STACKED) is None


def test_foreach_runs_leaf_by_leaf_under_vmap_only():
    xs = [torch.tensor([1.0, -2.0]), torch.tensor([[3.0]])]
    calls = []

    def record(x):
        calls.append(tm.is_batched([x]))
        tm.foreach("addcmul_", [x], [x], [x], 0.5)
        return x

    stacked = torch.func.vmap(record)(torch.stack([xs[0], -xs[0]]))
    assert calls == [True]
    assert stacked.tolist() == [[1.5, 0.0], [-0.5, 4.0]]
    tm.foreach("addcmul_", xs, xs, xs, value=0.5)  # the foreach kernel, outside vmap
    assert xs[0].tolist() == [1.5, 0.0]
    assert xs[1].tolist() == [[7.5]]
