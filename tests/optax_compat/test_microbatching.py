"""optax_compat.microbatching: against real Optax on the same numbers, plus gradients and errors."""

import dataclasses
import functools
import inspect

import jax
import jax.numpy as jnp
import optax
import pytest
import torch

from optax_compat import microbatching as mb
from optax_compat._runtime import tree_math
from optax_compat.testing import assert_leaves_close, jax_precision, make_tree, seeded_randn, to_jax

theirs_mb = optax.microbatching
DTYPES = [torch.float32, torch.float64]
ACC = mb.AccumulationType
ALL_TYPES = list(ACC)


def same_type_in_optax(accumulator):
    """The Optax accumulator (tree) corresponding to ours."""
    return tree_math.tree_map(lambda acc: theirs_mb.AccumulationType[acc.name], accumulator)


def check_against_optax(ours_fun, theirs_fun, args, kwargs, dtype, **microbatch_kwargs):
    """Runs ``microbatch`` in both worlds on the same inputs and compares the results."""
    accumulator = microbatch_kwargs.pop("accumulator", ACC.SUM)
    ours = mb.microbatch(ours_fun, accumulator=accumulator, **microbatch_kwargs)(*args, **kwargs)
    with jax_precision(dtype):
        theirs = theirs_mb.microbatch(theirs_fun, accumulator=same_type_in_optax(accumulator),
                                      **microbatch_kwargs)(*to_jax(args), **to_jax(kwargs))
        assert_leaves_close(ours, theirs)
    return ours


# The test functions of Optax's own suite, written once for both worlds (``np`` is torch or jnp).
def per_example(np, nonbatch, batch1, batch2):
    return batch1 * batch2, batch1 / batch2 * nonbatch


def summed(np, nonbatch, batch1, batch2):
    return np.sum(nonbatch + batch1 + 2 * batch2, 0)


def averaged(np, nonbatch, batch1, batch2):
    return np.mean(nonbatch * batch1), {"key": np.mean(batch2)}


def all_three(np, nonbatch, batch1, batch2):
    return {"per_example": per_example(np, nonbatch, batch1, batch2),
            "sum": summed(np, nonbatch, batch1, batch2),
            "mean": averaged(np, nonbatch, batch1, batch2)}


FUNCTIONS = {
    "per_example": (per_example, ACC.CONCAT),
    "sum": (summed, ACC.SUM),
    "mean": (averaged, ACC.MEAN),
    "running_mean": (averaged, ACC.RUNNING_MEAN),
    "all_three": (all_three, {"per_example": ACC.CONCAT, "sum": ACC.SUM, "mean": ACC.MEAN}),
}


@pytest.mark.parametrize("name", ["AccumulationType", "Accumulator", "micro_grad", "micro_vmap",
                                  "microbatch", "reshape_batch_axis"])
def test_public_names_and_signatures_match_optax(name):
    ours, theirs = getattr(mb, name), getattr(theirs_mb, name)
    if inspect.isfunction(theirs):
        ours_params = inspect.signature(ours).parameters
        theirs_params = inspect.signature(theirs).parameters
        assert [(p.name, p.kind) for p in ours_params.values()] == [
            (p.name, p.kind) for p in theirs_params.values()]
        for p in theirs_params.values():
            if isinstance(p.default, (int, float, bool, type(None), tuple, str)):
                assert ours_params[p.name].default == p.default, p.name
            elif isinstance(p.default, theirs_mb.AccumulationType):
                assert ours_params[p.name].default.name == p.default.name
    elif name == "AccumulationType":
        assert [m.name for m in ours] == [m.name for m in theirs]
    else:
        assert [f.name for f in dataclasses.fields(ours)] == [
            f.name for f in dataclasses.fields(theirs)]


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_reshape_batch_axis_matches_optax(axis):
    tree = {"a": seeded_randn(6, 6, 6, dtype=torch.float32),
            "b": (seeded_randn(6, 6, 6, dtype=torch.float32, seed=1),)}
    ours = mb.reshape_batch_axis(tree, 3, axis)
    assert_leaves_close(ours, theirs_mb.reshape_batch_axis(to_jax(tree), 3, axis) if axis else
                        theirs_mb.reshape_batch_axis(to_jax(tree), 3), rtol=0, atol=0)
    assert ours["a"].shape[axis:axis + 2] == (2, 3)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("microbatch_size", [1, 2, 5, 10])
def test_microbatch_matches_optax_and_the_full_batch(dtype, name, microbatch_size):
    fun, accumulator = FUNCTIONS[name]
    args = (seeded_randn(dtype=dtype, seed=0), seeded_randn(10, 3, dtype=dtype, seed=1),
            seeded_randn(10, 3, dtype=dtype, seed=2))
    ours = check_against_optax(functools.partial(fun, torch), functools.partial(fun, jnp),
                               args, {}, dtype, argnums=(1, 2),
                               microbatch_size=microbatch_size, accumulator=accumulator)
    assert_leaves_close(ours, fun(torch, *args), rtol={torch.float32: 1e-4})


@pytest.mark.parametrize("accumulator", ALL_TYPES)
def test_in_axes_and_argnames_match_optax(accumulator):
    dtype = torch.float64
    arg0 = seeded_randn(10, 4, 5, dtype=dtype)
    arg1 = arg0.transpose(0, 1).contiguous()

    def fun(np, a, b):
        return np.einsum("bij,kbj->ik", a, b)

    ours_fun, theirs_fun = functools.partial(fun, torch), functools.partial(fun, jnp)
    common = {"microbatch_size": 2, "accumulator": accumulator}
    reference = check_against_optax(ours_fun, theirs_fun, (arg0, arg1), {}, dtype,
                                    argnums=(0, 1), in_axes=(0, 1), **common)
    variants = [
        ((arg0, arg1), {}, {"argnums": (1, 0), "in_axes": (1, 0)}),
        ((), {"a": arg0, "b": arg1}, {"argnums": (), "argnames": ("a", "b"), "in_axes": (0, 1)}),
        ((), {"b": arg1, "a": arg0}, {"argnums": (), "argnames": ("b", "a"), "in_axes": (1, 0)}),
        ((arg0,), {"b": arg1}, {"argnums": 0, "argnames": "b", "in_axes": (0, 1)}),
    ]
    for args, kwargs, options in variants:
        fun_of_kwargs = (lambda np: lambda a, b: fun(np, a, b))
        ours = check_against_optax(fun_of_kwargs(torch), fun_of_kwargs(jnp), args, kwargs, dtype,
                                   **options, **common)
        assert_leaves_close(ours, reference)


@pytest.mark.parametrize("accumulator", [ACC.SUM, ACC.RUNNING_MEAN, ACC.CONCAT])
def test_early_stopping_matches_optax(accumulator):
    x = torch.arange(12, dtype=torch.float32) + 1
    ours = check_against_optax(lambda v: v * 2, lambda v: v * 2, (x,), {}, torch.float32,
                               argnums=0, microbatch_size=3, num_real_microbatches=2,
                               accumulator=accumulator)
    if accumulator is ACC.CONCAT:
        assert int((ours != 0).sum()) == 6
    dynamic = mb.microbatch(torch.sum, argnums=0, microbatch_size=4,
                            num_real_microbatches=torch.tensor(4))(torch.ones(128))
    assert float(dynamic) == 16.0


def test_nondecomposable_function_sees_strided_microbatches():
    x = torch.arange(6, dtype=torch.float32)
    out = mb.microbatch(lambda v: v[:-1] @ v[1:], argnums=0, microbatch_size=3)(x)
    assert float(out) == 0 * 2 + 2 * 4 + 1 * 3 + 3 * 5


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_result_keeps_the_dtype(dtype):
    args = (seeded_randn(dtype=dtype), seeded_randn(10, 3, dtype=dtype, seed=1),
            seeded_randn(10, 3, dtype=dtype, seed=2))
    out = mb.microbatch(functools.partial(summed, torch), argnums=(1, 2), microbatch_size=2)(*args)
    assert out.dtype == dtype


def test_non_batch_arguments_pass_through_and_custom_accumulator():
    def fun(a, b, c, *, d, e):
        return torch.sum(a + b + c + d + e)

    ones = torch.ones(16)
    expected = mb.microbatch(fun, argnums=(0, 1), microbatch_size=2)(ones, ones, 1, d=2, e=3)
    assert float(expected) == 16 * 8
    assert float(mb.microbatch(fun, argnums=(), argnames=("b", "a"), microbatch_size=2)(
        a=ones, b=ones, c=1, d=2, e=3)) == 16 * 8
    largest = mb.Accumulator(init=lambda v: torch.full_like(v, -torch.inf),
                             update=lambda carry, v, _: torch.maximum(carry, v),
                             finalize=lambda carry: carry,
                             aggregate=lambda v: v.max(0).values)
    x = torch.tensor([1.0, 5.0, 2.0, 3.0, 0.0, 1.0])
    out = mb.microbatch(torch.sum, argnums=0, microbatch_size=2, accumulator=largest)(x)
    assert float(out) == 5.0  # microbatches [1, 3], [5, 0], [2, 1]
    assert mb.microbatch(torch.sum, argnums=0, microbatch_size=None) is torch.sum


@pytest.mark.parametrize("dtype", DTYPES)
def test_micro_vmap_matches_optax(dtype):
    x = seeded_randn(2, 4, 8, dtype=dtype)
    ours = mb.micro_vmap(torch.sum, in_axes=1, microbatch_size=2)(x)
    with jax_precision(dtype):
        assert_leaves_close(
            ours, theirs_mb.micro_vmap(jnp.sum, in_axes=1, microbatch_size=2)(to_jax(x)))
        assert_leaves_close(ours, jax.vmap(jnp.sum, in_axes=1)(to_jax(x)))

    y = seeded_randn(4, 8, dtype=dtype, seed=3)

    def fun(np, a, *, b):
        return {"total": np.sum(a + b), "none": None, "pair": (a * b, np.max(a))}

    accumulator = {"total": ACC.MEAN, "none": ACC.SUM, "pair": (ACC.CONCAT, ACC.SUM)}
    ours = mb.micro_vmap(functools.partial(fun, torch), microbatch_size=2,
                         accumulator=accumulator)(x[0], b=y)
    with jax_precision(dtype):
        theirs = theirs_mb.micro_vmap(functools.partial(fun, jnp), microbatch_size=2,
                                      accumulator=same_type_in_optax(accumulator))(
            to_jax(x[0]), b=to_jax(y))
        assert_leaves_close(ours, theirs)
    assert ours["none"] is None


def test_micro_vmap_early_stopping_and_integer_mean():
    out = mb.micro_vmap(torch.sum, microbatch_size=4, num_real_microbatches=3,
                        accumulator=ACC.SUM)(torch.ones(16))
    assert float(out) == 12.0
    ints = torch.arange(8)
    assert torch.equal(mb.micro_vmap(lambda v: v ** 2, microbatch_size=4)(ints), ints ** 2)
    # jnp.mean of integers is a float: so is the per-microbatch MEAN aggregate.
    mean = mb.micro_vmap(lambda v: v * 2, microbatch_size=4, accumulator=ACC.MEAN)(ints)
    assert mean.dtype == torch.get_default_dtype() and float(mean) == 7.0


def mean_squared_loss(np, keep_batch_dim, params, features, targets):
    assert features.ndim == int(keep_batch_dim) + 1
    diff = features @ params["w"] + params["b"] - targets
    return 0.5 * np.mean(diff ** 2), {"diff": diff}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("keep_batch_dim", [False, True])
@pytest.mark.parametrize("accumulator", [ACC.SUM, ACC.MEAN])
def test_micro_grad_matches_optax(dtype, keep_batch_dim, accumulator):
    params = {"w": seeded_randn(3, dtype=dtype), "b": seeded_randn(dtype=dtype, seed=1)}
    features = seeded_randn(8, 3, dtype=dtype, seed=2)
    targets = seeded_randn(8, dtype=dtype, seed=3)

    def options(np, linalg_norm):
        return {"has_aux": True, "argnums": 0, "batch_argnums": (1, 2),
                "keep_batch_dim": keep_batch_dim, "microbatch_size": 4,
                "transform_fn": lambda g: (g, jax.tree.map(lambda x: x ** 2, g))
                if np is jnp else (g, tree_math.tree_map(lambda x: x ** 2, g)),
                "metrics_fn": lambda g: linalg_norm(g["w"])}

    ours = mb.micro_grad(functools.partial(mean_squared_loss, torch, keep_batch_dim),
                         accumulator=accumulator, **options(torch, torch.linalg.norm))(
        params, features, targets)
    with jax_precision(dtype):
        theirs = theirs_mb.micro_grad(
            functools.partial(mean_squared_loss, jnp, keep_batch_dim),
            accumulator=theirs_mb.AccumulationType[accumulator.name],
            **options(jnp, jnp.linalg.norm))(*to_jax((params, features, targets)))
        assert_leaves_close(ours, theirs)
    assert type(ours[1]).__name__ == "Aux" and ours[1]._fields == ("values", "metrics", "aux")


def test_micro_grad_defaults_and_python_float_params():
    result, aux = mb.micro_grad(lambda c, x: c * x.sum(), microbatch_size=4,
                                num_real_microbatches=3)(1.0, torch.ones(16))
    assert float(result) == 12.0 and aux.metrics is None and aux.aux is None


def test_micro_grad_is_differentiable_in_the_parameters():
    # d/dw of sum_i clip(g_i) where g_i = x_i (x_i.w - y_i): compare with autograd on a loop.
    dtype = torch.float64
    w = seeded_randn(3, dtype=dtype).requires_grad_()
    features = seeded_randn(6, 3, dtype=dtype, seed=1)
    targets = seeded_randn(6, dtype=dtype, seed=2)

    def loss(params, x, y):
        return 0.5 * ((x @ params - y) ** 2).sum()

    summed_grads, _ = mb.micro_grad(loss, microbatch_size=2, batch_argnums=(1, 2),
                                    transform_fn=torch.tanh)(w, features, targets)
    (ours,) = torch.autograd.grad(summed_grads.sum(), w)
    per_example = [torch.tanh(torch.autograd.grad(loss(w, x[None], y[None]), w,
                                                  create_graph=True)[0])
                   for x, y in zip(features, targets)]
    (expected,) = torch.autograd.grad(torch.stack(per_example).sum(), w)
    assert_leaves_close(ours, expected)


def test_microbatch_is_differentiable():
    x = seeded_randn(8, 2, dtype=torch.float64).requires_grad_()
    out = mb.microbatch(lambda v: (v ** 3, (v ** 2).sum()), argnums=0, microbatch_size=2,
                        accumulator=(ACC.CONCAT, ACC.MEAN))(x)
    (grad,) = torch.autograd.grad(out[0].sum() + out[1], x)
    assert_leaves_close(grad, 3 * x.detach() ** 2 + 2 * x.detach() / 4)


def test_errors():
    x, y = torch.ones(10, 3), torch.ones(8, 3)
    with pytest.raises(ValueError, match="divisible"):
        mb.microbatch(torch.sum, argnums=0, microbatch_size=3)(x)
    with pytest.raises(ValueError, match="equal-size batch axes"):
        mb.microbatch(lambda a, b: a.sum() + b.sum(), argnums=(0, 1), microbatch_size=2)(x, y)
    with pytest.raises(ValueError, match="floating-point"):
        mb.microbatch(lambda v: v.sum(), argnums=0, microbatch_size=2,
                      accumulator=ACC.MEAN)(torch.arange(4))
    with pytest.raises(ValueError, match="Unknown accumulator"):
        mb.microbatch(torch.sum, argnums=0, microbatch_size=2, accumulator="sum")(x)
    with pytest.raises(ValueError, match="accumulator"):
        mb.microbatch(lambda v: v.sum(), argnums=0, microbatch_size=2,
                      accumulator=(ACC.SUM, ACC.SUM))(x)
    with pytest.raises(ValueError, match="in_axes"):
        mb.microbatch(torch.sum, argnums=0, microbatch_size=2, in_axes=(0, 1))(x)
    with pytest.raises(ValueError, match="argnames"):
        mb.microbatch(lambda v, *, w: v, argnums=0, argnames="w", microbatch_size=2)(x)
    with pytest.raises(ValueError, match="num_real_microbatches"):
        mb.microbatch(torch.sum, argnums=0, microbatch_size=2, num_real_microbatches=6)(x)
    with pytest.raises(NotImplementedError, match="out_axis"):
        mb.micro_vmap(torch.sum, out_axes=1)
    with pytest.raises(ValueError, match="in_axes"):
        mb.micro_vmap(lambda a, b: a + b, in_axes=0, microbatch_size=2)(x, x)


def test_accumulators_never_mutate_inputs():
    tree = make_tree(torch.float64)
    batch = tree_math.tree_map(lambda leaf: torch.stack([leaf, 2 * leaf, 3 * leaf, 4 * leaf]),
                               tree)
    before = tree_math.tree_map(torch.clone, batch)
    for accumulator in ALL_TYPES:
        mb.microbatch(lambda b: b, argnums=0, microbatch_size=2, accumulator=accumulator)(batch)
    assert all(torch.equal(a, b) for a, b in zip(tree_math.leaves(batch),
                                                 tree_math.leaves(before)))


def test_micro_vmap_prefix_in_axes_and_custom_vmap_fn():
    tree = {"a": seeded_randn(4, 3, dtype=torch.float64),
            "b": seeded_randn(3, dtype=torch.float64, seed=1)}

    def fun(np, t):
        return np.sum(t["a"] * t["b"])

    in_axes = ({"a": 0, "b": None},)
    ours = mb.micro_vmap(functools.partial(fun, torch), in_axes=in_axes)(tree)
    with jax_precision(torch.float64):
        assert_leaves_close(ours, theirs_mb.micro_vmap(functools.partial(fun, jnp),
                                                       in_axes=in_axes)(to_jax(tree)))
    x = seeded_randn(2, 4, 8, dtype=torch.float32)
    custom = mb.micro_vmap(torch.sum, in_axes=1, microbatch_size=2, vmap_fn=torch.func.vmap)(x)
    assert_leaves_close(custom, x.sum(dim=(0, 2)))
