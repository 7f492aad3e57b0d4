"""A real-world composition of combinators matches Optax over 20 steps.

MultiSteps(chain(clip_by_global_norm, inject_hyperparams(adamw)(warmup-cosine learning rate,
weight decay with a mask function)), every_k_schedule=2).
"""

import jax
import optax
import pytest
import torch

import optax_compat as ox
from optax_compat._runtime import tree_math
from optax_compat.testing import compare_with_optax, make_tree
from tests.optax_compat.combinator_cases import jitted


def composed(lib, tree_map):
    """The configuration, built from ``lib`` (optax or optax_compat)."""

    def decay_mask_fn(params):
        return tree_map(lambda p: p.ndim > 1, params)

    schedule = lib.warmup_cosine_decay_schedule(init_value=0.0, peak_value=1e-2,
                                                warmup_steps=2, decay_steps=8, end_value=1e-4)
    # The mask is a function, so it must be declared static: inject_hyperparams would
    # otherwise take it for a schedule (in Optax as here).
    adamw = lib.inject_hyperparams(lib.adamw, static_args="mask")(
        learning_rate=schedule, weight_decay=0.05, mask=decay_mask_fn)
    return lib.MultiSteps(lib.chain(lib.clip_by_global_norm(1.0), adamw), every_k_schedule=2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_composed_configuration_matches_optax_over_20_steps(dtype):
    ours = composed(ox, tree_math.tree_map)
    grads = [make_tree(dtype, seed=step + 1, scale=0.5 + step % 3) for step in range(20)]
    ours_state, _ = compare_with_optax(
        ours, lambda: jitted(composed(optax, jax.tree.map).gradient_transformation()), dtype,
        steps=20, grads=grads)
    assert int(ours_state.gradient_step) == 10
    inject_state = ours_state.inner_opt_state[1]
    assert int(inject_state.count) == 10
    assert set(inject_state.hyperparams) >= {"learning_rate", "weight_decay", "b1", "b2"}
    assert "mask" not in inject_state.hyperparams
