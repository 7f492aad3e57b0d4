"""add_decayed_weights and add_noise against real Optax (noise: statistically)."""

import optax
import pytest
import torch

import optax_compat as ox
from optax_compat._runtime import counter_random
from optax_compat.testing import (
    assert_inplace_matches_pure,
    compare_with_optax,
    jit_optax,
    make_tree,
)

DTYPES = [torch.float32, torch.float64]


def no_decay_on_vectors(params):
    return ox.tree_utils._tree_math.tm.tree_map(lambda p: p.ndim != 1, params)


def optax_no_decay_on_vectors(params):
    import jax

    return jax.tree.map(lambda p: p.ndim != 1, params)


MASK_TREE = {"bias": False, "layer": {"w": True, "b": False}, "pair": (True, True),
             "empty": None}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_add_decayed_weights_matches_optax(dtype, weight_decay):
    compare_with_optax(ox.add_decayed_weights(weight_decay),
                       lambda: jit_optax(optax.add_decayed_weights(weight_decay)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_decayed_weights_schedule_matches_optax(dtype):
    compare_with_optax(ox.add_decayed_weights(ox.linear_schedule(0.1, 0.01, 3)),
                       lambda: optax.add_decayed_weights(optax.linear_schedule(0.1, 0.01, 3)),
                       dtype, steps=5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_decayed_weights_mask_tree_matches_optax(dtype):
    compare_with_optax(ox.add_decayed_weights(0.1, mask=MASK_TREE),
                       lambda: jit_optax(optax.add_decayed_weights(0.1, mask=MASK_TREE)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_decayed_weights_mask_fn_and_schedule_match_optax(dtype):
    compare_with_optax(
        ox.add_decayed_weights(ox.exponential_decay(0.2, 2, 0.5), mask=no_decay_on_vectors),
        lambda: jit_optax(optax.add_decayed_weights(optax.exponential_decay(0.2, 2, 0.5),
                                          mask=optax_no_decay_on_vectors)),
        dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_decayed_weights_inplace_matches_pure(dtype):
    assert_inplace_matches_pure(ox.add_decayed_weights(0.3), dtype)


@pytest.mark.parametrize("weight_decay", [torch.tensor(0.3), ox.linear_schedule(0.1, 0.0, 3)])
def test_add_decayed_weights_inplace_tensor_and_schedule_match_pure(weight_decay):
    assert_inplace_matches_pure(ox.add_decayed_weights(weight_decay))


def test_add_decayed_weights_inplace_with_mask_matches_pure():
    assert_inplace_matches_pure(ox.add_decayed_weights(0.3, mask=no_decay_on_vectors))


def test_add_decayed_weights_gradient_wrt_rate_and_params():
    rate = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
    param = torch.randn(4, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(4, dtype=torch.float64)

    def update(rate, param):
        tx = ox.add_decayed_weights(rate)
        return tx.update({"w": grad}, tx.init({"w": param}), {"w": param})[0]["w"]

    assert torch.autograd.gradcheck(update, (rate, param))


def test_add_decayed_weights_needs_params():
    tx = ox.add_decayed_weights(0.1)
    params = make_tree()
    with pytest.raises(ValueError, match="add_decayed_weights"):
        tx.update(params, tx.init(params))


def test_add_decayed_weights_structure_mismatch_names_the_path():
    tx = ox.add_decayed_weights(0.1)
    params = {"a": torch.ones(2), "b": torch.ones(2)}
    with pytest.raises(ValueError, match=r"key 'c'|key 'b'"):
        tx.update({"a": torch.ones(2), "c": torch.ones(2)}, tx.init(params), params)


def test_add_noise_state_and_zero_variance_match_optax():
    # With eta = 0 the noise vanishes, so updates, counts and state types compare exactly (JAX's
    # random bits are slow to compile, hence one dtype; the noise is checked statistically below).
    compare_with_optax(ox.add_noise(0.0, 0.55, 3),
                       lambda: jit_optax(optax.add_noise(0.0, 0.55, 3)), apply=False)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_noise_has_the_annealed_variance(dtype):
    eta, gamma = 0.5, 0.55
    zeros = {"a": torch.zeros(200_000, dtype=dtype), "b": torch.zeros(300, 100, dtype=dtype)}
    tx = ox.add_noise(eta, gamma, torch.Generator().manual_seed(7))
    state = tx.init(zeros)
    for step in range(1, 4):
        noise, state = tx.update(zeros, state)
        expected_variance = eta / step ** gamma
        for leaf in noise.values():
            assert leaf.dtype == dtype
            assert abs(leaf.mean().item()) < 5 * (expected_variance / leaf.numel()) ** 0.5
            assert leaf.var().item() == pytest.approx(expected_variance, rel=0.05)
        assert int(state.count) == step
    assert not torch.equal(noise["a"][:1000], noise["b"].reshape(-1)[:1000])


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_noise_is_standard_normal_and_independent(dtype):
    # The counter-based noise: its distribution function at a few points is the normal one, and
    # neighbouring elements, two leaves and two steps are uncorrelated.
    size = 100_000
    zeros = {"a": torch.zeros(size, dtype=dtype), "b": torch.zeros(size, dtype=dtype)}
    tx = ox.add_noise(1.0, 0.0, 11)  # variance 1 / (1 + t) ** 0
    state = tx.init(zeros)
    first, state = tx.update(zeros, state)
    second, _ = tx.update(zeros, state)
    noise = first["a"].double()
    normal = torch.distributions.Normal(0.0, 1.0)
    for x in (-2.5, -1.0, 0.0, 0.5, 1.5, 3.0):
        expected = normal.cdf(torch.tensor(x)).item()
        # The empirical distribution function at x has standard deviation sqrt(p (1 - p) / n).
        assert abs((noise <= x).double().mean().item() - expected) < 5 * (
            expected * (1 - expected) / size) ** 0.5
    for other in (noise.roll(1), first["b"].double(), second["a"].double()):
        assert abs(torch.corrcoef(torch.stack((noise, other)))[0, 1].item()) < 5 / size ** 0.5


def test_add_noise_is_reproducible_and_keyed():
    zeros = {"a": torch.zeros(50)}

    def draw(key):
        tx = ox.add_noise(1.0, 0.0, key)
        state = tx.init(zeros)
        first, state = tx.update(zeros, state)
        second, _ = tx.update(zeros, state)
        return first["a"], second["a"]

    first, second = draw(3)
    assert torch.equal(first, draw(3)[0]) and torch.equal(second, draw(3)[1])
    assert not torch.equal(first, second)
    assert not torch.equal(first, draw(4)[0])


def test_add_noise_seed_argument():
    with pytest.warns(DeprecationWarning):
        tx = ox.add_noise(1.0, 0.5, seed=3)
    assert int(tx.init({})[1]) == 3
    with pytest.raises(ValueError, match="Only one of seed or key"), pytest.warns(
            DeprecationWarning):
        ox.add_noise(1.0, 0.5, 1, seed=3)


def test_add_noise_runs_of_leaves_draw_each_leaf_as_alone():
    # Many small leaves are hashed in a few runs (a few dozen kernels, not a few dozen per leaf);
    # each leaf gets the stream normal_like gives it alone, to float32 rounding (a leaf's last
    # elements may meet a vectorized log or cos in a run and a scalar one alone).
    key, count = torch.tensor(5), torch.tensor(2, dtype=torch.int32)
    likes = [torch.zeros(size) for size in (1, 7, 300, 64)] + [
        torch.zeros(3, 5, dtype=torch.float64), torch.zeros(4, dtype=torch.complex64),
        torch.zeros(2, 2, dtype=torch.bfloat16)] + [torch.zeros(10, 10)] * 200
    runs = list(counter_random.normal_chunks(key, count, likes))
    # float32 | float64 | complex64 | bfloat16 and float32 (both computed in float32)
    assert [run for run, _ in runs] == [slice(0, 4), slice(4, 5), slice(5, 6), slice(6, 207)]
    noise = [leaf for _, leaves in runs for leaf in leaves]
    for index, (like, leaf) in enumerate(zip(likes, noise, strict=True)):
        alone = counter_random.normal_like(key, count, index, like)
        assert leaf.dtype == like.dtype and leaf.shape == like.shape
        torch.testing.assert_close(leaf, alone, rtol=1e-6, atol=1e-6)
