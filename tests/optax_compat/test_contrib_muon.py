"""muon (optax.contrib) against real Optax.

Tolerances: float32 values get rtol 1e-4 instead of the usual 1e-5. Five Newton-Schulz steps
are fifteen float32 matrix products whose accumulation order differs between MKL (torch) and
XLA; the adaptive dual-norm scaling then multiplies by a sum over the whole leaf (updates of
size ~5, hence also atol 1e-5 for params that cancel to near zero). float64 keeps 1e-10.
"""

from __future__ import annotations

import inspect

import optax
import optax.contrib as optax_contrib
import optree
import pytest
import torch

import optax_compat as ox
from optax_compat.contrib import _muon
from optax_compat.testing import (
    RTOL,
    assert_leaves_close,
    assert_trees_all_close,
    check_pure,
    compare_with_optax,
    jax_precision,
    jit_optax,
    random_tree,
    to_jax,
)

DTYPES = [torch.float32, torch.float64]
MUON_RTOL = {torch.float32: 1e-4}
MUON_ATOL = {torch.float32: 1e-5}


MUON_SHAPES = {"w": (6, 4), "v": (4, 6), "u": (4, 6), "conv": (3, 2, 5, 4), "attn": (4, 3, 5),
               "b": (4,), "s": ()}


def _muon_tree(dtype: torch.dtype, seed: int) -> dict:
    return {**random_tree(MUON_SHAPES, dtype, seed), "empty": None}


def _muon_dim_nums(module) -> dict:
    dims = module.MuonDimensionNumbers
    # conv: (in, in, batch, out); attn: (batch, in, out) with negative axes.
    return {"w": dims(), "v": dims(), "u": dims(1, 0), "conv": dims((0, 1), 3),
            "attn": dims(-2, -1), "b": None, "s": None, "empty": None}


MUON_CONFIGS = {
    "default": {},
    "plain_momentum_adaptive": {"nesterov": False, "ns_steps": 3, "beta": 0.9,
                                "adaptive": True},
    "aol_dion": {"preconditioning": "aol", "ns_coeffs": "dion"},
    "schatten_per_step_coeffs": {"preconditioning": "schatten", "ns_steps": 2,
                                 "ns_coeffs": ((3.0, -3.2, 1.2), (2.0, -1.5, 0.5))},
    "spectral_decay_mask_rms_adam": {
        "preconditioning": "spectral", "weight_decay": 0.1, "consistent_rms": 0.2,
        "eps": 1e-6, "weight_decay_mask": {"w": True, "v": False, "u": True, "conv": False,
                                           "attn": True, "b": True, "s": False, "empty": None},
        "adam_b1": 0.8, "adam_b2": 0.99, "adam_eps_root": 1e-8, "adam_weight_decay": 0.05,
        "adam_learning_rate": 0.03},
}
# float32 runs of the configurations that exercise different float32 kernels.
MUON_CASES = [(config, torch.float64) for config in MUON_CONFIGS] + [
    ("default", torch.float32), ("plain_momentum_adaptive", torch.float32),
    ("schatten_per_step_coeffs", torch.float32)]


@pytest.mark.parametrize(("config", "dtype"), MUON_CASES, ids=str)
def test_muon_matches_optax(config, dtype):
    kwargs = MUON_CONFIGS[config]
    compare_with_optax(
        _muon.muon(0.1, **kwargs, muon_weight_dimension_numbers=_muon_dim_nums(_muon)),
        lambda: jit_optax(optax_contrib.muon(
            0.1, **kwargs, muon_weight_dimension_numbers=_muon_dim_nums(optax_contrib))),
        dtype, steps=3, params=_muon_tree(dtype, 0),
        grads=[_muon_tree(dtype, seed) for seed in (1, 2, 3)], rtol=MUON_RTOL, atol=MUON_ATOL)


@pytest.mark.parametrize("dtype", [torch.float64], ids=str)
def test_muon_default_labels_and_schedule_match_optax(dtype):
    """No dimension numbers: Muon for the 2-D leaves, Adam for the rest (including 3-D)."""
    shapes = {"w": (5, 3), "v": (3, 3), "t": (2, 3, 4), "b": (3,), "s": ()}
    trees = [{**random_tree(shapes, dtype, seed), "empty": None} for seed in range(4)]
    compare_with_optax(
        _muon.muon(ox.linear_schedule(0.1, 0.01, 3), nesterov=False),
        lambda: jit_optax(optax_contrib.muon(optax.linear_schedule(0.1, 0.01, 3),
                                             nesterov=False)),
        dtype, steps=3, params=trees[0], grads=trees[1:], rtol=MUON_RTOL, atol=MUON_ATOL)


@pytest.mark.parametrize("dtype", [torch.float32], ids=str)
def test_muon_callable_prefix_dimension_numbers_match_optax(dtype):
    """A callable returning a prefix tree: one spec covers a whole subtree."""
    shapes = {"w": (4, 5), "v": (5, 4)}

    def tree(seed: int) -> dict:
        return {"dense": random_tree(shapes, dtype, seed), "b": torch.ones(3, dtype=dtype)}

    def dim_nums(module):
        return lambda params: {"dense": module.MuonDimensionNumbers(), "b": None}

    compare_with_optax(
        _muon.muon(0.05, muon_weight_dimension_numbers=dim_nums(_muon)),
        lambda: jit_optax(optax_contrib.muon(
            0.05, muon_weight_dimension_numbers=dim_nums(optax_contrib))),
        dtype, steps=3, params=tree(0), grads=[tree(seed) for seed in (1, 2, 3)],
        rtol=MUON_RTOL, atol=MUON_ATOL)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("preconditioning", ["frobenius", "aol", "schatten"])
def test_orthogonalize_matches_optax_and_batches_exactly(dtype, preconditioning):
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(3, 6, 4, generator=generator, dtype=dtype)
    coeffs = torch.tensor(_muon._DEFAULT_NS_COEFFS, dtype=dtype)
    dims = _muon.MuonDimensionNumbers(1, 2)
    ours = _muon.orthogonalize_via_newton_schulz(x, coeffs, 5, preconditioning,
                                                 dimension_numbers=dims)
    with jax_precision(dtype):
        theirs = optax_contrib._muon.orthogonalize_via_newton_schulz(
            to_jax(x), to_jax(coeffs), 5, preconditioning,
            dimension_numbers=optax_contrib.MuonDimensionNumbers(1, 2))
        assert_leaves_close(ours, theirs, rtol={d: 10 * rtol for d, rtol in RTOL.items()})
    # Stacking the three matrices computes what orthogonalizing each one alone does.
    for index in range(3):
        alone = _muon.orthogonalize_via_newton_schulz(x[index], coeffs, 5, preconditioning)
        assert_trees_all_close(ours[index], alone)
    # The iterate is nearly orthogonal: singular values close to one.
    singular_values = torch.linalg.svdvals(ours.double())
    assert singular_values.min() > 0.5 and singular_values.max() < 1.5


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scale_by_muon_callable_dims_and_mu_dtype(dtype):
    params = {"m": torch.randn(4, 6, dtype=dtype), "t": torch.randn(2, 3, 4, dtype=dtype)}

    def dims(module):
        return lambda updates: {"m": module.MuonDimensionNumbers(),
                                "t": module.MuonDimensionNumbers(1, 2)}

    compare_with_optax(
        _muon.scale_by_muon(beta=0.8, weight_dimension_numbers=dims(_muon)),
        lambda: jit_optax(optax_contrib.scale_by_muon(
            beta=0.8, weight_dimension_numbers=dims(optax_contrib))),
        dtype, steps=3, params=params,
        grads=[optree.tree_map(torch.randn_like, params) for _ in range(3)],
        rtol=MUON_RTOL, atol=MUON_ATOL)
    tx = _muon.scale_by_muon(mu_dtype=torch.float64, weight_dimension_numbers=dims(_muon))
    state = tx.init(params)
    _, state = tx.update(params, state)
    assert state.mu["m"].dtype == torch.float64 and state.count.dtype == torch.int32


def test_scale_by_muon_float32_momentum_of_float64_params_matches_optax():
    import jax.numpy as jnp

    params = torch.randn(5, 3, dtype=torch.float64)  # Optax's default dims need one array
    compare_with_optax(
        _muon.scale_by_muon(mu_dtype=torch.float32, nesterov=False),
        lambda: jit_optax(optax_contrib.scale_by_muon(mu_dtype=jnp.float32, nesterov=False)),
        torch.float64, steps=3, params=params,
        grads=[torch.randn_like(params) for _ in range(3)])


@pytest.mark.parametrize("preconditioning", ["frobenius", "schatten"])
def test_scale_by_muon_complex_matrix_matches_optax(preconditioning):
    """Conjugate transposes where Optax has them (its Schatten step uses the plain one)."""
    params = torch.randn(4, 6, dtype=torch.complex128)
    compare_with_optax(
        _muon.scale_by_muon(adaptive=True, preconditioning=preconditioning),
        lambda: jit_optax(optax_contrib.scale_by_muon(adaptive=True,
                                                      preconditioning=preconditioning)),
        torch.float64, steps=2, params=params, grads=[torch.randn_like(params) for _ in range(2)])


def test_muon_state_layout():
    params = {"w": torch.randn(3, 4)}
    state = _muon.scale_by_muon(ns_coeffs=_muon._DION_NS_COEFFS).init(params)
    assert isinstance(state, _muon.MuonState)
    assert state._fields == ("count", "mu", "ns_coeffs")
    assert state.ns_coeffs.shape == (5, 3) and state.ns_coeffs.dtype == torch.float32
    assert state.count.dtype == torch.int32 and state.count.shape == ()
    assert _muon.MuonDimensionNumbers() == (0, 1)


def test_muon_errors():
    with pytest.raises(ValueError, match="Unknown preconditioning"):
        _muon.scale_by_muon(preconditioning="bogus")
    with pytest.raises(ValueError, match="preset"):
        _muon.muon(0.1, ns_coeffs="bogus")
    with pytest.raises(ValueError, match="Not enough coeffs"):
        _muon.scale_by_muon(ns_coeffs=_muon._DION_NS_COEFFS, ns_steps=3).init(torch.ones(2, 2))
    with pytest.raises(ValueError, match="shape"):
        _muon.scale_by_muon(ns_coeffs=(1.0, 2.0)).init(torch.ones(2, 2))
    tx = _muon.scale_by_muon()  # no dimension numbers: every leaf must be a matrix
    cube = torch.ones(2, 3, 4)
    with pytest.raises(ValueError, match="dimension numbers must be provided"):
        tx.update(cube, tx.init(cube))
    overlapping = _muon.scale_by_muon(weight_dimension_numbers=_muon.MuonDimensionNumbers(0, -3))
    with pytest.raises(ValueError, match="disjoint"):
        overlapping.update(cube, overlapping.init(cube))


def _leaves(tree):
    return optree.tree_leaves(tree, none_is_leaf=False)


def test_update_is_pure():
    tx = _muon.muon(0.1, adaptive=True, weight_decay=0.1,
                    muon_weight_dimension_numbers=_muon_dim_nums(_muon))
    check_pure(tx, _muon_tree(torch.float32, 0), lambda step: _muon_tree(torch.float32, step + 1))


MATRIX_SHAPES = {name: MUON_SHAPES[name] for name in ("w", "v", "u", "conv", "attn")}


@pytest.mark.parametrize(("make_tx", "make_tree"), [
    (lambda: _muon.scale_by_muon(
        adaptive=True, preconditioning="aol",
        weight_dimension_numbers={n: _muon_dim_nums(_muon)[n] for n in MATRIX_SHAPES}),
     lambda seed: random_tree(MATRIX_SHAPES, torch.float32, seed)),
    (lambda: _muon.muon(0.1, weight_decay=0.1, consistent_rms=0.2,
                        muon_weight_dimension_numbers=_muon_dim_nums(_muon)),
     lambda seed: _muon_tree(torch.float32, seed)),
], ids=["scale_by_muon", "muon"])
def test_muon_does_not_read_tensors_on_the_host(make_tx, make_tree, monkeypatch):
    tx = make_tx()
    params = make_tree(0)
    state = tx.init(params)

    def refuse(self, *args):
        raise AssertionError("host sync in update")

    for method in ("__bool__", "item", "__int__", "__float__"):
        monkeypatch.setattr(torch.Tensor, method, refuse)
    for seed in (1, 2):
        updates, state = tx.update(make_tree(seed), state, params)
    monkeypatch.undo()
    assert all(torch.isfinite(x).all() for x in _leaves(updates))


def test_updates_are_differentiable():
    """The update is a differentiable function of the gradients (no in-place writes)."""
    grads = {"w": torch.randn(6, 4, dtype=torch.float64, requires_grad=True),
             "b": torch.randn(5, dtype=torch.float64, requires_grad=True)}
    tx = _muon.muon(0.1, adaptive=True)
    params = optree.tree_map(lambda g: torch.zeros_like(g.detach()), grads)
    updates, _ = tx.update(grads, tx.init(params), params)
    sum(u.square().sum() for u in _leaves(updates)).backward()
    assert all(torch.isfinite(g.grad).all() and g.grad.abs().sum() > 0 for g in _leaves(grads))


def test_reused_product_buffers_give_the_numbers_of_fresh_tensors():
    """Without autograd recording, the Newton-Schulz steps write into buffers they reuse;
    recording, every step makes new tensors. The updates are the same to the bit."""
    generator = torch.Generator().manual_seed(0)
    grads = {"w": torch.randn(6, 4, dtype=torch.float64, generator=generator),
             "v": torch.randn(3, 5, dtype=torch.float64, generator=generator)}
    recorded_grads = optree.tree_map(lambda g: g.clone().requires_grad_(), grads)
    assert _muon._Products(grads["w"]).reuse
    assert not _muon._Products(recorded_grads["w"]).reuse
    tx = _muon.muon(0.1)
    params = optree.tree_map(torch.zeros_like, grads)
    reused, _ = tx.update(grads, tx.init(params), params)
    fresh, _ = tx.update(recorded_grads, tx.init(params), params)
    for a, b in zip(_leaves(reused), _leaves(fresh), strict=True):
        assert torch.equal(a, b.detach())


@pytest.mark.parametrize("name", ["muon", "scale_by_muon"])
def test_signatures_match_optax(name):
    ours = inspect.signature(getattr(_muon, name)).parameters
    theirs = inspect.signature(getattr(optax_contrib, name)).parameters
    assert [(p.name, p.kind, p.default) for p in ours.values()] == [
        (p.name, p.kind, p.default) for p in theirs.values()]
    for state in ("MuonState", "MuonDimensionNumbers"):
        assert getattr(_muon, state)._fields == getattr(optax_contrib, state)._fields
        assert getattr(_muon, state)._field_defaults == getattr(
            optax_contrib, state)._field_defaults
