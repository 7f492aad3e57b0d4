"""differentially_private_aggregate and dpsgd: exact clipping against Optax, noise statistically."""

import warnings

import optax
import optree
import pytest
import torch

from optax_compat.contrib import _privacy
from optax_compat.testing import check_compilable, compare_with_optax, jit_optax, make_tree

BATCH = 4


def _per_example_grads(dtype, step):
    # Examples of very different norms, so that some are clipped and some are not.
    examples = [make_tree(dtype, seed=10 * step + i, scale=0.2 + i) for i in range(BATCH)]
    return optree.tree_map(lambda *xs: torch.stack(xs), *examples, none_is_leaf=False)


def _optax_dpsgd(**kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return optax.contrib.dpsgd(**kwargs)


@pytest.mark.parametrize(("kwargs", "dtype"), [
    ({"learning_rate": 0.1, "l2_norm_clip": 1.0}, torch.float32),
    ({"learning_rate": 0.1, "l2_norm_clip": 0.5, "momentum": 0.5, "nesterov": True},
     torch.float64),
], ids=["plain", "nesterov_momentum"])
def test_dpsgd_without_noise_matches_optax(kwargs, dtype):
    grads = [_per_example_grads(dtype, step) for step in range(4)]
    compare_with_optax(_privacy.dpsgd(noise_multiplier=0.0, seed=3, **kwargs),
                       lambda: jit_optax(_optax_dpsgd(noise_multiplier=0.0, seed=3, **kwargs)),
                       dtype, steps=4, grads=grads)


def test_aggregate_without_noise_matches_optax():
    dtype = torch.float64
    grads = [_per_example_grads(dtype, step) for step in range(2)]
    compare_with_optax(
        _privacy.differentially_private_aggregate(1.5, 0.0, key=0),
        lambda: jit_optax(optax.contrib.differentially_private_aggregate(1.5, 0.0, key=0)),
        dtype, steps=2, grads=grads, apply=False)


def test_noise_has_the_dp_standard_deviation_and_a_fresh_stream_each_step():
    clip, multiplier, batch = 2.0, 1.5, 4
    tx = _privacy.differentially_private_aggregate(clip, multiplier, key=7)
    grads = {"a": torch.zeros(batch, 20000), "b": torch.zeros(batch, 100, 100)}
    state = tx.init(grads)
    first, state = tx.update(grads, state)
    second, _ = tx.update(grads, state)
    expected_std = clip * multiplier / batch
    for noise in (first["a"], first["b"], second["a"]):
        assert abs(float(noise.mean())) < 4 * expected_std / noise.numel() ** 0.5
        assert float(noise.std()) == pytest.approx(expected_std, rel=0.03)
    assert not torch.equal(first["a"], second["a"])
    # Reproducible from the key.
    again, _ = tx.update(grads, tx.init(grads))
    assert torch.equal(again["b"], first["b"])


def test_clipping_bounds_each_example_and_averages():
    tx = _privacy.differentially_private_aggregate(1.0, 0.0, key=0)
    # Example 0 has norm 5 (clipped to 1), example 1 has norm 0.5 (kept).
    grads = {"x": torch.tensor([[3.0, 4.0], [0.3, 0.4]])}
    updates, _ = tx.update(grads, tx.init(grads))
    torch.testing.assert_close(updates["x"], (torch.tensor([0.6, 0.8]) + grads["x"][1]) / 2)
    assert torch.equal(grads["x"], torch.tensor([[3.0, 4.0], [0.3, 0.4]]))


def test_aggregated_gradients_are_rejected():
    tx = _privacy.differentially_private_aggregate(0.1, 1.1, key=2021)
    with pytest.raises(ValueError, match="batch dimension"):
        tx.update(make_tree(), tx.init(make_tree()))


def test_key_arguments():
    with pytest.warns(DeprecationWarning):
        _privacy.differentially_private_aggregate(1.0, 1.0, seed=1)
    with pytest.raises(ValueError, match="Only one"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        _privacy.differentially_private_aggregate(1.0, 1.0, key=1, seed=1)
    with pytest.warns(UserWarning, match="key"):
        _privacy.differentially_private_aggregate(1.0, 1.0)
    state = _privacy.differentially_private_aggregate(1.0, 1.0, key=5).init(make_tree())
    assert state.rng_key.dtype == torch.int64


def test_dpsgd_compiles_whole_and_the_key_moves_on():
    params = {"w": torch.randn(3, 4), "b": torch.randn(4)}
    per_example = {name: torch.randn(5, *x.shape) for name, x in params.items()}
    tx = _privacy.dpsgd(0.1, l2_norm_clip=1.0, noise_multiplier=1.0, seed=0)
    check_compilable(tx, params, per_example, backend="eager")
    state = tx.init(params)
    _, next_state = tx.update(per_example, state, params)
    keys = {int(state[0].rng_key), int(next_state[0].rng_key)}
    assert len(keys) == 2 and all(0 <= key < 2 ** 63 for key in keys)
