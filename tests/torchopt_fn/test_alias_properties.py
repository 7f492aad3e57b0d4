"""Properties of the TorchOpt aliases on generated pytrees (optax_compat.testing strategies)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torchopt_fn as torchopt
from optax_compat._runtime import tree_math
from optax_compat.testing import assert_trees_all_close, check_pure
from optax_compat.testing.strategies import params_and_grads
from torchopt_fn.transform.utils import to_optax

ALIASES = {
    "sgd": lambda: torchopt.sgd(0.1, momentum=0.9, dampening=0.2, weight_decay=0.01),
    "adam": lambda: torchopt.adam(1e-2, weight_decay=0.01, maximize=True),
    "adamw": lambda: torchopt.adamw(1e-2),
    "adamax": lambda: torchopt.adamax(1e-2),
    "adadelta": lambda: torchopt.adadelta(1.0),
    "adagrad": lambda: torchopt.adagrad(0.1, lr_decay=0.1),
    "radam": lambda: torchopt.radam(1e-2),
    "rmsprop": lambda: torchopt.rmsprop(1e-2, centered=True, momentum=0.5),
}
TREES = params_and_grads(steps=3, min_value=-5.0, max_value=5.0)


@pytest.mark.parametrize("name", ALIASES)
@settings(max_examples=15)
@given(trees=TREES)
def test_pure_update_never_mutates_its_inputs(name, trees):
    params, grads = trees
    check_pure(to_optax(ALIASES[name]()), params, lambda step: grads[step], steps=3,
               extra_args={"inplace": False})


@pytest.mark.parametrize("name", ALIASES)
@settings(max_examples=15)
@given(trees=TREES, dtype=st.sampled_from([torch.float32, torch.float64]))
def test_inplace_update_gives_the_pure_numbers(name, trees, dtype):
    params, grads = tree_math.tree_map(lambda t: t.to(dtype), trees)
    tx = ALIASES[name]()
    pure_params, pure_state = params, tx.init(params)
    inplace_params = tree_math.tree_map(torch.clone, params)
    inplace_state = tx.init(inplace_params)
    for grad in grads:
        updates, pure_state = tx.update(grad, pure_state, params=pure_params, inplace=False)
        pure_params = torchopt.apply_updates(pure_params, updates, inplace=False)
        updates, inplace_state = tx.update(tree_math.tree_map(torch.clone, grad), inplace_state,
                                           params=inplace_params, inplace=True)
        torchopt.apply_updates(inplace_params, updates, inplace=True)
    assert_trees_all_close(inplace_params, pure_params,
                           rtol={torch.float32: 1e-6, torch.float64: 1e-13},
                           atol={torch.float32: 1e-6, torch.float64: 1e-13})
