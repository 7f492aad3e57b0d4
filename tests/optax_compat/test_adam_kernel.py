"""The pure ``adam`` alias on the fused kernel: taken when it applies, same numbers as the chain."""

from __future__ import annotations

from typing import Any

import optree
import pytest
import torch

import optax_compat
from optax_compat._src import adam_kernel
from optax_compat.testing import assert_leaves_close, make_tree
from optax_compat.transforms import chain


def leaves(tree: Any) -> list[torch.Tensor]:
    return optree.tree_leaves(tree, none_is_leaf=False)


def plain_chain(learning_rate: Any, weight_decay: float | None = None, **kwargs: Any) -> Any:
    """``adam`` (or with ``weight_decay``, ``adamw``) evaluated transform by transform."""
    decay = [] if weight_decay is None else [optax_compat.add_decayed_weights(weight_decay)]
    return chain(optax_compat.scale_by_adam(**kwargs), *decay,
                 optax_compat.scale_by_learning_rate(learning_rate))


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    kernel = torch._fused_adam_

    def counting(*args: Any, **kwargs: Any) -> None:
        calls.append(len(args[0]))
        kernel(*args, **kwargs)

    monkeypatch.setattr(torch, "_fused_adam_", counting)
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("schedule", [False, True], ids=["constant", "schedule"])
@pytest.mark.parametrize("weight_decay", [None, 0.0, 0.05], ids=["adam", "adamw0", "adamw"])
def test_same_numbers_as_the_chain_over_many_steps(dtype: torch.dtype, schedule: bool,
                                                   weight_decay: float | None,
                                                   kernel_calls: list[int]) -> None:
    def learning_rate() -> Any:
        return (optax_compat.exponential_decay(0.1, 3, 0.7) if schedule else 0.1)

    hyperparameters = {"b1": 0.8, "b2": 0.99, "eps": 1e-6}
    fast = (optax_compat.adam(learning_rate(), **hyperparameters) if weight_decay is None else
            optax_compat.adamw(learning_rate(), weight_decay=weight_decay, **hyperparameters))
    slow = plain_chain(learning_rate(), weight_decay, **hyperparameters)
    params = make_tree(dtype)
    fast_state, slow_state = fast.init(params), slow.init(params)
    for step in range(40):
        grads = make_tree(dtype, seed=step + 1, scale=0.1 + step % 3)
        grads_copy, state_copy = optree.tree_map(torch.clone, (grads, fast_state))
        fast_updates, fast_state_new = fast.update(grads, fast_state, params)
        assert_leaves_close((grads, fast_state), (grads_copy, state_copy), rtol=0, atol=0,
                            what="inputs must be untouched")
        slow_updates, slow_state = slow.update(grads, slow_state, params)
        fast_state = fast_state_new
        assert_leaves_close(fast_updates, slow_updates, what=f"updates {step}")
        assert_leaves_close(fast_state, slow_state, what=f"state {step}")
        assert type(fast_state[1]) is type(slow_state[1])
        assert fast_state[0].count.dtype == torch.int32
        params = optax_compat.apply_updates(params, fast_updates)
    assert len(kernel_calls) == 40 and kernel_calls[0] == len(leaves(params))


def test_chain_runs_when_the_kernel_does_not_apply(kernel_calls: list[int]) -> None:
    params = make_tree(torch.float64)
    grads = make_tree(torch.float64, seed=1)
    learning_rate = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    for tx in (optax_compat.adam(learning_rate),  # autograd must see the learning rate
               optax_compat.adam(0.1, eps_root=1e-8),
               optax_compat.adam(0.1, nesterov=True),
               optax_compat.adam(0.1, mu_dtype=torch.float32),
               optax_compat.adamw(0.1, mask=lambda params: True),
               optax_compat.adamw(0.1, weight_decay=lambda count: 0.1)):
        tx.update(grads, tx.init(params), params)
    tx = optax_compat.adam(0.1)
    tx.update(grads, tx.init(params), params, inplace=True)
    mixed = {"a": torch.ones(2), "b": torch.ones(2, dtype=torch.float64)}
    tx.update(mixed, tx.init(mixed), mixed)
    assert kernel_calls == []


def test_applies_only_to_plain_hyperparameters() -> None:
    assert adam_kernel.applies(0.9, 0.999, 1e-8, 0.0, None, False)
    assert not adam_kernel.applies(torch.tensor(0.9), 0.999, 1e-8, 0.0, None, False)
    assert not adam_kernel.applies(0.9, 0.999, 1e-8, 1e-8, None, False)
    assert not adam_kernel.applies(0.9, 0.999, 1e-8, 0.0, torch.float16, False)
    assert not adam_kernel.applies(0.9, 0.999, 1e-8, 0.0, None, True)
    assert adam_kernel.applies(0.9, 0.999, 1e-8, 0.0, None, False, weight_decay=0.1)
    assert not adam_kernel.applies(0.9, 0.999, 1e-8, 0.0, None, False, weight_decay=0.1,
                                   mask={"a": True})


def test_adamw_without_params_raises_as_the_chain_does() -> None:
    tx = optax_compat.adamw(0.1)
    params = {"a": torch.ones(2)}
    with pytest.raises(ValueError, match="params"):
        tx.update(params, tx.init(params))


def test_mismatched_state_names_the_path() -> None:
    tx = optax_compat.adam(0.1)
    state = tx.init({"a": torch.ones(2), "b": torch.ones(3)})
    with pytest.raises(ValueError, match="'c'"):
        tx.update({"a": torch.ones(2), "c": torch.ones(3)}, state)
