"""momo and momo_adam against real Optax."""

import optax
import pytest
import torch

from optax_compat.contrib import _momo
from optax_compat.testing import compare_with_optax, jit_optax, make_tree

DTYPES = [torch.float32, torch.float64]


def _losses(dtype):
    return lambda step: {"value": torch.tensor(3.0 / (step + 1) + 0.5, dtype=dtype)}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kwargs", [
    {},
    {"learning_rate": 0.1, "beta": 0.8, "weight_decay": 0.1},
    {"learning_rate": 0.5, "lower_bound": 0.3, "adapt_lower_bound": True},
    {"learning_rate": 0.5, "weight_decay": 0.05, "adapt_lower_bound": True},
], ids=["default", "decay", "adapt", "adapt_decay"])
def test_momo_matches_optax(dtype, kwargs):
    compare_with_optax(_momo.momo(**kwargs), lambda: jit_optax(optax.contrib.momo(**kwargs)), dtype,
                       steps=6, extra_args=_losses(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kwargs", [
    {},
    {"learning_rate": 0.1, "b1": 0.8, "b2": 0.9, "weight_decay": 0.1},
    {"learning_rate": 0.5, "lower_bound": 0.3, "adapt_lower_bound": True},
    {"learning_rate": 0.5, "eps": 1e-3, "weight_decay": 0.05, "adapt_lower_bound": True},
], ids=["default", "decay", "adapt", "adapt_decay"])
def test_momo_adam_matches_optax(dtype, kwargs):
    compare_with_optax(_momo.momo_adam(**kwargs),
                       lambda: jit_optax(optax.contrib.momo_adam(**kwargs)),
                       dtype, steps=6, extra_args=_losses(dtype))


@pytest.mark.parametrize("name", ["momo", "momo_adam"])
def test_momo_with_schedule_matches_optax(name):
    import optax_compat as ox

    ours = getattr(_momo, name)(ox.linear_schedule(0.5, 0.05, 4), weight_decay=0.1)
    compare_with_optax(ours, lambda: getattr(optax.contrib, name)(
        optax.linear_schedule(0.5, 0.05, 4), weight_decay=0.1),
        torch.float32, steps=5, extra_args=_losses(torch.float32))


@pytest.mark.parametrize("name", ["momo", "momo_adam"])
def test_momo_is_pure_and_needs_value_and_params(name):
    tx = getattr(_momo, name)()
    params, grads = make_tree(), make_tree(seed=1)
    copies = [torch.clone(x) for x in (params["layer"]["w"], grads["layer"]["w"])]
    state = tx.init(params)
    tx.update(grads, state, params, value=torch.tensor(1.0))
    assert torch.equal(params["layer"]["w"], copies[0])
    assert torch.equal(grads["layer"]["w"], copies[1])
    assert int(state.count) == 0 and state.count.dtype == torch.int32
    with pytest.raises(ValueError, match="loss value"):
        tx.update(grads, state, params, value=None)
    with pytest.raises(ValueError, match="params"):
        tx.update(grads, state, None, value=torch.tensor(1.0))


def test_momo_first_step_is_the_polyak_step():
    # f(p) = |p|^2 with lower bound 0: the first step is p - f / |g|^2 * g = p / 2.
    params = torch.tensor([1.0, 2.0, 3.0])
    tx = _momo.momo()
    updates, _ = tx.update(2 * params, tx.init(params), params, value=torch.sum(params ** 2))
    torch.testing.assert_close(params + updates, params / 2)
