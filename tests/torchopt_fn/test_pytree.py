"""torchopt_fn.pytree: optree's API re-exported plus arithmetic over leaves."""

import operator
from collections import namedtuple

import optree
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from optax_compat.testing import strategies, tolerance
from torchopt_fn import pytree

Pair = namedtuple("Pair", ["left", "right"])


def test_reexports_optree_and_torchopt_helpers():
    for name in optree.__all__:
        assert getattr(pytree, name) is getattr(optree, name), name
    for name in ("tree_flatten_as_tuple", "tree_pos", "tree_neg", "tree_add",
                 "tree_add_scalar_mul", "tree_sub", "tree_sub_scalar_mul", "tree_mul",
                 "tree_matmul", "tree_scalar_mul", "tree_truediv", "tree_vdot_real", "tree_wait"):
        assert name in pytree.__all__ and callable(getattr(pytree, name))


def test_none_is_a_node_and_flatten_as_tuple():
    tree = {"b": (torch.ones(1), None), "a": [torch.zeros(2)]}
    leaves, treespec = pytree.tree_flatten_as_tuple(tree)
    assert isinstance(leaves, tuple) and len(leaves) == 2
    assert leaves[0].shape == (2,)  # sorted dict keys
    assert pytree.tree_unflatten(treespec, leaves)["b"][1] is None
    leaves, _ = pytree.tree_flatten_as_tuple(tree, none_is_leaf=True)
    assert len(leaves) == 3


def _random_tree(seed, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(3, 2, generator=gen, dtype=dtype),
            "pair": Pair(torch.randn(4, generator=gen, dtype=dtype),
                         torch.randn((), generator=gen, dtype=dtype)),
            "skip": None}


def _leafwise(op, *trees):
    return optree.tree_map(op, *trees)


def _assert_trees_close(actual, expected):
    assert optree.tree_structure(actual) == optree.tree_structure(expected)
    for a, e in zip(optree.tree_leaves(actual), optree.tree_leaves(expected)):
        assert a.dtype == e.dtype
        levels = {torch.float32: 1e-6, torch.float64: 1e-12}
        torch.testing.assert_close(a, e, **tolerance(a, e, rtol=levels, atol=levels)._asdict())


@st.composite
def _three_trees(draw):
    """Trees of mixed float32/float64 leaves (the foreach path groups them) and two matches."""
    x = draw(strategies.pytrees(dtypes=(torch.float32, torch.float64), mixed_dtypes=True,
                                max_leaves=4))
    return x, draw(strategies.matching_trees(x)), draw(strategies.matching_trees(x))


@settings(max_examples=25)
@given(trees=_three_trees(), alpha=st.floats(-3, 3))
def test_arithmetic_matches_leafwise_operators(trees, alpha):
    x, y, z = trees
    y_nonzero = optree.tree_map(lambda t: t.abs() + 0.5, y)
    cases = [
        (pytree.tree_pos(x), _leafwise(operator.pos, x)),
        (pytree.tree_neg(x), _leafwise(operator.neg, x)),
        (pytree.tree_add(x, y, z), _leafwise(lambda a, b, c: a + b + c, x, y, z)),
        (pytree.tree_sub(x, y), _leafwise(operator.sub, x, y)),
        (pytree.tree_mul(x, y, z), _leafwise(lambda a, b, c: a * b * c, x, y, z)),
        (pytree.tree_truediv(x, y_nonzero), _leafwise(operator.truediv, x, y_nonzero)),
        (pytree.tree_scalar_mul(alpha, x), _leafwise(lambda a: alpha * a, x)),
        (pytree.tree_add_scalar_mul(x, y), _leafwise(operator.add, x, y)),
        (pytree.tree_add_scalar_mul(x, y, alpha), _leafwise(lambda a, b: a + alpha * b, x, y)),
        (pytree.tree_sub_scalar_mul(x, y), _leafwise(operator.sub, x, y)),
        (pytree.tree_sub_scalar_mul(x, y, alpha), _leafwise(lambda a, b: a - alpha * b, x, y)),
    ]
    for actual, expected in cases:
        _assert_trees_close(actual, expected)
    expected_vdot = sum(float((a.double() * b.double()).sum())
                        for a, b in zip(optree.tree_leaves(x), optree.tree_leaves(y)))
    assert pytree.tree_vdot_real(x, y) == pytest.approx(expected_vdot, rel=1e-5, abs=1e-4)


def test_arithmetic_pure_and_on_non_tensor_leaves_and_under_vmap():
    x = _random_tree(0)
    before = optree.tree_map(torch.clone, x)
    pytree.tree_add_scalar_mul(x, x, 2.0)
    _assert_trees_close(x, before)  # inputs untouched
    assert pytree.tree_add({"a": 1, "b": 2.5}, {"a": 2, "b": 0.5}) == {"a": 3, "b": 3.0}
    assert pytree.tree_scalar_mul(2, [1, 3]) == [2, 6]

    def combine(a, b):
        return pytree.tree_sub_scalar_mul(pytree.tree_mul(a, b), a, 0.5)["u"]

    a, b = {"u": torch.randn(4, 3)}, {"u": torch.randn(4, 3)}
    batched = torch.func.vmap(combine)(a, b)
    torch.testing.assert_close(batched, a["u"] * b["u"] - 0.5 * a["u"])


def test_matmul_and_complex_vdot():
    a = {"m": torch.randn(2, 3), "n": torch.randn(4, 4)}
    b = {"m": torch.randn(3, 5), "n": torch.randn(4, 2)}
    _assert_trees_close(pytree.tree_matmul(a, b), _leafwise(operator.matmul, a, b))
    x = torch.tensor([1 + 2j, 3 - 1j])
    y = torch.tensor([2 - 1j, 1j])
    assert pytree.tree_vdot_real(x, y) == pytest.approx(float(torch.vdot(x, y).real))
    assert pytree.tree_vdot_real([x], [y.real]) == pytest.approx(float((x.real * y.real).sum()))


def test_structure_mismatch_is_an_error():
    with pytest.raises(ValueError):
        pytree.tree_add({"a": torch.ones(1)}, {"b": torch.ones(1)})
    with pytest.raises(ValueError):
        pytree.tree_vdot_real([torch.ones(1)], (torch.ones(1),))


def test_tree_wait():
    futures = {"a": torch.futures.Future(), "b": [torch.futures.Future()]}
    futures["a"].set_result(torch.ones(1))
    futures["b"][0].set_result(torch.zeros(2))
    results = pytree.tree_wait(futures)
    assert torch.equal(results["a"], torch.ones(1)) and torch.equal(results["b"][0], torch.zeros(2))
