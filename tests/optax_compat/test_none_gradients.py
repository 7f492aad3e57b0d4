"""``None`` gradients (PyTorch's unused parameters), a documented extension of Optax's semantics.

The law: with a random subset of the gradients set to ``None`` (the same subset at every step),
every transformation gives, on the other leaves, exactly the updates, parameters and state of
the same run on the sub-tree (the tree with ``None``, Optax's empty subtree, at those leaves);
the updates there are ``None``, and the parameters and state entries there keep their values.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import optree
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import optax_compat as ox
from optax_compat import testing
from optax_compat._runtime import tree_math as tm
from optax_compat.testing import strategies

LAW_SETTINGS = settings(max_examples=25, deadline=None,
                        suppress_health_check=[HealthCheck.too_slow])
STEPS = 3


def with_none(tree: Any, absent: list[bool]) -> Any:
    """``tree`` with ``None`` in place of the leaves flagged in ``absent``."""
    leaves, spec = tm.flatten(tree)
    return tm.unflatten(spec, [None if gone else leaf for leaf, gone in zip(leaves, absent)])


@st.composite
def subsets(draw: Any, params: Any) -> list[bool]:
    """Which leaves get a ``None`` gradient: at least one, and not all of them."""
    n = len(tm.leaves(params))
    absent = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    index = draw(st.integers(0, n - 1))
    absent[index] = True
    absent[(index + 1) % n] = False
    return absent


def run(tx: ox.GradientTransformation, params: Any, grads: list[Any], inplace: bool = False,
        lookahead: bool = False) -> tuple[list[Any], Any, Any]:
    """``(updates at each step, final state, final params)``, applying the updates in between."""
    if lookahead:
        params = ox.LookaheadParams.init_synced(params)
    state = tx.init(params)
    all_updates = []
    for grad in grads:
        extra = {"inplace": True} if inplace else {}
        updates, state = tx.update(grad, state, params, **extra)
        params = ox.apply_updates(params, updates)
        all_updates.append(updates)
    return all_updates, state, params


def assert_law(tx_factory: Callable[[], ox.GradientTransformation], params: Any,
               grads: list[Any], absent: list[bool], inplace: bool = False,
               lookahead: bool = False) -> None:
    sub_params = with_none(params, absent)
    sub_grads = [with_none(g, absent) for g in grads]
    try:
        expected = run(tx_factory(), sub_params, sub_grads, lookahead=lookahead)
    except (ValueError, TypeError, RuntimeError) as error:  # a draw the transform rejects
        with pytest.raises(type(error)):
            run(tx_factory(), params, sub_grads, lookahead=lookahead)
        return
    tx = tx_factory()
    initial_state = copy.deepcopy(tx.init(ox.LookaheadParams.init_synced(params) if lookahead
                                          else params))
    updates, state, new_params = run(tx, copy.deepcopy(params), copy.deepcopy(sub_grads),
                                     inplace=inplace, lookahead=lookahead)
    exact = {"rtol": 1e-6, "atol": 1e-7} if inplace else {"rtol": 0.0, "atol": 0.0}
    for step, (mine, ref) in enumerate(zip(updates, expected[0])):
        testing.assert_trees_all_close(mine, ref, **exact, what=f"updates at step {step}")
    # The state of the sub-tree run has the leaves of the full run, except those of the
    # parameters without gradient; there the full run's state kept its initial values.
    leaves, expected_leaves, initial_leaves = (
        dict(zip(*optree.tree_flatten_with_path(tree, none_is_leaf=False,
                                                namespace=tm.NAMESPACE)[:2]))
        for tree in (state, expected[1], initial_state))
    assert expected_leaves.keys() <= leaves.keys() == initial_leaves.keys()
    for path, leaf in leaves.items():
        if path in expected_leaves:
            testing.assert_trees_all_close(leaf, expected_leaves[path], **exact,
                                           what=f"state on the present leaves{path}")
        else:
            testing.assert_trees_all_close(leaf, initial_leaves[path], rtol=0.0, atol=0.0,
                                           what=f"state at the None leaves{path}")
    start = ox.LookaheadParams.init_synced(params) if lookahead else params
    flags = absent * (2 if lookahead else 1)  # LookaheadParams: the fast, then the slow leaves
    present_new = [new for new, gone in zip(tm.leaves(new_params), flags, strict=True)
                   if not gone]
    testing.assert_trees_all_close(present_new, tm.leaves(expected[2]), **exact,
                                   what="params on the present leaves")
    for old, new, gone in zip(tm.leaves(start), tm.leaves(new_params), flags, strict=True):
        if gone:
            torch.testing.assert_close(new, old, rtol=0.0, atol=0.0, equal_nan=True)


TREES = strategies.params_and_grads(steps=STEPS, min_leaves=2, max_leaves=5,
                                    dtypes=[torch.float32, torch.float64], min_value=-3.0,
                                    max_value=3.0)


@LAW_SETTINGS
@given(data=st.data(), drawn=strategies.transforms(max_depth=1, max_length=3),
       params_and_grads=TREES)
def test_law_for_drawn_transforms_and_chains(data, drawn, params_and_grads):
    params, grads = params_and_grads
    absent = data.draw(subsets(params))
    assert_law(lambda: drawn.config.build(ox), params, grads, absent)


def _labels(params: Any, flags: list[bool]) -> Any:
    return tm.unflatten(tm.treespec(params), ["x" if flag else "y" for flag in flags])


def _bools(params: Any, flags: list[bool]) -> Any:
    return tm.unflatten(tm.treespec(params), list(flags))


WRAPPERS: dict[str, Callable[[Callable[[], Any], Any, list[bool]], Any]] = {
    "masked": lambda inner, params, flags: ox.masked(inner(), _bools(params, flags)),
    "partition": lambda inner, params, flags: ox.partition(
        {"x": inner(), "y": ox.sgd(0.1, momentum=0.5)}, _labels(params, flags)),
    "multi_steps": lambda inner, params, flags: ox.MultiSteps(
        inner(), every_k_schedule=2).gradient_transformation(),
    "apply_if_finite": lambda inner, params, flags: ox.apply_if_finite(inner(), 2),
    "inject_hyperparams": lambda inner, params, flags: ox.inject_hyperparams(ox.adamw)(
        learning_rate=0.1, weight_decay=0.01),
    "clip_by_global_norm": lambda inner, params, flags: ox.chain(ox.clip_by_global_norm(0.5),
                                                                 inner()),
    "lookahead": lambda inner, params, flags: ox.lookahead(inner(), sync_period=2,
                                                           slow_step_size=0.5),
}

INNER = {
    "adam": lambda: ox.adam(0.1),
    "sgd_momentum_nesterov": lambda: ox.sgd(0.1, momentum=0.9, nesterov=True),
    "adamw": lambda: ox.adamw(0.05, weight_decay=0.1),
    "lamb": lambda: ox.lamb(0.05),
    "adafactor": lambda: ox.adafactor(0.1),
    "rmsprop_centered": lambda: ox.rmsprop(0.05, centered=True, momentum=0.5),
}


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), params_and_grads=TREES)
def test_law_for_combinators_and_wrappers(wrapper, data, params_and_grads):
    params, grads = params_and_grads
    absent = data.draw(subsets(params))
    inner = INNER[data.draw(st.sampled_from(sorted(INNER)))]
    flags = data.draw(st.lists(st.booleans(), min_size=len(absent), max_size=len(absent)))
    assert_law(lambda: WRAPPERS[wrapper](inner, params, flags), params, grads, absent,
               lookahead=wrapper == "lookahead")


@pytest.mark.parametrize("alias", ["adam", "sgd_momentum_nesterov", "adamw"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), params_and_grads=TREES)
def test_law_on_the_inplace_path(alias, data, params_and_grads):
    params, grads = params_and_grads
    absent = data.draw(subsets(params))
    assert_law(INNER[alias], params, grads, absent, inplace=True)


def test_fused_step_skips_none_gradients():
    params = {"a": torch.tensor([1.0, -2.0]), "b": torch.tensor([[0.5]]), "c": torch.tensor(3.0)}
    grads = [{"a": torch.tensor([0.3, 0.1]) * k, "b": None, "c": torch.tensor(-1.0) * k}
             for k in (1.0, 2.0)]
    optimizer = ox.adam(0.1)
    fused_params = copy.deepcopy(params)
    state = optimizer.init(fused_params)
    before_b = (state[0].mu["b"].clone(), state[0].nu["b"].clone())
    for grad in grads:
        state = ox.inplace_step(optimizer)(fused_params, grad, state)
    _, expected_state, expected_params = run(ox.adam(0.1), with_none(params, [False, True, False]),
                                             grads)
    torch.testing.assert_close(fused_params["b"], params["b"], rtol=0, atol=0)
    for key in ("a", "c"):
        torch.testing.assert_close(fused_params[key], expected_params[key])
        torch.testing.assert_close(state[0].mu[key], expected_state[0].mu[key])
    assert state[0].mu["b"] is not None
    torch.testing.assert_close((state[0].mu["b"], state[0].nu["b"]), before_b, rtol=0, atol=0)


def test_every_gradient_none_advances_only_the_counter():
    params = {"a": torch.ones(2), "b": torch.ones(3)}
    tx = ox.adam(0.1)
    state = tx.init(params)
    updates, new_state = tx.update({"a": None, "b": None}, state, params)
    assert updates == {"a": None, "b": None}
    assert int(new_state[0].count) == 1
    assert new_state[0].mu["a"] is state[0].mu["a"] and new_state[0].nu["b"] is state[0].nu["b"]
    assert ox.apply_updates(params, updates)["a"] is params["a"]



@pytest.mark.parametrize("build", [lambda m: m.chain(m.adam(0.1)),
                                   lambda m: m.chain(m.chain(m.sgd(0.1), m.adam(0.1)))],
                         ids=["chain", "nested_chain"])
def test_a_state_tuple_shaped_like_the_gradients_is_not_pruned(build):
    """A chain's state tuple as long as a tuple of ``None`` gradients is not mistaken for a
    per-parameter tree (Optax returns ``None`` updates)."""
    import optax

    params = (None,)
    tx, their_tx = build(ox), build(optax)
    updates, state = tx.update((None,), tx.init(params), params)
    their_updates, their_state = their_tx.update((None,), their_tx.init(params), params)
    assert updates == their_updates == (None,)
    assert testing.state_signature(state) == testing.state_signature(their_state)

def test_none_in_place_of_a_whole_subtree_is_a_structure_error():
    params = {"layer": {"w": torch.ones(2), "b": torch.ones(1)}, "head": torch.ones(1)}
    with pytest.raises(ValueError, match="structure of updates"):
        ox.apply_updates(params, {"layer": None, "head": torch.ones(1)})


def test_a_one_element_chain_state_is_not_taken_for_a_parameter():
    # A chain of one transformation has a one-element tuple of states, shaped like updates
    # that are a one-element tuple: it is not a per-parameter part of the state.
    params = (torch.ones(2),)
    tx = ox.chain(ox.trace(0.9))
    _, state = tx.update((torch.ones(2),), tx.init(params), params)
    updates, new_state = tx.update((None,), state, params)
    assert updates == (None,)
    torch.testing.assert_close(new_state[0].trace[0], state[0].trace[0], rtol=0.0, atol=0.0)


def test_an_empty_tree_through_a_one_element_chain_matches_optax():
    config = strategies.Config("chain", args=(strategies.Config("contrib.schedule_free_sgd"),))
    testing.check_matches_optax(config.build, {}, (None,), (None,), steps=2)
