"""``torch.compile`` (default mode and ``fullgraph=True``, no graph break) and the meta device.

A representative subset runs here (graph capture with the ``eager`` backend, to stay fast);
``benchmarks/bench_compile.py`` compiles every alias with Inductor and reports the table.
"""

from __future__ import annotations

import warnings
from typing import Any

import optree
import pytest
import torch

import optax_compat as ox
from optax_compat._runtime import none_gradients
from optax_compat._runtime import tree_math as tm
from optax_compat.testing import check_compilable, make_tree

ALIASES = (
    "adabelief adadelta adafactor adagrad adam adamax adamaxw adamw adan amsgrad fromage lamb "
    "lars lion nadam nadamw noisy_sgd novograd optimistic_adam optimistic_adam_v2 "
    "optimistic_gradient_descent polyak_sgd radam rmsprop rprop sgd sign_sgd signum sm3 yogi"
).split()

COMPILED = {
    "adam": lambda: ox.adam(0.1),
    "chain": lambda: ox.chain(ox.clip_by_global_norm(1.0), ox.adamw(0.1)),
    "masked": lambda: ox.masked(ox.adam(0.1), lambda params: optree.tree_map(
        lambda p: p.ndim > 1, params, none_is_leaf=False)),
    # A mask or label tree that is a constant of the step, not a function of the params.
    "masked_tree": lambda: ox.masked(
        ox.adam(0.1), {"bias": False, "layer": True, "pair": (True, False), "empty": None}),
    # A mask function whose tree holds a dict of Python constants, built while tracing (optree
    # 0.20's metadata for such a dict broke Dynamo, hence optree<0.20).
    "masked_subdict": lambda: ox.adamw(0.1, mask=lambda params: {
        "bias": True, "layer": {"w": False, "b": False}, "pair": (True, True), "empty": None}),
    "partition": lambda: ox.partition(
        {"decay": ox.adamw(0.1), "plain": ox.sgd(0.1)},
        {"bias": "plain", "layer": "decay", "pair": ("decay", "plain"), "empty": None}),
    "muon": lambda: ox.contrib.muon(0.1),
    "lbfgs_without_linesearch": lambda: ox.lbfgs(0.1, linesearch=None),
    "inject_hyperparams": lambda: ox.inject_hyperparams(ox.adam)(
        learning_rate=ox.cosine_decay_schedule(0.1, 10)),
    "MultiSteps": lambda: ox.MultiSteps(ox.adam(0.1), 2),
    "apply_if_finite": lambda: ox.apply_if_finite(ox.adam(0.1), 3),
    "noisy_sgd": lambda: ox.noisy_sgd(0.1, key=3),
}


@pytest.mark.parametrize("name", sorted(COMPILED))
def test_update_compiles_without_graph_breaks(name: str) -> None:
    tx = COMPILED[name]()
    params = make_tree()
    check_compilable(tx, params, make_tree(seed=1), backend="eager")


FLAT_TREES = {
    "list": lambda xs: xs,
    "tuple": tuple,
    "dict": lambda xs: {f"p{9 - i}": x for i, x in enumerate(xs)},  # optree sorts the keys
    "parameters": lambda xs: [torch.nn.Parameter(x, requires_grad=False) for x in xs],
}


@pytest.mark.parametrize("kind", sorted(FLAT_TREES))
def test_a_flat_tree_flattens_while_tracing_to_dynamos_own_structure(kind: str) -> None:
    """A list, tuple or dict of tensors flattens in one step while Dynamo traces (not one
    structure object per leaf) to a structure equal to the one Dynamo's optree substitute
    builds, so it mixes with structures built either way."""
    tree = FLAT_TREES[kind]([torch.full((2,), float(i)) for i in range(10)])

    def flattened(tree: Any) -> tuple[Any, ...]:
        results = []
        for none_is_leaf, ours in ((False, tm.flatten), (True, none_gradients._flatten)):
            took_the_fast_path = tm.traced_flatten_one_level(tree, none_is_leaf) is not None
            leaves, spec = ours(tree)
            dynamos_leaves, dynamos_spec = optree.tree_flatten(
                tree, none_is_leaf=none_is_leaf, namespace=tm.NAMESPACE)
            results.append((took_the_fast_path, spec == dynamos_spec, leaves,
                            dynamos_leaves, tm.unflatten(spec, [x + 1 for x in leaves])))
        return tuple(results), tm.leaves(tree), tm.treespec(tree) == optree.tree_structure(
            tree, none_is_leaf=False, namespace=tm.NAMESPACE)

    torch._dynamo.reset()
    results, leaves, same_treespec = torch.compile(flattened, backend="eager",
                                                   fullgraph=True)(tree)
    expected_leaves = optree.tree_leaves(tree, namespace=tm.NAMESPACE)
    assert same_treespec
    torch.testing.assert_close(leaves, expected_leaves)
    for took_the_fast_path, same_spec, ours, dynamos, rebuilt in results:
        assert took_the_fast_path and same_spec
        torch.testing.assert_close(ours, expected_leaves)
        torch.testing.assert_close(dynamos, expected_leaves)
        assert type(rebuilt) is type(tree)
        torch.testing.assert_close(optree.tree_leaves(rebuilt, namespace=tm.NAMESPACE),
                                   [x + 1 for x in expected_leaves])


def test_a_nested_tree_with_a_dict_of_constants_flattens_while_tracing() -> None:
    """A dict that holds only Python constants (a mask's masked-out sub-dict) flattens while
    tracing without a graph break on every optree we support (0.20's metadata for such a dict
    is one Dynamo cannot hold), to optree's leaves and a structure that rebuilds the tree; the
    structure equals Dynamo's own wherever Dynamo can build one."""
    x = torch.ones(2)
    tree = {"w": x, "masked": {"b": ox.MaskedNode(), "a": False}, "pair": (x, None),
            "inner": {"z": x, "y": x}}

    def flattened(tree: Any) -> tuple[Any, ...]:
        results = []
        for ours in (tm.flatten, none_gradients._flatten):
            leaves, spec = ours(tree)
            results.append((leaves, tm.unflatten(spec, leaves)))
        return tuple(results), tm.leaves(tree), tm.treespec(tree)

    torch._dynamo.reset()
    results, leaves, spec = torch.compile(flattened, backend="eager", fullgraph=True)(tree)
    def same_leaves(ours: list[Any], expected: list[Any]) -> bool:
        return len(ours) == len(expected) and all(
            torch.equal(a, b) if isinstance(b, torch.Tensor) else a == b
            for a, b in zip(ours, expected))

    for (ours, rebuilt), none_is_leaf in zip(results, (False, True)):
        expected_spec = optree.tree_structure(tree, none_is_leaf=none_is_leaf,
                                              namespace=tm.NAMESPACE)
        assert same_leaves(ours, optree.tree_leaves(tree, none_is_leaf=none_is_leaf,
                                                    namespace=tm.NAMESPACE))
        assert optree.tree_structure(rebuilt, none_is_leaf=none_is_leaf,
                                     namespace=tm.NAMESPACE) == expected_spec
        assert list(rebuilt) == list(tree)  # the dict's own key order is kept
    assert same_leaves(leaves, optree.tree_leaves(tree, namespace=tm.NAMESPACE))
    assert spec.num_leaves == len(leaves)


def test_a_nested_tree_or_a_single_leaf_is_left_to_optree_while_tracing() -> None:
    def fast(tree: Any) -> bool:
        return tm.traced_flatten_one_level(tree, False) is not None

    compiled = torch.compile(fast, backend="eager", fullgraph=True)
    for tree in ([torch.ones(2)], {"a": torch.ones(2), "b": [torch.ones(2)]},
                 [torch.ones(2), None], (torch.ones(2), 1.0)):
        torch._dynamo.reset()
        assert not compiled(tree)
    assert not fast([torch.ones(2), torch.ones(2)])  # not traced: optree's own structures


def test_the_shortcuts_are_off_when_dynamos_structure_class_is_another(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With another torch's substitute (fields not the ones expected), flattening is left to
    Dynamo's optree substitute, and an update still compiles and matches eager."""
    monkeypatch.setattr(tm.trees, "_SUBSTITUTE_FIELDS", ("_children", "_kind"))
    torch._dynamo.reset()
    assert not torch.compile(lambda tree: tm.traced_flatten_one_level(tree, False) is not None,
                             backend="eager", fullgraph=True)([torch.ones(2), torch.ones(2)])
    params = [torch.full((3,), float(i)) for i in range(4)]
    check_compilable(ox.adamw(0.1), params, [p + 1 for p in params], backend="eager")


def test_same_structure_while_tracing_agrees_with_dynamos_equality() -> None:
    """The node-by-node comparison of one-level structures while tracing gives what the
    substitute's own (leaf by leaf) equality gives, for equal and for differing trees."""
    x = torch.ones(2)
    trees = [[x, x, x], [x, x], (x, x, x), {"a": x, "b": x, "c": x}, {"a": x, "b": x, "d": x},
             {"c": x, "b": x, "a": x}, [x, [x, x]], [x, None, x]]

    def comparisons() -> list[tuple[bool, bool]]:
        specs = [optree.tree_structure(tree, none_is_leaf=False, namespace=tm.NAMESPACE)
                 for tree in trees]
        return [(tm.same_structure(a, b), a == b) for a in specs for b in specs]

    torch._dynamo.reset()
    results = torch.compile(comparisons, backend="eager", fullgraph=True)()
    assert len(results) == len(trees) ** 2
    assert all(ours == dynamos for ours, dynamos in results)
    assert sum(ours for ours, _ in results) == len(trees)  # each equals itself only


@pytest.mark.parametrize("kind", sorted(FLAT_TREES))
def test_the_update_of_a_flat_tree_compiles_and_matches_eager(kind: str,
                                                              device: torch.device) -> None:
    generator = torch.Generator(device).manual_seed(0)
    params = FLAT_TREES[kind]([torch.randn(3, generator=generator, device=device)
                               for _ in range(4)])
    grads = FLAT_TREES[kind]([torch.randn(3, generator=generator, device=device)
                              for _ in range(4)])
    check_compilable(ox.chain(ox.clip_by_global_norm(1.0), ox.adamw(0.1)), params, grads,
                     backend="eager")


@pytest.mark.parametrize("fullgraph", [False, True], ids=["default", "fullgraph"])
def test_full_training_step_compiles(fullgraph: bool, device: torch.device) -> None:
    generator = torch.Generator(device).manual_seed(0)
    params = {"w": torch.randn(4, 3, generator=generator, device=device),
              "b": torch.zeros(3, device=device)}
    inputs = torch.randn(8, 4, generator=generator, device=device)
    targets = torch.randn(8, 3, generator=generator, device=device)
    tx = ox.adamw(0.1)

    def loss_fn(params: dict) -> torch.Tensor:
        return ((inputs @ params["w"] + params["b"] - targets) ** 2).mean()

    def step(params: dict, state: Any) -> Any:
        grads = torch.func.grad(loss_fn)(params)
        updates, state = tx.update(grads, state, params)
        return ox.apply_updates(params, updates), state

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=fullgraph, backend="eager")
    eager_params, eager_state = params, tx.init(params)
    compiled_params, compiled_state = params, tx.init(params)
    for _ in range(3):
        eager_params, eager_state = step(eager_params, eager_state)
        compiled_params, compiled_state = compiled(compiled_params, compiled_state)
    torch.testing.assert_close(compiled_params, eager_params, rtol=1e-6, atol=1e-7)
    assert int(compiled_state[0].count) == 3


@pytest.mark.parametrize("name", ALIASES)
def test_meta_device(name: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        tx = (ox.polyak_sgd(max_learning_rate=0.1) if name == "polyak_sgd"
              else ox.noisy_sgd(0.1, key=0) if name == "noisy_sgd"
              else getattr(ox, name)(0.1))
    params = {"w": torch.ones(4, 3, device="meta"), "b": torch.ones(3, device="meta")}
    extra = {"value": torch.tensor(1.0, device="meta")} if name == "polyak_sgd" else {}
    state = tx.init(params)
    for _ in range(2):
        updates, state = tx.update(params, state, params, **extra)
    assert all(u.device.type == "meta" for u in updates.values())
