"""galore (optax.contrib) against real Optax.

Tolerances: Optax computes the SVD in float32 even for float64 params, and jaxlib (OpenBLAS
LAPACK) and torch (MKL) round it differently and may pick opposite signs for a singular
vector. Steps that run an SVD are compared with float32-level tolerances and projectors up to
the sign of each column (the low-rank Adam moment up to the same signs). Steps that do not
refresh the projector are compared exactly (1e-10 in float64) by starting both worlds from
Optax's own state.
"""

from __future__ import annotations

import inspect
import math

import jax
import numpy as np
import optax
import optax.contrib as optax_contrib
import optree
import pytest
import torch

import optax_compat as ox
from optax_compat._runtime import tree_math as tm
from optax_compat.contrib import _galore
from optax_compat.testing import (
    assert_leaves_close,
    assert_same_state_types,
    check_pure,
    jax_precision,
    jit_optax,
    random_tree,
    to_jax,
    to_torch,
)

DTYPES = [torch.float32, torch.float64]
SVD_RTOL = {torch.float32: 1e-4, torch.float64: 1e-5}
SVD_ATOL = 1e-6

GALORE_SHAPES = {"w": (6, 4), "v": (3, 7), "attn": (5, 2, 3), "b": (4,), "s": ()}
# Which projected leaves use left singular vectors (their matrix has rows >= cols).
GALORE_LEFT = {"w": True, "v": False, "attn": False}


def _galore_grads(dtype: torch.dtype, steps: int) -> list[dict]:
    return [random_tree(GALORE_SHAPES, dtype, seed) for seed in range(1, steps + 1)]


def _galore_dim_nums(module) -> dict:
    dims = module.GaLoreDimensionNumbers
    return {"w": dims(), "v": dims(), "attn": dims(0, (1, 2)), "b": None, "s": None}


GALORE_CONFIGS = {
    "default_dims": ({"rank": 2}, False),
    "dims_decay_scale": ({"rank": 3, "scale": 0.5, "weight_decay": 0.1,
                          "mask": {"w": True, "v": False, "attn": True, "b": False,
                                   "s": True}}, True),
    "rank_above_shape": ({"rank": 10}, True),
}


def _column_signs(ours: torch.Tensor, theirs: torch.Tensor) -> torch.Tensor:
    return torch.sign((ours * theirs).sum(dim=0))


def _assert_galore_state_close(ours, theirs, dtype, what: str) -> None:
    """Compares GaLore states with each projector column (and Adam moment) up to its sign."""
    ours_galore, theirs_galore = ours[0], to_torch(theirs[0])
    assert_leaves_close(ours[1:], theirs[1:], what=f"{what} outer states")
    assert_leaves_close(ours_galore.count, theirs_galore.count)
    ours_adam, theirs_adam = ours_galore.base_optimizer_state, theirs_galore.base_optimizer_state
    assert_leaves_close(ours_adam.nu, theirs_adam.nu, rtol=SVD_RTOL, atol=SVD_ATOL,
                        what=f"{what} nu")
    for name in GALORE_SHAPES:
        projector, their_projector = ours_galore.projector[name], theirs_galore.projector[name]
        mu, their_mu = ours_adam.mu[name], theirs_adam.mu[name]
        if projector.numel():
            signs = _column_signs(projector, their_projector.to(projector.dtype))
            projector = projector * signs
            mu = mu * (signs[:, None] if GALORE_LEFT[name] else signs)
        assert_leaves_close(projector, their_projector, rtol=SVD_RTOL, atol=SVD_ATOL,
                            what=f"{what} projector {name}")
        assert_leaves_close(mu, their_mu, rtol=SVD_RTOL, atol=SVD_ATOL,
                            what=f"{what} mu {name}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("config", list(GALORE_CONFIGS))
def test_galore_matches_optax_up_to_svd_signs(dtype, config):
    """One SVD at step 0, then four steps in the fixed subspace; full trajectories compared."""
    kwargs, with_dims = GALORE_CONFIGS[config]
    ours_tx = _galore.galore(0.1, update_proj_gap=100, **kwargs,
                             weight_dimension_numbers=_galore_dim_nums(_galore) if with_dims
                             else None)
    params, grads = random_tree(GALORE_SHAPES, dtype, 0), _galore_grads(dtype, 5)
    with jax_precision(dtype):
        theirs_tx = jit_optax(optax_contrib.galore(
            0.1, update_proj_gap=100, **kwargs,
            weight_dimension_numbers=_galore_dim_nums(optax_contrib) if with_dims else None))
        ours_state, theirs_params = ours_tx.init(params), to_jax(params)
        theirs_state = theirs_tx.init(theirs_params)
        assert_same_state_types(ours_state, theirs_state)
        assert_leaves_close(ours_state, theirs_state, what="init")
        for step, grad in enumerate(grads):
            updates, ours_state = ours_tx.update(grad, ours_state, params)
            their_updates, theirs_state = theirs_tx.update(to_jax(grad), theirs_state,
                                                           theirs_params)
            assert_leaves_close(updates, their_updates, rtol=SVD_RTOL, atol=SVD_ATOL,
                                what=f"updates step {step}")
            _assert_galore_state_close(ours_state, theirs_state, dtype, f"step {step}")
            assert_same_state_types(ours_state, theirs_state)
            params = ox.apply_updates(params, updates)
            theirs_params = optax.apply_updates(theirs_params, their_updates)


def _ours_from_theirs(ours_like, theirs):
    """Optax's state as a state of ours (same leaves in the same order)."""
    return tm.unflatten(tm.treespec(ours_like),
                        [torch.from_numpy(np.array(x)) for x in jax.tree.leaves(theirs)])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("base", ["adam", "lion"])
def test_galore_steps_between_refreshes_match_optax_exactly(dtype, base):
    """From Optax's state after its SVD step, every non-refresh step agrees to 1e-10."""
    def make(module, optax_module):
        base_tx = (optax_module.scale_by_adam(b1=0.8) if base == "adam"
                   else optax_module.scale_by_lion(b1=0.8, b2=0.95))
        return module.galore(0.1, rank=2, update_proj_gap=4, base_optimizer=base_tx,
                             weight_decay=0.05,
                             weight_dimension_numbers=_galore_dim_nums(module))

    grads = _galore_grads(dtype, 4)
    ours_tx = make(_galore, ox)
    with jax_precision(dtype):
        theirs_tx = jit_optax(make(optax_contrib, optax))
        theirs_params = to_jax(random_tree(GALORE_SHAPES, dtype, 0))
        theirs_state = theirs_tx.init(theirs_params)
        their_updates, theirs_state = theirs_tx.update(to_jax(grads[0]), theirs_state,
                                                       theirs_params)
        theirs_params = optax.apply_updates(theirs_params, their_updates)
        ours_state = _ours_from_theirs(ours_tx.init(to_torch(theirs_params)), theirs_state)
        params = to_torch(theirs_params)
        for step, grad in enumerate(grads[1:], start=1):
            updates, ours_state = ours_tx.update(grad, ours_state, params)
            their_updates, theirs_state = theirs_tx.update(to_jax(grad), theirs_state,
                                                           theirs_params)
            assert_leaves_close(updates, their_updates, what=f"updates step {step}")
            assert_leaves_close(ours_state, theirs_state, what=f"state step {step}")
            params = ox.apply_updates(params, updates)
            theirs_params = optax.apply_updates(theirs_params, their_updates)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_galore_refreshes_every_gap_steps(dtype):
    """Projectors are the SVD of the gradient at steps 0, gap, 2 gap (as Optax's, up to sign)
    and are kept in between."""
    gap, steps = 2, 5
    tx = _galore.scale_by_galore(rank=2, update_proj_gap=gap,
                                 weight_dimension_numbers=_galore_dim_nums(_galore))
    grads = _galore_grads(dtype, steps)
    state = tx.init(grads[0])
    with jax_precision(dtype):
        their_tx = jit_optax(optax_contrib.scale_by_galore(
            rank=2, update_proj_gap=gap, weight_dimension_numbers=_galore_dim_nums(optax_contrib)))
        for step, grad in enumerate(grads):
            previous = state.projector
            _, state = tx.update(grad, state)
            # Optax's projector at a refresh depends on the current gradient only.
            their_state = their_tx.init(to_jax(grad))
            _, their_state = their_tx.update(to_jax(grad), their_state)
            for name in ("w", "v", "attn"):
                projector = state.projector[name]
                if step % gap:
                    assert torch.equal(projector, previous[name])
                    continue
                assert projector.dtype == dtype
                theirs = to_torch(their_state.projector[name]).to(dtype)
                assert_leaves_close(projector * _column_signs(projector, theirs), theirs,
                                    rtol=SVD_RTOL, atol=SVD_ATOL, what=f"step {step} {name}")
    assert state.count == steps and state.count.dtype == torch.int32



@pytest.mark.parametrize("value", [float("nan"), float("inf")], ids=["nan", "inf"])
def test_non_finite_gradients_give_nan_updates_as_in_optax(value):
    """A non-finite entry at a refresh: NaN updates for that matrix, no exception (JAX's SVD
    returns NaN where torch's raises); the other leaves are unaffected. The shapes are ones on
    which JAX's SVD returns for an infinite entry (it does not on some, e.g. 3 x 3)."""
    shapes = {"w": (3, 2), "v": (2, 3), "b": (4,)}
    params, grads = random_tree(shapes, torch.float32, 0), random_tree(shapes, torch.float32, 1)
    grads["w"][1, 0] = grads["v"][0, 2] = value
    tx = _galore.galore(0.1, rank=1, update_proj_gap=1)
    updates, state = tx.update(grads, tx.init(params), params)
    their_tx = optax_contrib.galore(0.1, rank=1, update_proj_gap=1)
    their_updates, their_state = their_tx.update(to_jax(grads), their_tx.init(to_jax(params)),
                                                 to_jax(params))
    for name in ("w", "v"):
        assert to_torch(their_updates[name]).isnan().all() and updates[name].isnan().all()
        assert state[0].projector[name].isnan().all()
    if math.isnan(value):  # for an infinite entry, LAPACK's vectors vary (NaN or arbitrary)
        assert to_torch(their_state[0].projector["w"]).isnan().all()
    assert_leaves_close(updates["b"], their_updates["b"])
    # The next refresh, from a finite gradient: the low-rank moments stay NaN in both.
    grads = random_tree(shapes, torch.float32, 2)
    updates, _ = tx.update(grads, state, params)
    their_updates, _ = their_tx.update(to_jax(grads), their_state, to_jax(params))
    assert_leaves_close(updates, their_updates)

def test_galore_state_shapes_and_errors():
    params = {"w": torch.ones(6, 4), "v": torch.ones(3, 7), "b": torch.ones(4),
              "t": torch.ones(2, 3, 4), "empty": None}
    state = _galore.scale_by_galore(rank=2).init(params)
    assert state.projector["w"].shape == (6, 2) and state.projector["v"].shape == (7, 2)
    assert state.projector["b"].shape == (0, 0) and state.projector["t"].shape == (0, 0)
    adam = state.base_optimizer_state
    assert adam.mu["w"].shape == (2, 4) and adam.mu["v"].shape == (3, 2)
    assert adam.mu["t"].shape == (2, 3, 4)
    with pytest.raises(TypeError, match="rank"):
        _galore.scale_by_galore(rank=2.0)
    with pytest.raises(ValueError, match="positive"):
        _galore.scale_by_galore(rank=0)
    with pytest.raises(ValueError, match="All axes"):
        _galore.scale_by_galore(weight_dimension_numbers=_galore.GaLoreDimensionNumbers()).init(
            params)
    empty = _galore.scale_by_galore().init({})
    assert empty.projector == {} and empty.count.dtype == torch.int32


def test_update_is_pure():
    tx = _galore.galore(0.1, rank=2, update_proj_gap=2, weight_decay=0.1)
    check_pure(tx, random_tree(GALORE_SHAPES, torch.float32, 0),
               lambda step: random_tree(GALORE_SHAPES, torch.float32, step + 1))


def test_updates_are_differentiable():
    """The update is a differentiable function of the gradients (no in-place writes), through
    the SVD refresh of step 0."""
    grads = {"w": torch.randn(6, 4, dtype=torch.float64, requires_grad=True),
             "b": torch.randn(5, dtype=torch.float64, requires_grad=True)}
    tx = _galore.galore(0.1, rank=2)
    params = optree.tree_map(lambda g: torch.zeros_like(g.detach()), grads)
    updates, _ = tx.update(grads, tx.init(params), params)
    leaves = lambda tree: optree.tree_leaves(tree, none_is_leaf=False)
    sum(u.square().sum() for u in leaves(updates)).backward()
    assert all(torch.isfinite(g.grad).all() and g.grad.abs().sum() > 0 for g in leaves(grads))


@pytest.mark.parametrize("name", ["galore", "scale_by_galore"])
def test_signatures_match_optax(name):
    ours = inspect.signature(getattr(_galore, name)).parameters
    theirs = inspect.signature(getattr(optax_contrib, name)).parameters
    assert [(p.name, p.kind, p.default) for p in ours.values()] == [
        (p.name, p.kind, p.default) for p in theirs.values()]
    for state in ("GaLoreState", "GaLoreDimensionNumbers"):
        assert getattr(_galore, state)._fields == getattr(optax_contrib, state)._fields
        assert getattr(_galore, state)._field_defaults == getattr(
            optax_contrib, state)._field_defaults


def test_a_none_leaf_is_skipped_where_optax_cannot_init():
    """A ``None`` (empty) subtree, which the property tests leave out of GaLore: Optax's
    ``init`` reads every leaf's dtype and raises; here the leaf is skipped (``None`` update)
    and the matrix gets Optax's update for the same tree without it."""
    matrix = torch.tensor([0.98, 6.69], dtype=torch.float64)
    grad = torch.tensor([-6.3, 4.6], dtype=torch.float64)
    with jax_precision(torch.float64), pytest.raises(AttributeError, match="dtype"):
        optax_contrib.galore(0.01).init({"m": to_jax(matrix), "d": None})
    tx = ox.contrib.galore(0.01)
    updates, _ = tx.update({"m": grad, "d": None}, tx.init({"m": matrix, "d": None}),
                           {"m": matrix, "d": None})
    assert updates["d"] is None
    with jax_precision(torch.float64):
        theirs_tx = optax_contrib.galore(0.01)
        theirs, _ = theirs_tx.update({"m": to_jax(grad)}, theirs_tx.init({"m": to_jax(matrix)}),
                                     {"m": to_jax(matrix)})
        assert_leaves_close(updates["m"], theirs["m"])
