"""SGD with momentum's whole in-place step, against real Optax."""

from __future__ import annotations

import pytest
import torch

import optax_compat
from optax_compat import testing


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_whole_step_gives_optaxs_params_and_state(nesterov):
    import optax

    params = testing.make_tree()
    tx = optax_compat.sgd(0.1, momentum=0.9, nesterov=nesterov)
    step = optax_compat.inplace_step(tx)
    assert step is not None
    state = tx.init(params)
    with testing.jax_precision(torch.float32):
        theirs_tx = testing.jit_optax(optax.sgd(0.1, momentum=0.9, nesterov=nesterov))
        theirs_params = testing.to_jax(params)
        theirs_state = theirs_tx.init(theirs_params)
        for seed in (1, 2, 3):
            grads = testing.make_tree(seed=seed)
            returned = step(params, grads, state)
            assert returned is state  # its buffers were written in place
            updates, theirs_state = theirs_tx.update(testing.to_jax(grads), theirs_state,
                                                     theirs_params)
            theirs_params = optax.apply_updates(theirs_params, updates)
            testing.assert_leaves_close(params, theirs_params, what=f"step {seed}: params")
            testing.assert_leaves_close(state, testing.to_torch(theirs_state),
                                        what=f"step {seed}: state")


@pytest.mark.parametrize("tx", [
    optax_compat.sgd(0.1),
    optax_compat.sgd(optax_compat.linear_schedule(0.1, 0.01, 5), momentum=0.9),
    optax_compat.sgd(0.1, momentum=0.9, accumulator_dtype=torch.bfloat16),
], ids=["no_momentum", "schedule", "accumulator_dtype"])
def test_sgd_without_a_whole_step_where_it_would_differ(tx):
    assert optax_compat.inplace_step(tx) is None


def test_a_gradient_of_another_dtype_takes_the_update():
    params = {"w": torch.ones(3)}
    tx = optax_compat.sgd(0.1, momentum=0.9)
    state = optax_compat.inplace_step(tx)(params, {"w": torch.ones(3, dtype=torch.float64)},
                                          tx.init(params))
    assert params["w"].dtype == torch.float32
    torch.testing.assert_close(params["w"], torch.full((3,), 0.9))
    torch.testing.assert_close(state[0].trace["w"], torch.ones(3, dtype=torch.float64))
