"""Every ``optax_compat.tree_utils`` / ``optax_compat.tree`` function against real Optax."""

import math
from typing import NamedTuple

import numpy as np
import optax
import pytest
import torch

import optax_compat as ox
from optax_compat.testing import assert_leaves_close, jax_precision, make_tree, to_jax

DTYPES = [torch.float32, torch.float64]


def _both(dtype, fn_name, *trees, **kwargs):
    with jax_precision(dtype):
        theirs = getattr(optax.tree_utils, fn_name)(*[to_jax(t) for t in trees], **kwargs)
    ours = getattr(ox.tree_utils, fn_name)(*trees, **kwargs)
    return ours, theirs


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["tree_add", "tree_sub", "tree_mul", "tree_div", "tree_vdot"])
def test_binary_ops(dtype, name):
    a, b = make_tree(dtype, 1), make_tree(dtype, 2)
    ours, theirs = _both(dtype, name, a, b)
    assert_leaves_close(ours, theirs)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tree_add_many(dtype):
    ours, theirs = _both(dtype, "tree_add", make_tree(dtype, 1), make_tree(dtype, 2),
                         make_tree(dtype, 3))
    assert_leaves_close(ours, theirs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scalar", [0.3, -2.0])
def test_scale_and_add_scale(dtype, scalar):
    a, b = make_tree(dtype, 1), make_tree(dtype, 2)
    with jax_precision(dtype):
        theirs_scale = optax.tree_utils.tree_scale(scalar, to_jax(a))
        theirs_add = optax.tree_utils.tree_add_scale(to_jax(a), scalar, to_jax(b))
    assert_leaves_close(ox.tree_utils.tree_scale(scalar, a), theirs_scale)
    assert_leaves_close(ox.tree_utils.tree_add_scale(a, scalar, b), theirs_add)
    assert_leaves_close(ox.tree_utils.tree_add_scale(a, torch.tensor(scalar, dtype=dtype), b),
                        theirs_add)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["tree_sum", "tree_max", "tree_min", "tree_size", "tree_conj",
                                  "tree_real", "tree_zeros_like", "tree_ones_like"])
def test_unary(dtype, name):
    ours, theirs = _both(dtype, name, make_tree(dtype, 4))
    assert_leaves_close(ours, theirs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ord", [None, 1, 2, math.inf, "inf"])
@pytest.mark.parametrize("squared", [False, True])
def test_tree_norm(dtype, ord, squared):
    ours, theirs = _both(dtype, "tree_norm", make_tree(dtype, 5), ord=ord, squared=squared)
    assert_leaves_close(ours, theirs)


def test_tree_norm_rejects_unknown_ord():
    with pytest.raises(ValueError, match="Unsupported ord"):
        ox.tree_utils.tree_norm(make_tree(), ord=3)


def test_tree_norm_complex():
    tree = {"z": torch.tensor([3 + 4j, 1j], dtype=torch.complex128)}
    ours, theirs = _both(torch.float64, "tree_norm", tree)
    assert_leaves_close(ours, theirs)


def test_empty_tree_reductions():
    assert ox.tree_utils.tree_sum({}).item() == 0
    assert ox.tree_utils.tree_max({}).item() == -math.inf
    assert ox.tree_utils.tree_min([]).item() == math.inf
    assert ox.tree_utils.tree_norm({}).item() == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_fill_clip_batch_where(dtype):
    tree = make_tree(dtype, 6)
    ours, theirs = _both(dtype, "tree_full_like", tree, 2.5)
    assert_leaves_close(ours, theirs)
    ours, theirs = _both(dtype, "tree_clip", tree, -0.5, 0.25)
    assert_leaves_close(ours, theirs)
    ours, theirs = _both(dtype, "tree_clip", tree, None, 0.1)
    assert_leaves_close(ours, theirs)
    ours, theirs = _both(dtype, "tree_batch_shape", tree, shape=(2, 3))
    assert_leaves_close(ours, theirs)
    for condition in (True, False):
        ours, theirs = _both(dtype, "tree_where", condition, tree, make_tree(dtype, 7))
        assert_leaves_close(ours, theirs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("order", [1, 2, 3])
def test_moments(dtype, order):
    g, m = make_tree(dtype, 8), make_tree(dtype, 9, scale=0.1)
    for name in ("tree_update_moment", "tree_update_moment_per_elem_norm"):
        ours, theirs = _both(dtype, name, g, m, 0.9, order)
        assert_leaves_close(ours, theirs)
    ours, theirs = _both(dtype, "tree_update_infinity_moment", g, m, 0.9, 1e-8)
    assert_leaves_close(ours, theirs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("count", [1, 2, 10])
def test_bias_correction(dtype, count):
    m = make_tree(dtype, 10)
    with jax_precision(dtype):
        theirs = optax.tree_utils.tree_bias_correction(to_jax(m), 0.999, np.int32(count))
    ours = ox.tree_utils.tree_bias_correction(m, 0.999, torch.tensor(count, dtype=torch.int32))
    assert_leaves_close(ours, theirs)


def test_allclose_and_casting():
    a = make_tree(torch.float32, 1)
    assert ox.tree_utils.tree_allclose(a, a)
    assert not ox.tree_utils.tree_allclose(a, ox.tree_utils.tree_scale(2.0, a))
    cast = ox.tree_utils.tree_cast(a, torch.float64)
    assert ox.tree_utils.tree_dtype(cast) == torch.float64
    assert ox.tree_utils.tree_cast(a, None) is a
    back = ox.tree_utils.tree_cast_like(cast, a)
    assert ox.tree_utils.tree_dtype(back) == torch.float32


@pytest.mark.parametrize("handler,expected", [("promote", torch.float64),
                                              ("highest", torch.float64),
                                              ("lowest", torch.float16)])
def test_tree_dtype_mixed(handler, expected):
    tree = {"a": torch.ones(1, dtype=torch.float16), "b": torch.ones(1, dtype=torch.float64)}
    assert ox.tree_utils.tree_dtype(tree, handler) == expected
    with pytest.raises(ValueError, match="Expected dtype"):
        ox.tree_utils.tree_dtype(tree)
    with pytest.raises(ValueError, match="Invalid value"):
        ox.tree_utils.tree_dtype(tree, "max")


def test_random_like_is_reproducible_and_shaped():
    tree = make_tree(torch.float64)
    first = ox.tree_utils.tree_random_like(0, tree)
    again = ox.tree_utils.tree_random_like(0, tree)
    other = ox.tree_utils.tree_random_like(1, tree)
    assert ox.tree_utils.tree_allclose(first, again, rtol=0, atol=0)
    assert not ox.tree_utils.tree_allclose(first, other)
    assert ox.tree.dtype(first) == torch.float64
    ox.tree_utils._tree_math.tm.check_same_structure(tree, first, "random tree")
    keys = ox.tree_utils.tree_split_key_like(torch.Generator().manual_seed(3), tree)
    assert len(set(int(k) for k in ox.tree_utils._tree_math.tm.leaves(keys))) == 5
    big = ox.tree_utils.tree_random_like(7, {"x": torch.zeros(20000)})["x"]
    assert abs(big.mean().item()) < 0.05 and abs(big.std().item() - 1) < 0.05


def test_mismatched_trees_raise_value_error_naming_the_path():
    a = {"x": torch.ones(2), "y": [torch.ones(1), torch.ones(1)]}
    b = {"x": torch.ones(2), "y": [torch.ones(1)]}
    with pytest.raises(ValueError, match=r"\['y'\]\[1\]"):
        ox.tree_utils.tree_add(a, b)
    with pytest.raises(ValueError, match=r"\['z'\]|\['y'\]"):
        ox.tree_utils.tree_vdot(a, {"x": torch.ones(2), "z": [torch.ones(1), torch.ones(1)]})


def test_tree_namespace_aliases_are_the_tree_utils_functions():
    for name in ["add", "sub", "mul", "div", "scale", "add_scale", "vdot", "sum", "norm", "max",
                 "min", "size", "where", "clip", "cast", "get", "set", "map_params",
                 "zeros_like", "ones_like", "full_like", "random_like", "update_moment",
                 "bias_correction", "allclose", "batch_shape", "conj", "real", "dtype",
                 "cast_like", "split_key_like", "unwrap_random_key_data", "get_all_with_path",
                 "update_infinity_moment", "update_moment_per_elem_norm"]:
        assert getattr(ox.tree, name) is getattr(ox.tree_utils, f"tree_{name}")


class Inner(NamedTuple):
    count: torch.Tensor
    mu: dict


class Outer(NamedTuple):
    inner: Inner
    hyperparams: dict
    other: tuple


def _state(dtype=torch.float64):
    return Outer(inner=Inner(count=torch.tensor(3), mu={"a": torch.ones(2, dtype=dtype)}),
                 hyperparams={"learning_rate": torch.tensor(0.1, dtype=dtype)},
                 other=(Inner(count=torch.tensor(5), mu={"a": torch.zeros(2, dtype=dtype)}),))


def test_tree_get_all_with_path_matches_optax():
    state = _state()
    for key in ["count", "mu", "learning_rate", "Inner", "missing"]:
        ours = ox.tree_utils.tree_get_all_with_path(state, key)
        with jax_precision(torch.float64):
            theirs = optax.tree_utils.tree_get_all_with_path(to_jax(state), key)
        assert [tuple(map(str, p)) for p, _ in ours] == [tuple(map(str, p)) for p, _ in theirs]
        assert_leaves_close([v for _, v in ours], [v for _, v in theirs])


def test_tree_get_and_set_match_optax():
    state = _state()
    assert ox.tree_utils.tree_get(state, "learning_rate").item() == pytest.approx(0.1)
    assert ox.tree_utils.tree_get(state, "missing", default=7) == 7
    with pytest.raises(KeyError, match="multiple"):
        ox.tree_utils.tree_get(state, "count")
    only_outer = lambda path, _: len(path) == 2
    assert ox.tree_utils.tree_get(state, "count", filtering=only_outer).item() == 3
    new = ox.tree_utils.tree_set(state, learning_rate=torch.tensor(0.5, dtype=torch.float64))
    with jax_precision(torch.float64):
        theirs = optax.tree_utils.tree_set(to_jax(state), learning_rate=np.float64(0.5))
    assert_leaves_close(new, theirs)
    assert type(new) is Outer and state.hyperparams["learning_rate"].item() == pytest.approx(0.1)
    counted = ox.tree_utils.tree_set(state, only_outer, count=torch.tensor(0))
    assert counted.inner.count.item() == 0 and counted.other[0].count.item() == 5
    with pytest.raises(KeyError, match="no values"):
        ox.tree_utils.tree_set(state, nothing=1)


def test_tree_map_params_maps_only_params_shaped_parts():
    def init(params):
        return Inner(count=torch.tensor(0), mu=params)

    params = {"a": torch.ones(2)}
    state = init(params)
    mapped = ox.tree_utils.tree_map_params(init, lambda x: x * 3, state,
                                           transform_non_params=lambda v: v + 1)
    assert torch.equal(mapped.mu["a"], torch.full((2,), 3.0))
    assert mapped.count.item() == 1
    tx = ox.GradientTransformation(init, None)
    mapped = ox.tree_map_params(tx, lambda x: x - 1, state)
    assert torch.equal(mapped.mu["a"], torch.zeros(2)) and mapped.count.item() == 0


def test_named_tuple_key():
    key = ox.tree_utils.NamedTupleKey("ScaleByAdamState", "mu")
    assert str(key) == "ScaleByAdamState.mu" and key.name == "mu"


@pytest.mark.parametrize("factory", ["adam", "sgd"])
def test_tree_map_params_on_real_optimizer_states_matches_optax(factory):
    kwargs = dict(learning_rate=0.1, momentum=0.9) if factory == "sgd" else dict(learning_rate=0.1)
    params = make_tree(torch.float64)
    ours_tx = getattr(ox, factory)(**kwargs)
    ours = ox.tree_utils.tree_map_params(ours_tx, lambda p: p + 1, ours_tx.init(params),
                                         transform_non_params=lambda v: v * 0)
    with jax_precision(torch.float64):
        theirs_tx = getattr(optax, factory)(**kwargs)
        theirs = optax.tree_utils.tree_map_params(
            theirs_tx, lambda p: p + 1, theirs_tx.init(to_jax(params)),
            transform_non_params=lambda v: v * 0)
    assert_leaves_close(ours, theirs)
