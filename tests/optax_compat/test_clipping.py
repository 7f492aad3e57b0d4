"""Clipping transformations and helpers against real Optax."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

import optax_compat as ox
from optax_compat import transforms
from optax_compat.testing import (
    assert_inplace_matches_pure,
    assert_leaves_close,
    compare_with_optax,
    jax_precision,
    jit_optax,
    make_tree,
    to_jax,
)

DTYPES = [torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_clip_matches_optax(dtype):
    compare_with_optax(ox.clip(0.5), lambda: jit_optax(optax.clip(0.5)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_clip_by_block_rms_matches_optax(dtype):
    compare_with_optax(ox.clip_by_block_rms(0.7),
                       lambda: jit_optax(optax.clip_by_block_rms(0.7)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_by_global_norm_matches_optax(dtype, max_norm):
    compare_with_optax(ox.clip_by_global_norm(max_norm),
                       lambda: jit_optax(optax.clip_by_global_norm(max_norm)), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [None, 0])
def test_adaptive_grad_clip_matches_optax(dtype, axis):
    params = make_tree(dtype, 0)
    if axis is not None:  # every leaf needs the axis: drop the 0-d one
        params = {"layer": params["layer"], "pair": params["pair"]}
    grads = [ox.tree_utils._tree_math.tm.tree_map(lambda g: 3 * g, make_tree(dtype, i + 1))
             for i in range(5)]
    if axis is not None:
        grads = [{"layer": g["layer"], "pair": g["pair"]} for g in grads]
    compare_with_optax(ox.adaptive_grad_clip(0.1, axis=axis),
                       lambda: jit_optax(optax.adaptive_grad_clip(0.1, axis=axis)), dtype,
                       params=params, grads=grads)


@pytest.mark.parametrize("tx", [ox.clip(0.3), ox.clip_by_global_norm(0.5),
                                ox.clip_by_global_norm(1e3), ox.clip(torch.tensor(0.3)),
                                ox.clip_by_global_norm(torch.tensor(0.5))])
def test_inplace_clipping_matches_pure(tx):
    assert_inplace_matches_pure(tx)


def test_clip_by_global_norm_has_no_host_sync_and_keeps_dtypes():
    tree = {"a": torch.full((3,), 10.0), "b": torch.full((2,), 10.0, dtype=torch.float64)}
    clipped, _ = ox.clip_by_global_norm(1.0).update(tree, ox.EmptyState())
    assert clipped["a"].dtype == torch.float32 and clipped["b"].dtype == torch.float64
    assert float(ox.tree.norm(clipped)) == pytest.approx(1.0, rel=1e-6)


def test_clipping_is_differentiable_wrt_hyperparameters_and_updates():
    grad = torch.randn(5, dtype=torch.float64, requires_grad=True)
    bound = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)

    def clipped(make, bound, grad):
        return make(bound).update({"g": grad}, ox.EmptyState())[0]["g"]

    for make in (ox.clip, ox.clip_by_global_norm):
        assert torch.autograd.gradcheck(lambda b, g, make=make: clipped(make, b, g),
                                        (bound, grad))


def test_adaptive_grad_clip_needs_params():
    with pytest.raises(ValueError, match="adaptive_grad_clip"):
        ox.adaptive_grad_clip(0.1).update(make_tree(), ox.EmptyState())


def test_adaptive_grad_clip_structure_mismatch_names_the_path():
    with pytest.raises(ValueError, match=r"key 'b'|key 'c'"):
        ox.adaptive_grad_clip(0.1).update({"a": torch.ones(2), "b": torch.ones(2)},
                                          ox.EmptyState(), {"a": torch.ones(2), "c": torch.ones(2)})


def batched_tree(dtype):
    generator = torch.Generator().manual_seed(3)
    return {"w": torch.randn(4, 3, 2, generator=generator, dtype=dtype),
            "b": [torch.randn(4, 5, generator=generator, dtype=dtype),
                  torch.randn(4, generator=generator, dtype=dtype)]}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("clip_norm", [0.0, 1.5])
def test_per_example_global_norm_clip_matches_optax(dtype, clip_norm):
    grads = batched_tree(dtype)
    ours = ox.per_example_global_norm_clip(grads, clip_norm)
    with jax_precision(dtype):
        theirs = jax.jit(optax.per_example_global_norm_clip)(to_jax(grads), clip_norm)
    assert_leaves_close(ours, theirs)
    assert ours[1].dtype == torch.int32


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("uniform", [True, False])
def test_per_example_layer_norm_clip_matches_optax(dtype, uniform):
    grads = batched_tree(dtype)
    ours = ox.per_example_layer_norm_clip(grads, 1.2, uniform=uniform)
    with jax_precision(dtype):
        theirs = jax.jit(optax.per_example_layer_norm_clip, static_argnames="uniform")(
            to_jax(grads), 1.2, uniform=uniform)
    assert isinstance(ours, tuple) and len(ours) == 2
    assert_leaves_close(ours, theirs)


def test_per_example_clip_docstring_example_with_integers():
    grads = [torch.tensor([[0, 0, 0], [0, 3, 4], [4, 0, 3], [3, 4, 0]])]
    summed, clipped = ox.per_example_global_norm_clip(grads, 1.25)
    np.testing.assert_allclose(summed[0].numpy(), [1.75, 1.75, 1.75], rtol=1e-6)
    assert int(clipped) == 3
    summed, clipped = ox.per_example_global_norm_clip(grads, float("inf"))
    np.testing.assert_allclose(summed[0].numpy(), [7.0, 7.0, 7.0])
    assert int(clipped) == 0
    summed, clipped = ox.per_example_layer_norm_clip(grads, 0.0)
    np.testing.assert_allclose(summed[0].numpy(), [0.0, 0.0, 0.0])
    assert int(clipped[0]) == 3


@pytest.mark.parametrize("clip_fn", [ox.per_example_global_norm_clip,
                                     ox.per_example_layer_norm_clip])
def test_per_example_clip_needs_a_shared_batch_axis(clip_fn):
    with pytest.raises(ValueError, match="batch dimension"):
        clip_fn([torch.ones(3, 2), torch.ones(4)], 1.0)


@pytest.mark.parametrize("shape,axis", [((5,), None), ((1, 5), None), ((3, 4), None),
                                        ((2, 3, 4), None), ((2, 2, 3, 4), None),
                                        ((2, 2, 2, 3, 4), None), ((3, 4), 1),
                                        ((2, 3, 4), (0, 2)), ((), None)])
def test_unitwise_norm_matches_optax(shape, axis):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    assert_leaves_close(transforms.unitwise_norm(x, axis),
                        optax.transforms.unitwise_norm(jnp.asarray(x.numpy()), axis))


def test_unitwise_norm_rejects_rank_six_without_axis():
    with pytest.raises(ValueError, match="axis"):
        transforms.unitwise_norm(torch.ones(2, 2, 2, 2, 2, 2))


def test_unitwise_clip_matches_optax_and_checks_shapes():
    generator = torch.Generator().manual_seed(2)
    grad = torch.randn(3, 4, generator=generator)
    g_norm = transforms.unitwise_norm(grad)
    max_norm = torch.full((3, 4), 1.0)
    assert_leaves_close(transforms.unitwise_clip(g_norm, max_norm, grad),
                        optax.transforms.unitwise_clip(*(jnp.asarray(t.numpy())
                                                  for t in (g_norm, max_norm, grad))))
    with pytest.raises(ValueError, match="shape"):
        transforms.unitwise_clip(g_norm, torch.ones(4), grad)
