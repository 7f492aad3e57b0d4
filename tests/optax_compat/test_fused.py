"""The in-place fused Adam/AdamW path gives the numbers of the pure aliases."""

from __future__ import annotations

from typing import Any

import optree
import pytest
import torch

import optax_compat
from optax_compat._src import fused
from optax_compat.testing import assert_leaves_close, make_tree

# The kernel computes the bias corrections in float64 where the pure alias (like Optax) uses
# float32; ``1 - 0.999 ** t`` then differs by up to ~1e-5 relative in float32 (see fused.py).
RTOL = {torch.float32: 1e-5, torch.float64: 1e-10}
ATOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def clone(tree: Any) -> Any:
    return optree.tree_map(torch.clone, tree, none_is_leaf=False)


def matrices_only(params: Any) -> Any:
    return optree.tree_map(lambda leaf: leaf.ndim >= 2, params, none_is_leaf=False)


def schedule() -> Any:
    return optax_compat.exponential_decay(init_value=0.1, transition_steps=2, decay_rate=0.5)


CASES = {
    "adam": lambda: ("adam", {"learning_rate": 0.1}),
    "adam_betas": lambda: ("adam", {"learning_rate": 0.01, "b1": 0.5, "b2": 0.9, "eps": 1e-3}),
    "adam_schedule": lambda: ("adam", {"learning_rate": schedule()}),
    "adam_tensor_lr": lambda: ("adam", {"learning_rate": torch.tensor(0.05)}),
    "adamw": lambda: ("adamw", {"learning_rate": 0.1, "weight_decay": 0.1}),
    "adamw_mask_tree": lambda: ("adamw", {
        "learning_rate": 0.1, "weight_decay": 0.1,
        "mask": {"bias": False, "layer": {"w": True, "b": False}, "pair": (True, True),
                 "empty": None}}),
    "adamw_mask_fn_schedules": lambda: ("adamw", {
        "learning_rate": schedule(), "weight_decay": schedule(), "mask": matrices_only}),
    "adamw_no_decay": lambda: ("adamw", {"learning_rate": 0.1, "weight_decay": 0.0}),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_same_numbers_as_pure_alias(case: str, dtype: torch.dtype) -> None:
    name, kwargs = CASES[case]()
    pure = getattr(optax_compat, name)(**kwargs)
    name, kwargs = CASES[case]()  # fresh schedules, so nothing is shared
    inplace = getattr(fused, name)(**kwargs)

    params = make_tree(dtype)
    pure_params, pure_state = params, pure.init(params)
    fused_params = clone(params)
    fused_state = inplace.init(fused_params)
    assert optree.tree_structure(fused_state, none_is_leaf=False) == optree.tree_structure(
        pure_state, none_is_leaf=False)
    for step in range(6):
        grads = make_tree(dtype, seed=step + 1)
        grads_copy = clone(grads)
        updates, pure_state = pure.update(grads, pure_state, pure_params)
        pure_params = optax_compat.apply_updates(pure_params, updates)
        leaves_before = optree.tree_leaves(fused_params, none_is_leaf=False)
        returned = inplace.step(fused_params, grads, fused_state)
        assert returned is fused_state
        assert all(a is b for a, b in zip(
            leaves_before, optree.tree_leaves(fused_params, none_is_leaf=False), strict=True))
        assert_leaves_close(grads, grads_copy, rtol=0, atol=0, what="grads must be untouched")
        assert_leaves_close(fused_params, pure_params, rtol=RTOL[dtype], atol=ATOL[dtype],
                            what=f"params {step}")
        assert_leaves_close(fused_state, pure_state, rtol=RTOL[dtype], atol=ATOL[dtype],
                            what=f"state {step}")


@pytest.mark.parametrize("kwargs", [{"nesterov": True}, {"eps_root": 1e-8},
                                    {"b1": torch.tensor(0.9)}, {"learning_rate": None}],
                         ids=["nesterov", "eps_root", "tensor_b1", "no_lr"])
def test_rejects_what_the_kernel_cannot_do(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        fused.adam(**{"learning_rate": 0.1, **kwargs})


def test_rejects_moments_of_another_dtype() -> None:
    optimizer = fused.adam(0.1, mu_dtype=torch.float64)
    params = {"w": torch.ones(3)}
    state = optimizer.init(params)
    with pytest.raises(ValueError, match="dtype"):
        optimizer.step(params, {"w": torch.ones(3)}, state)


def test_grads_tree_mismatch_names_the_path() -> None:
    optimizer = fused.adam(0.1)
    params = {"a": torch.ones(2), "b": torch.ones(3)}
    state = optimizer.init(params)
    with pytest.raises(ValueError, match="'c'"):
        optimizer.step(params, {"a": torch.ones(2), "c": torch.ones(3)}, state)
