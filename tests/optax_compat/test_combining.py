"""chain, named_chain, partition/multi_transform: against real Optax, laws, extra args, errors."""

import optax
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import optax_compat as ox
from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math
from optax_compat.testing import compare_with_optax, make_tree, strategies
from tests.optax_compat.combinator_cases import (
    CASES_AND_DTYPES,
    INNER_CASES,
    assert_same_runs,
    inner_transforms,
    jitted,
)

DTYPES = [torch.float32, torch.float64]
LABELS = {"bias": "a", "layer": {"w": "b", "b": "a"}, "pair": ("b", "a"), "empty": None}
PREFIX_LABELS = {"bias": "a", "layer": "b", "pair": "a", "empty": None}


@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES)
def test_chain_matches_optax(case, dtype):
    ours, theirs = INNER_CASES[case]
    compare_with_optax(ox.chain(ours(), ox.trace(0.3)),
                       lambda: jitted(optax.chain(theirs(), optax.trace(0.3))), dtype, steps=4)


@pytest.mark.parametrize(("case", "dtype"), CASES_AND_DTYPES)
def test_named_chain_matches_optax_and_keeps_names_in_order(case, dtype):
    ours, theirs = INNER_CASES[case]
    ours_state, _ = compare_with_optax(
        ox.named_chain(("inner", ours()), ("clip", ox.clip_by_global_norm(0.5))),
        lambda: jitted(optax.named_chain(("inner", theirs()),
                                         ("clip", optax.clip_by_global_norm(0.5)))),
        dtype, steps=4)
    assert list(ours_state) == ["inner", "clip"]


def test_named_chain_rejects_duplicate_names():
    with pytest.raises(ValueError, match="unique names"):
        ox.named_chain(("a", ox.trace(0.9)), ("a", ox.trace(0.5)))


@pytest.mark.parametrize(("labels", "dtype"), [(LABELS, torch.float32),
                                               (PREFIX_LABELS, torch.float64)],
                         ids=["full", "prefix"])
def test_partition_matches_optax(labels, dtype):
    first, second = (INNER_CASES[name] for name in ("trace_scale", "ema_decay"))
    compare_with_optax(ox.partition({"a": first[0](), "b": second[0]()}, labels),
                       lambda: jitted(optax.partition({"a": first[1](), "b": second[1]()},
                                                      labels)),
                       dtype, steps=4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_partition_with_callable_labels_matches_optax(dtype):
    def by_rank(params, tree_map):
        return tree_map(lambda p: "matrix" if p.ndim > 1 else "vector", params)

    import jax

    first, second = (INNER_CASES[name] for name in ("clip_nesterov", "trace_scale"))
    compare_with_optax(
        ox.multi_transform({"matrix": first[0](), "vector": second[0]()},
                           lambda p: by_rank(p, tree_math.tree_map)),
        lambda: jitted(optax.multi_transform({"matrix": first[1](), "vector": second[1]()},
                                             lambda p: by_rank(p, jax.tree.map))),
        dtype, steps=4)


def test_multi_transform_is_partition():
    assert ox.multi_transform is ox.partition
    assert ox.MultiTransformState is ox.PartitionState
    assert ox.transforms.partition is ox.partition


def test_partition_names_the_label_without_transformation():
    tx = ox.partition({"a": ox.trace(0.9)}, LABELS)
    with pytest.raises(ValueError, match=r"no corresponding transformation(.|\n)*\['b'\]"):
        tx.init(make_tree())


def test_partition_label_tree_mismatch_names_the_path():
    labels = {"bias": "a", "layer": {"w": "a"}, "pair": "a", "empty": None}
    with pytest.raises(ValueError, match=r"param_labels\['layer'\]"):
        ox.partition({"a": ox.trace(0.9)}, labels).init(make_tree())


def _extra_args_recorder(received, declares_inplace=True):
    def update_fn(updates, state, params=None, **extra_args):
        received.append(extra_args)
        return updates, state

    if declares_inplace:
        update_fn = bb.supports_inplace(update_fn)
    return ox.GradientTransformationExtraArgs(ox.init_empty_state, update_fn)


@pytest.mark.parametrize("combinator", ["chain", "named_chain", "partition", "masked"])
def test_extra_args_reach_inner_transforms_that_take_them(combinator):
    received = []
    recorder, plain = _extra_args_recorder(received), ox.scale(2.0)
    tx = {
        "chain": lambda: ox.chain(recorder, plain, recorder),
        "named_chain": lambda: ox.named_chain(("r", recorder), ("p", plain), ("s", recorder)),
        "partition": lambda: ox.partition({"a": ox.chain(recorder, plain), "b": recorder},
                                          LABELS),
        "masked": lambda: ox.masked(ox.chain(recorder, plain, recorder),
                                    {"bias": True, "layer": True, "pair": False,
                                     "empty": None}),
    }[combinator]()
    assert isinstance(tx, ox.GradientTransformationExtraArgs)
    params = make_tree()
    tx.update(make_tree(seed=1), tx.init(params), params, value=torch.tensor(3.0), inplace=True)
    assert len(received) == 2
    for extra_args in received:
        assert set(extra_args) == {"value", "inplace"}
        assert extra_args["inplace"] is True


@pytest.mark.parametrize("combinator", ["chain", "named_chain", "masked"])
def test_inplace_requests_stop_at_transforms_that_do_not_declare_them(combinator):
    received = []
    recorder = _extra_args_recorder(received, declares_inplace=False)
    tx = {
        "chain": lambda: ox.chain(recorder),
        "named_chain": lambda: ox.named_chain(("r", recorder)),
        "masked": lambda: ox.masked(recorder, {"bias": True, "layer": True, "pair": False,
                                               "empty": None}),
    }[combinator]()
    params = make_tree()
    tx.update(make_tree(seed=1), tx.init(params), params, value=torch.tensor(3.0), inplace=True)
    assert [set(extra_args) for extra_args in received] == [{"value"}]


def test_chain_forwards_inplace_with_the_numbers_of_the_pure_path():
    params = make_tree()
    grads = [make_tree(seed=i + 1) for i in range(3)]
    tx = ox.chain(ox.trace(0.9), ox.scale(-0.1))
    pure_state = inplace_state = tx.init(params)
    for grad in grads:
        pure_updates, pure_state = tx.update(grad, pure_state, params)
        inplace_updates, inplace_state = tx.update(tree_math.tree_map(torch.clone, grad),
                                                   inplace_state, params, inplace=True)
        ox.testing.assert_trees_all_close(inplace_updates, pure_updates, rtol=0, atol=0)
        ox.testing.assert_trees_all_close(inplace_state, pure_state, rtol=0, atol=0)


def _running_sum() -> ox.GradientTransformation:
    """Returns its new state as its update, as SM3 does, without declaring in-place support."""

    def update(updates, state, params=None):
        del params
        total = tree_math.tree_map(torch.add, state, updates)
        return total, total

    return ox.GradientTransformation(lambda params: tree_math.tree_map(torch.zeros_like, params),
                                     update)


def test_an_update_that_is_the_state_is_not_scaled_in_place_inside_the_state():
    # ``scale`` writes into the updates it receives; the running sum's updates are its state.
    params = make_tree(torch.float64)
    grads = [make_tree(torch.float64, seed=i + 1) for i in range(3)]
    tx = ox.chain(_running_sum(), ox.scale(-0.1))
    pure_state = inplace_state = tx.init(params)
    for grad in grads:
        pure_updates, pure_state = tx.update(grad, pure_state, params)
        incoming = tree_math.tree_map(torch.clone, grad)
        inplace_updates, inplace_state = tx.update(incoming, inplace_state, params, inplace=True)
        ox.testing.assert_trees_all_close(inplace_updates, pure_updates, rtol=0, atol=0)
        ox.testing.assert_trees_all_close(inplace_state, pure_state, rtol=0, atol=0)
        # The update went into the incoming buffers the request handed over.
        assert all(u is g for u, g in zip(tree_math.leaves(inplace_updates),
                                          tree_math.leaves(incoming), strict=True))


def test_chain_with_a_wrong_state_says_to_call_init():
    tx = ox.chain(ox.trace(0.9), ox.scale(2.0))
    with pytest.raises(ValueError, match="called init"):
        tx.update(make_tree(), (), make_tree())


LAW_SETTINGS = settings(max_examples=20)


@LAW_SETTINGS
@given(strategies.params_and_grads(steps=3), inner_transforms(), inner_transforms(),
       inner_transforms())
def test_chain_is_associative(params_and_grads, a, b, c):
    params, grads = params_and_grads
    a, b, c = a.transformation, b.transformation, c.transformation
    assert_same_runs(ox.chain(a, ox.chain(b, c)), ox.chain(ox.chain(a, b), c), params, grads)


@LAW_SETTINGS
@given(strategies.params_and_grads(steps=3), inner_transforms())
def test_chain_with_identity_is_the_transform(params_and_grads, t):
    params, grads = params_and_grads
    t = t.transformation
    assert_same_runs(ox.chain(ox.identity(), t), t, params, grads, rtol=0, atol=0)
    assert_same_runs(ox.chain(t, ox.identity()), t, params, grads, rtol=0, atol=0)


@LAW_SETTINGS
@given(strategies.params_and_grads(steps=3), inner_transforms(), st.sampled_from(["x", 7]))
def test_partition_with_one_label_is_the_transform(params_and_grads, t, label):
    params, grads = params_and_grads
    t = t.transformation
    labels = tree_math.tree_map(lambda _: label, params)
    assert_same_runs(ox.partition({label: t}, labels), t, params, grads, rtol=0, atol=0)
