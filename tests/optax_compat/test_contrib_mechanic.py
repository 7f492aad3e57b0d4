"""mechanize against real Optax."""

import optax
import pytest
import torch

import optax_compat as ox
from optax_compat.contrib import _mechanic
from optax_compat.testing import RTOL, assert_leaves_close, compare_with_optax, jit_optax, make_tree


@pytest.mark.parametrize(("inner", "kwargs", "dtype"), [
    ("sgd", {}, torch.float32),
    ("sgd", {"weight_decay": 0.0, "num_betas": 3}, torch.float64),
    ("adam", {"eps": 1e-4, "s_init": 1e-3}, torch.float32),
    ("adam", {"weight_decay": 0.1, "s_init": 1e-2}, torch.float64),
], ids=["sgd", "sgd_no_decay_3_betas", "adam_eps_s_init", "adam_decay"])
def test_mechanize_matches_optax(inner, kwargs, dtype):
    ours = _mechanic.mechanize(getattr(ox, inner)(1.0), **kwargs)
    state, theirs = compare_with_optax(
        ours, lambda: jit_optax(optax.contrib.mechanize(getattr(optax, inner)(1.0), **kwargs)),
        dtype, steps=6)
    assert state.count.dtype == torch.int32 and int(state.count) == 6
    assert state.s.shape == (kwargs.get("num_betas", 6),)
    # The per-beta statistics are tiny: compare them relatively, without the absolute floor.
    for ours_field, theirs_field in zip(state[1:6], theirs[1:6]):
        assert_leaves_close(ours_field, theirs_field, atol=0.0,
                            rtol={d: 10 * rtol for d, rtol in RTOL.items()})
    assert not torch.equal(state.s, torch.full_like(state.s, kwargs.get("s_init", 1e-6)))


def test_mechanize_starts_from_the_params_of_the_first_update():
    tx = _mechanic.mechanize(ox.sgd(1.0))
    state = tx.init(make_tree(seed=5))
    params = make_tree(seed=6)
    _, state = tx.update(make_tree(seed=1), state, params)
    torch.testing.assert_close(state.x0, params)


def test_mechanize_is_pure_and_needs_params():
    tx = _mechanic.mechanize(ox.adam(1.0))
    params, grads = make_tree(), make_tree(seed=1)
    state = tx.init(params)
    assert state.x0["layer"]["w"].data_ptr() != params["layer"]["w"].data_ptr()
    copies = [torch.clone(params["layer"]["w"]), torch.clone(grads["layer"]["w"])]
    tx.update(grads, state, params)
    assert torch.equal(params["layer"]["w"], copies[0])
    assert torch.equal(grads["layer"]["w"], copies[1])
    with pytest.raises(ValueError, match="params"):
        tx.update(grads, state)
