"""State is created on the device of the params, and stays there (the meta device stands in
for a GPU: a state leaf built on the CPU beside meta params shows as a CPU tensor)."""

from __future__ import annotations

from typing import Any

import optree
import pytest
import torch

import optax_compat as ox
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
