"""Property tests of optax_compat.tree_utils arithmetic on random pytrees.

Trees are drawn with optax_compat.testing.strategies: nested dict/list/tuple/NamedTuple, 0-d
leaves, empty dimensions, None subtrees, float32 and float64.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from optax_compat import tree_utils as otu
from optax_compat._runtime import tree_math
from optax_compat.testing import assert_tree_structure_equal, assert_trees_all_close
from optax_compat.testing.strategies import matching_trees, pytrees

# Derandomized: the suite sees the same examples on every run (explore with more locally).
SETTINGS = settings(max_examples=25)
# Leaves with empty dimensions and trees without any leaf are part of the domain.
trees = pytrees(min_leaves=0, max_leaves=5, allow_empty=True)


def tree_pairs(**kwargs):
    return pytrees(**kwargs).flatmap(lambda a: st.tuples(st.just(a), matching_trees(a)))


@SETTINGS
@given(tree_pairs(min_leaves=0, allow_empty=True))
def test_add_undoes_sub(pair):
    a, b = pair
    # |a|, |b| <= 10, so rounding b - a and adding a back is off by at most a few ulps of 20.
    atol = {torch.float32: 1e-5, torch.float64: 1e-13}
    assert_trees_all_close(otu.tree_add(a, otu.tree_sub(b, a)), b, rtol=0.0, atol=atol)


@SETTINGS
@given(pytrees(min_leaves=1, allow_empty=True))
def test_vdot_with_itself_is_squared_norm(tree):
    vdot = otu.tree_vdot(tree, tree)
    squared_norm = otu.tree_norm(tree, 2, squared=True)
    assert vdot.shape == squared_norm.shape == ()
    assert_trees_all_close(vdot, squared_norm, rtol={torch.float32: 1e-5, torch.float64: 1e-12},
                           atol=1e-30)


def test_vdot_and_norm_of_a_tree_without_leaves_are_zero():
    assert float(otu.tree_vdot({"a": None}, {"a": None})) == 0.0
    assert float(otu.tree_norm([], 2, squared=True)) == 0.0


# Every tree-valued arithmetic function of tree_utils, as a function of two matching trees.
TREE_FUNCTIONS = {
    "tree_add": lambda a, b: otu.tree_add(a, b),
    "tree_add_three": lambda a, b: otu.tree_add(a, b, a),
    "tree_sub": lambda a, b: otu.tree_sub(a, b),
    "tree_mul": lambda a, b: otu.tree_mul(a, b),
    "tree_div": lambda a, b: otu.tree_div(a, b),
    "tree_scale": lambda a, b: otu.tree_scale(0.5, a),
    "tree_scale_tensor": lambda a, b: otu.tree_scale(torch.tensor(0.5), a),
    "tree_add_scale": lambda a, b: otu.tree_add_scale(a, -2.0, b),
    "tree_conj": lambda a, b: otu.tree_conj(a),
    "tree_real": lambda a, b: otu.tree_real(a),
    "tree_clip": lambda a, b: otu.tree_clip(a, -1.0, 1.0),
    "tree_where": lambda a, b: otu.tree_where(torch.tensor(True), a, b),
    "tree_zeros_like": lambda a, b: otu.tree_zeros_like(a),
    "tree_ones_like": lambda a, b: otu.tree_ones_like(a),
    "tree_full_like": lambda a, b: otu.tree_full_like(a, 3.0),
    "tree_batch_shape": lambda a, b: otu.tree_batch_shape(a),
    "tree_cast_like": lambda a, b: otu.tree_cast_like(a, b),
    "tree_update_moment": lambda a, b: otu.tree_update_moment(a, b, 0.9, 2),
    "tree_update_infinity_moment": lambda a, b: otu.tree_update_infinity_moment(a, b, 0.9, 1e-8),
    "tree_update_moment_per_elem_norm":
        lambda a, b: otu.tree_update_moment_per_elem_norm(a, b, 0.9, 2),
    "tree_bias_correction": lambda a, b: otu.tree_bias_correction(a, 0.9, 3),
}


def snapshot(tree):
    return [(leaf, leaf._version, leaf.clone()) for leaf in tree_math.leaves(tree)]


def assert_untouched(records, what):
    for leaf, version, values in records:
        assert leaf._version == version, f"{what} was written in place"
        assert torch.equal(leaf, values), f"{what} changed"


@pytest.mark.parametrize("name", sorted(TREE_FUNCTIONS))
@SETTINGS
@given(pair=tree_pairs(min_leaves=0, allow_empty=True))
def test_structure_and_shapes_preserved_and_inputs_untouched(name, pair):
    a, b = pair
    before_a, before_b = snapshot(a), snapshot(b)
    result = TREE_FUNCTIONS[name](a, b)
    assert_tree_structure_equal(a, result, what=f"the result of {name}")
    for leaf, out in zip(tree_math.leaves(a), tree_math.leaves(result)):
        assert out.shape == leaf.shape
        assert out.dtype == leaf.dtype
    assert_untouched(before_a, "the first tree")
    assert_untouched(before_b, "the second tree")
