"""scale_by_factored_rms (Adafactor's core) against real Optax."""

import optax
import pytest
import torch

import optax_compat as ox
from optax_compat.testing import compare_with_optax, jit_optax

DTYPES = [torch.float32, torch.float64]


def factor_tree(dtype, seed):
    """0-d, vector, square, tall, 3-D and 4-D leaves, plus a None subtree."""
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(shape, generator=generator, dtype=dtype)

    return {"scalar": rand(), "vector": rand(5), "square": rand(3, 3), "tall": rand(6, 2),
            "conv": (rand(2, 5, 3), rand(3, 1, 4, 2)), "none": None}


def compare(ours, theirs, dtype, steps=5):
    compare_with_optax(ours, lambda: jit_optax(theirs()), dtype, steps=steps,
                       params=factor_tree(dtype, 0),
                       grads=[factor_tree(dtype, i + 1) for i in range(steps)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("min_dim_size_to_factor", [2, 128])
def test_factored_rms_matches_optax(dtype, min_dim_size_to_factor):
    compare(ox.scale_by_factored_rms(min_dim_size_to_factor=min_dim_size_to_factor),
            lambda: optax.scale_by_factored_rms(min_dim_size_to_factor=min_dim_size_to_factor),
            dtype, steps=6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unfactored_rms_with_options_matches_optax(dtype):
    compare(ox.scale_by_factored_rms(factored=False, decay_rate=0.7, step_offset=2,
                                     epsilon=1e-3),
            lambda: optax.scale_by_factored_rms(factored=False, decay_rate=0.7, step_offset=2,
                                                epsilon=1e-3),
            dtype)


def test_custom_decay_rate_fn_matches_optax():
    compare(ox.scale_by_factored_rms(min_dim_size_to_factor=2,
                                     decay_rate_fn=lambda step, rate: rate),
            lambda: optax.scale_by_factored_rms(min_dim_size_to_factor=2,
                                                decay_rate_fn=lambda step, rate: rate),
            torch.float32)


def test_factored_state_layout():
    params = factor_tree(torch.float32, 0)
    state = ox.scale_by_factored_rms(min_dim_size_to_factor=3).init(params)
    assert tuple(state.v_row["tall"].shape) == (1,)  # 2 < 3: not factored
    assert tuple(state.v["tall"].shape) == (6, 2)
    assert tuple(state.v_row["conv"][0].shape) == (2, 3)  # largest axis (5) removed
    assert tuple(state.v_col["conv"][0].shape) == (2, 5)  # second largest (3) removed
    assert tuple(state.v["conv"][0].shape) == (1,)
    assert state.count.dtype == torch.int32


def test_factored_rms_needs_params_and_matching_structure():
    tx = ox.scale_by_factored_rms()
    params = {"a": torch.ones(2)}
    with pytest.raises(ValueError, match="scale_by_factored_rms"):
        tx.update(params, tx.init(params))
    with pytest.raises(ValueError, match=r"key 'a'|key 'b'"):
        tx.update({"b": torch.ones(2)}, tx.init(params), params)


def test_factored_rms_is_differentiable_wrt_updates():
    grad = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    tx = ox.scale_by_factored_rms(min_dim_size_to_factor=2)

    def step(grad):
        params = {"w": torch.zeros(4, 3, dtype=torch.float64)}
        return tx.update({"w": grad}, tx.init(params), params)[0]["w"]

    assert torch.autograd.gradcheck(step, (grad,))
