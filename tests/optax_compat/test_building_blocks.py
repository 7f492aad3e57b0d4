"""Building-block contracts: in-place requests reach only transformations that declare them."""

import pytest
import torch

import optax_compat as optax
from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base


def _params():
    return {"w": torch.ones(3), "b": torch.zeros(2)}


def _grads():
    return {"w": torch.full((3,), 0.5), "b": torch.full((2,), -1.0)}


def test_a_wrapper_that_forwards_extra_args_never_passes_an_inplace_request_on():
    inner = optax.adam(0.1)

    def init(params):
        return inner.init(params)

    def update(updates, state, params=None, **extra_args):
        # A careless wrapper: forwards everything, then keeps the old state.
        inner.update(updates, state, params, **extra_args)
        return updates, state

    careless = base.GradientTransformationExtraArgs(init, update)
    state = careless.init(_params())
    before = [t.clone() for t in bb.tree_math.leaves(state)]
    careless.update(_grads(), state, _params(), inplace=True)
    for old, now in zip(before, bb.tree_math.leaves(state)):
        torch.testing.assert_close(now, old, rtol=0, atol=0)


def test_chain_forwards_inplace_to_declaring_transforms_only():
    tx = optax.chain(optax.apply_if_finite(optax.adam(0.1), 3), optax.scale_by_adam())
    state = tx.init(_params())
    finite_state = state[0]
    before = [t.clone() for t in bb.tree_math.leaves(finite_state)]
    _, new_state = tx.update(_grads(), state, _params(), inplace=True)
    for old, now in zip(before, bb.tree_math.leaves(finite_state)):
        torch.testing.assert_close(now, old, rtol=0, atol=0)
    # scale_by_adam declares support: its buffers were advanced in place.
    assert new_state[1].mu["w"] is state[1].mu["w"]


def test_declarations():
    assert bb.declares_inplace(optax.scale_by_adam().update)
    assert bb.declares_inplace(optax.chain(optax.sgd(0.1)).update)
    assert not bb.declares_inplace(optax.apply_if_finite(optax.sgd(0.1), 2).update)
    assert not bb.declares_inplace(optax.MultiSteps(optax.sgd(0.1), 2).update)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("scalar", [0.9, -1e-3, 1 / 3, 3, 1e40, -0.0])
def test_tree_math_scales_by_a_python_number_as_torch_does(dtype, scalar):
    # On the CPU the number is passed to the kernels as a 0-d tensor: the same bits.
    specials = torch.tensor([1e-38, 3e38, float("inf"), float("nan"), -0.0, 0.0])
    xs = [torch.randn(31, 7, dtype=dtype), torch.tensor(3.3, dtype=dtype),
          specials.to(dtype), torch.randn(5, dtype=dtype).t()]
    for ours, reference in ((tm.mul(xs, scalar), [x * scalar for x in xs]),
                            (tm.div(xs, scalar), [x / scalar for x in xs]),
                            (tm.mul_([x.clone() for x in xs], scalar), [x * scalar for x in xs])):
        bits = {torch.float32: torch.int32, torch.float64: torch.int64}[dtype]
        for got, expected in zip(ours, reference, strict=True):
            assert got.dtype == expected.dtype
            assert torch.equal(got.reshape(-1).view(bits), expected.reshape(-1).view(bits))


_TENSOR = torch.zeros(1)


@pytest.mark.parametrize("tree", [
    [_TENSOR, torch.ones(2)],
    (torch.nn.Parameter(torch.ones(2)), _TENSOR, torch.ones(3)),
    {"b": _TENSOR, "a": torch.ones(2), "c": torch.ones(3)},
    {2: _TENSOR, 1: torch.ones(2)},
    {(1, 2): _TENSOR, (0, 3): torch.ones(2)},
    {"w": _TENSOR, 1: torch.ones(2)},  # keys optree cannot sort: insertion order
    [_TENSOR],  # one leaf, and the trees below, take optree's own path
    {"w": _TENSOR, "b": None},
    [_TENSOR, 1.0],
    {"w": [_TENSOR, _TENSOR], "b": _TENSOR},
])
def test_flatten_matches_optree_leaf_for_leaf(tree):
    import optree

    leaves, spec = tm.flatten(tree)
    expected_leaves, expected_spec = optree.tree_flatten(tree, namespace=tm.NAMESPACE)
    assert spec == expected_spec
    assert len(leaves) == len(expected_leaves)
    assert all(a is b for a, b in zip(leaves, expected_leaves))
    assert tm.treespec(tree) == expected_spec
    assert tm.treespec(tm.unflatten(spec, leaves)) == expected_spec
