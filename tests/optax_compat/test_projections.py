"""Projections: values and gradients against real Optax, plus geometric properties."""

from __future__ import annotations

import inspect

import hypothesis.strategies as st
import optree
import pytest
import torch
from hypothesis import given, settings

from optax_compat import projections as proj
from optax_compat import tree_utils
from optax_compat._runtime import tree_math
from optax_compat.testing import assert_leaves_close, jax_precision, make_tree, to_jax

DTYPES = [torch.float32, torch.float64]
RADIUS_PROJECTIONS = ["projection_simplex", "projection_l1_ball", "projection_l1_sphere",
                      "projection_l2_ball", "projection_l2_sphere", "projection_linf_ball"]


def optax_projections():
    from optax import projections

    return projections


def same_tree(value, tree):
    """A tree with the structure of ``tree`` and every leaf filled with ``value``."""
    return optree.tree_map(lambda x: torch.full_like(x, value), tree, none_is_leaf=False)


def cases(dtype):
    """(name, args for ours) for every projection, on a tree with several leaves."""
    x = make_tree(dtype, seed=0)
    a = make_tree(dtype, seed=1)
    return [
        ("projection_non_negative", (x,)),
        ("projection_box", (x, same_tree(-0.3, x), same_tree(0.5, x))),
        # Optax's hypercube only takes one-leaf trees (its lower bound 0 is a single leaf).
        ("projection_hypercube", (x["layer"]["w"], torch.full((3, 4), 0.7, dtype=dtype))),
        ("projection_hypercube", (x["layer"]["w"],)),
        ("projection_vector", (x, a)),
        ("projection_hyperplane", (x, a, 0.75)),
        ("projection_halfspace", (x, a, -2.0)),
        ("projection_halfspace", (x, a, 100.0)),
        *[(name, (x, radius)) for name in RADIUS_PROJECTIONS for radius in (0.8, 50.0)],
        ("projection_simplex", (x["layer"]["w"],)),
    ]


CASE_IDS = [f"{name}-{i}" for i, (name, _) in enumerate(cases(torch.float32))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("index", range(len(CASE_IDS)), ids=CASE_IDS)
def test_values_and_gradients_match_optax(index, dtype):
    import jax
    import jax.numpy as jnp

    name, args = cases(dtype)[index]
    ours_fn, theirs_fn = getattr(proj, name), getattr(optax_projections(), name)
    weights = make_tree(dtype, seed=7)
    weights = weights if isinstance(args[0], dict) else weights["layer"]["w"]
    with jax_precision(dtype):
        theirs_args = to_jax(args)
        assert_leaves_close(ours_fn(*args), theirs_fn(*theirs_args), what=name)
        if dtype != torch.float64:
            return  # gradients are compared once, in float64 (JAX's eager tracing is slow)
        # The gradient of <weights, projection(x)> with respect to x.
        x = optree.tree_map(lambda t: t.clone().requires_grad_(), args[0], none_is_leaf=False)
        ours_loss = tree_utils.tree_vdot(weights, ours_fn(x, *args[1:]))
        ours_grad = torch.autograd.grad(ours_loss, tree_math.leaves(x))
        theirs_weights = to_jax(weights)
        theirs_grad = jax.grad(
            lambda x: optax_tree_vdot(theirs_weights, theirs_fn(x, *theirs_args[1:])))(
                theirs_args[0])
        assert_leaves_close(list(ours_grad), jax.tree.leaves(theirs_grad), what=f"{name} grad")
        assert jnp.isfinite(ours_loss.detach().numpy())


def optax_tree_vdot(x, y):
    import optax

    return optax.tree.vdot(x, y)


@pytest.mark.parametrize("name", RADIUS_PROJECTIONS)
def test_gradient_with_respect_to_scale_matches_optax(name):
    import jax

    dtype = torch.float64
    x = make_tree(dtype, seed=3)
    weights = make_tree(dtype, seed=4)
    scale = torch.tensor(0.9, dtype=dtype, requires_grad=True)
    ours = torch.autograd.grad(tree_utils.tree_vdot(weights, getattr(proj, name)(x, scale)),
                               scale)[0]
    with jax_precision(dtype):
        theirs_fn = getattr(optax_projections(), name)
        theirs = jax.grad(lambda s: optax_tree_vdot(to_jax(weights), theirs_fn(to_jax(x), s)))(
            0.9)
    assert_leaves_close(ours, theirs)


@pytest.mark.parametrize("name", [
    "projection_box", "projection_halfspace", "projection_hypercube", "projection_hyperplane",
    "projection_l1_ball", "projection_l1_sphere", "projection_l2_ball", "projection_l2_sphere",
    "projection_linf_ball", "projection_non_negative", "projection_simplex", "projection_vector"])
def test_signature_matches_optax(name):
    ours = inspect.signature(getattr(proj, name)).parameters
    theirs = inspect.signature(getattr(optax_projections(), name)).parameters
    assert [(p.name, p.kind, p.default) for p in ours.values()] == [
        (p.name, p.kind, p.default) for p in theirs.values()]


def test_documented_examples():
    x = torch.tensor([-1.0, 2.0, 0.5])
    torch.testing.assert_close(proj.projection_hypercube(x), torch.tensor([0.0, 1.0, 0.5]))
    torch.testing.assert_close(proj.projection_hypercube(x, 0.8), torch.tensor([0.0, 0.8, 0.5]))
    torch.testing.assert_close(proj.projection_hypercube(x, torch.full((3,), 0.8)),
                               torch.tensor([0.0, 0.8, 0.5]))
    pair = (torch.tensor(1.0), torch.tensor(2.0))
    a = (torch.tensor(3.0), torch.tensor(4.0))
    assert tree_utils.tree_allclose(proj.projection_vector(pair, a),
                                    (torch.tensor(33 / 25), torch.tensor(44 / 25)))
    assert tree_utils.tree_allclose(proj.projection_hyperplane(pair, a, 5.0),
                                    (torch.tensor(7 / 25), torch.tensor(26 / 25)))
    below = (torch.tensor(1.0), torch.tensor(-2.0))
    assert tree_utils.tree_allclose(proj.projection_halfspace(below, a, 5.0), below)
    simplex = proj.projection_simplex({"w": torch.tensor([2.5, 3.2]), "b": torch.tensor(0.5)})
    torch.testing.assert_close(tree_utils.tree_sum(simplex), torch.tensor(1.0))


@pytest.mark.parametrize("scale", [1.0, 0.8])
def test_simplex_with_minus_infinity(scale):
    p = proj.projection_simplex(torch.tensor([0.0, 0.0, -torch.inf]), scale)
    torch.testing.assert_close(p, torch.tensor([scale / 2, scale / 2, 0.0]))


def test_simplex_jacobian_forward_reverse_and_closed_form():
    x = torch.rand(6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    p = proj.projection_simplex(x)
    support = (p > 0).to(x.dtype)
    expected = torch.diag(support) - torch.outer(support, support) / support.sum()
    torch.testing.assert_close(torch.func.jacrev(proj.projection_simplex)(x), expected)
    torch.testing.assert_close(torch.func.jacfwd(proj.projection_simplex)(x), expected)
    x.requires_grad_()
    assert torch.autograd.gradcheck(proj.projection_simplex, (x,))
    # Piecewise linear: the second derivative exists (through double backward) and is 0.
    assert torch.autograd.gradgradcheck(proj.projection_simplex, (x,))


def test_simplex_under_vmap():
    x = torch.randn(4, 30, generator=torch.Generator().manual_seed(1))
    scales = torch.tensor([1.0, 0.8, 2.0, 0.1])
    p = torch.func.vmap(proj.projection_simplex)(x, scales)
    torch.testing.assert_close(p.sum(1), scales)
    for row, scale, expected in zip(x, scales, p):
        torch.testing.assert_close(proj.projection_simplex(row, scale), expected)


def test_gradient_at_zero_is_identity_for_balls():
    for fn in (proj.projection_l1_ball, proj.projection_l2_ball):
        t = torch.tensor(0.0, requires_grad=True)
        (grad,) = torch.autograd.grad(fn(t), t)
        assert grad.item() == 1.0


def test_mixed_dtype_tree_keeps_leaf_dtypes():
    tree = {"a": torch.tensor([0.3, -1.0]), "b": torch.tensor([2.0], dtype=torch.float64)}
    for name in RADIUS_PROJECTIONS:
        out = getattr(proj, name)(tree, 0.5)
        assert out["a"].dtype == torch.float32 and out["b"].dtype == torch.float64, name


def test_bad_input_errors():
    x = {"a": torch.ones(2), "b": torch.ones(3)}
    with pytest.raises(ValueError, match="lower"):
        proj.projection_box(x, {"a": 0.0}, 1.0)
    with pytest.raises(ValueError, match="'b'"):
        proj.projection_vector(x, {"a": torch.ones(2), "c": torch.ones(3)})
    with pytest.raises(TypeError, match=r"\['k'\]"):
        proj.projection_non_negative({"k": 1.0})


def test_scalar_bounds_apply_to_every_leaf():
    tree = make_tree(torch.float32, seed=5)
    out = proj.projection_box(tree, -0.25, torch.tensor(0.5))
    expected = proj.projection_box(tree, same_tree(-0.25, tree), same_tree(0.5, tree))
    assert tree_utils.tree_allclose(out, expected)
    assert tree_utils.tree_allclose(proj.projection_linf_ball(tree, 0.5),
                                    proj.projection_box(tree, -0.5, 0.5))


# ------------------------------------------------------------------------------------------
# Properties: a Euclidean projection onto a closed convex set is feasible, idempotent and
# non-expansive, and leaves points of the set where they are.

vectors = st.lists(st.floats(-10, 10, allow_nan=False, width=64), min_size=1, max_size=12)


def as_tree(values):
    x = torch.tensor(values, dtype=torch.float64)
    half = len(values) // 2
    return {"head": x[:half].reshape(-1, 1), "tail": x[half:]}


def flat(tree):
    return tree_math.ravel(tree_math.leaves(tree))


def feasible(name, tree, scale, tol=1e-9):
    v = flat(tree)
    checks = {
        "projection_simplex": lambda: bool((v >= 0).all()) and abs(v.sum() - scale) < tol,
        "projection_l1_ball": lambda: v.abs().sum() <= scale + tol,
        "projection_l1_sphere": lambda: abs(v.abs().sum() - scale) < tol,
        "projection_l2_ball": lambda: v.norm() <= scale + tol,
        "projection_l2_sphere": lambda: abs(v.norm() - scale) < tol,
        "projection_linf_ball": lambda: v.abs().max() <= scale + tol,
        "projection_non_negative": lambda: bool((v >= 0).all()),
        "projection_hypercube": lambda: bool((v >= 0).all() and (v <= scale).all()),
    }
    return checks[name]()


CONVEX = ["projection_simplex", "projection_l1_ball", "projection_l2_ball",
          "projection_linf_ball", "projection_hypercube"]


def project(name, tree, scale):
    if name == "projection_non_negative":
        return proj.projection_non_negative(tree)
    return getattr(proj, name)(tree, scale)


@settings(max_examples=25)
@given(values=vectors, other=vectors, scale=st.floats(0.1, 5.0),
       name=st.sampled_from([*CONVEX, "projection_non_negative", "projection_l1_sphere",
                             "projection_l2_sphere"]))
def test_projection_properties(values, other, scale, name):
    size = min(len(values), len(other))
    x, y = as_tree(values[:size]), as_tree(other[:size])
    if name == "projection_l2_sphere" and flat(x).norm() == 0:
        return  # the l2 sphere projection of 0 is undefined (NaN), as in Optax
    px = project(name, x, scale)
    assert feasible(name, px, scale)
    torch.testing.assert_close(flat(project(name, px, scale)), flat(px), rtol=1e-9, atol=1e-9)
    # The projection is the closest feasible point: a feasible y is no closer to x.
    py = project(name, y, scale)
    assert (flat(x) - flat(px)).norm() <= (flat(x) - flat(py)).norm() + 1e-9
    if name in [*CONVEX, "projection_non_negative"]:
        assert (flat(px) - flat(py)).norm() <= (flat(x) - flat(y)).norm() + 1e-9


@settings(max_examples=25)
@given(values=vectors, other=vectors, b=st.floats(-5, 5))
def test_affine_projection_properties(values, other, b):
    size = min(len(values), len(other))
    x, a = as_tree(values[:size]), as_tree(other[:size])
    if flat(a).norm() < 1e-3:
        return  # the hyperplane is undefined for a = 0
    on_plane = proj.projection_hyperplane(x, a, b)
    assert abs(tree_utils.tree_vdot(a, on_plane) - b) < 1e-8 * (1 + flat(x).norm() * flat(a).norm())
    in_half = proj.projection_halfspace(x, a, b)
    assert tree_utils.tree_vdot(a, in_half) <= b + 1e-8 * (1 + flat(x).norm() * flat(a).norm())
    torch.testing.assert_close(flat(proj.projection_halfspace(in_half, a, b)), flat(in_half))
    line = proj.projection_vector(x, a)
    torch.testing.assert_close(flat(proj.projection_vector(line, a)), flat(line))
    # The residual is orthogonal to a.
    residual = tree_utils.tree_sub(x, line)
    assert abs(tree_utils.tree_vdot(residual, a)) < 1e-8 * (1 + flat(x).norm() * flat(a).norm())



def test_inputs_are_not_modified():
    tree = make_tree(torch.float64, seed=6)
    other = make_tree(torch.float64, seed=8)
    snapshot = [leaf.clone() for leaf in tree_math.leaves(tree)]
    for name in RADIUS_PROJECTIONS:
        getattr(proj, name)(tree, 0.5)
    proj.projection_non_negative(tree)
    proj.projection_box(tree, -0.1, 0.1)
    proj.projection_halfspace(tree, other, -1.0)
    assert all(torch.equal(a, b) for a, b in zip(tree_math.leaves(tree), snapshot))
