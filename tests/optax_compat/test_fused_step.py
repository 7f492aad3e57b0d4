"""fused_step: elementwise transformations compiled over flat buffers, against real Optax."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import optax_compat
from optax_compat import _runtime as bb
from optax_compat import testing
from optax_compat._runtime import compilation, inductor_passes
from optax_compat._runtime import tree_math as tm

STEPS = 3

# What per_leaf_loops replaces and this torch's Inductor lacks (it then compiles without those
# replacements and warns: torch 2.11 lacks some); the tests of their loops need them all.
_MISSING_PASSES = [message for replacement in inductor_passes._REPLACEMENTS
                   if (message := inductor_passes._mismatch(replacement))]
needs_every_pass = pytest.mark.skipif(
    bool(_MISSING_PASSES), reason=f"this torch's Inductor: {'; '.join(_MISSING_PASSES)}")


def _grads(params: Any, steps: int = STEPS) -> list[Any]:
    return [tm.tree_map(lambda p, i=i: torch.randn(
                            p.shape, dtype=p.dtype, device=p.device,
                            generator=torch.Generator(p.device).manual_seed(i)),
                        params)
            for i in range(1, steps + 1)]


def _groups(params: Any) -> list[list[int]]:
    """Leaf indices per flat buffer, in fused_step's order (by first appearance)."""
    groups: dict[Any, list[int]] = {}
    for index, leaf in enumerate(tm.leaves(params)):
        groups.setdefault((leaf.dtype, leaf.device), []).append(index)
    return list(groups.values())


def _as_flat(state: Any, params: Any) -> Any:
    """``state`` with each subtree shaped like ``params`` replaced by its flat buffers."""
    spec, groups = tm.treespec(params), _groups(params)

    def flat(subtree: Any) -> Any:
        if tm.treespec(subtree) != spec:  # a leaf of state outside the params' subtrees
            return subtree
        leaves = tm.leaves(subtree)
        return tuple(torch.cat([leaves[i].reshape(-1) for i in group]) for group in groups)

    return tm.tree_map(flat, state, is_leaf=lambda node: tm.treespec(node) == spec)


def _check_against_optax(ours: Callable[[Any], Any], params: Any, backend: str = "aot_eager",
                         dtype: torch.dtype = torch.float32, grads: list[Any] | None = None
                         ) -> optax_compat.FusedStep:
    """Runs ``fused_step`` and jitted Optax side by side: params and state after every step."""
    import optax

    grads = _grads(params) if grads is None else grads
    with testing.jax_precision(dtype):
        theirs_tx = testing.jit_optax(ours(optax))
        theirs_params = testing.to_jax(params)
        theirs_state = theirs_tx.init(theirs_params)
        step = optax_compat.fused_step(ours(optax_compat), params, backend=backend)
        for index, grad in enumerate(grads):
            updates, theirs_state = theirs_tx.update(testing.to_jax(grad), theirs_state,
                                                     theirs_params)
            theirs_params = optax.apply_updates(theirs_params, updates)
            step(grad)
            testing.assert_leaves_close(params, theirs_params, what=f"step {index + 1}: params")
            testing.assert_leaves_close(step.state, _as_flat(testing.to_torch(theirs_state),
                                                             params),
                                        what=f"step {index + 1}: state")
    return step


CASES = {
    "sgd_momentum": lambda o: o.sgd(0.1, momentum=0.9),
    "adamw": lambda o: o.adamw(1e-2, weight_decay=0.1),
    "lion": lambda o: o.lion(1e-2, weight_decay=0.01),
    "inject_adam_schedule": lambda o: o.inject_hyperparams(o.adam)(
        learning_rate=o.schedules.linear_schedule(0.1, 0.01, 3)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_optax_aot_eager(name):
    _check_against_optax(CASES[name], testing.make_tree())


@pytest.mark.parametrize("ours", [
    lambda o: o.adam(1e-2),
    lambda o: o.chain(o.clip_by_global_norm(1.0), o.adamw(1e-2, weight_decay=0.1)),
], ids=["adam", "chain_clip_adamw"])
def test_matches_optax_inductor(ours):
    step = _check_against_optax(ours, testing.make_tree(), backend="inductor")
    assert step.compile_seconds > 0.0


def test_matches_optax_eagerly_without_compiling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("backend=None compiled")

    monkeypatch.setattr(torch, "compile", refuse)
    step = _check_against_optax(CASES["adamw"], testing.make_tree(), backend=None)
    assert step.compile_seconds == 0.0
    _check_stacked_against_optax(PER_LEAF["adafactor"], backend=None)


def test_non_finite_step_is_skipped_like_optax():
    params = testing.make_tree()
    grads = _grads(params)
    grads[1]["layer"]["w"][0, 0] = float("inf")
    _check_against_optax(lambda o: o.apply_if_finite(o.sgd(0.1, momentum=0.5), 2), params,
                         grads=grads)


@pytest.mark.parametrize("ours", [
    lambda o: o.inject_hyperparams(o.adam)(learning_rate=0.1),
    lambda o: o.apply_if_finite(o.inject_hyperparams(o.adam)(learning_rate=0.1), 2),
    lambda o: o.named_chain(
        ("t0", o.apply_if_finite(o.contrib.scale_by_simplified_ademamix(), 2)),
        ("t1", o.inject_hyperparams(o.radam)(learning_rate=o.warmup_constant_schedule(
            0.5, 1.0, 15)))),
], ids=["inject", "apply_if_finite_inject", "named_chain_inject_schedule"])
def test_states_dynamo_cannot_flatten_compile_and_match_optax(ours):
    """``inject_hyperparams`` without schedules holds an empty dict, which Dynamo cannot
    flatten (``apply_if_finite`` selects between two such states), and Dynamo's ``tree_map``
    fails on the third state."""
    _check_against_optax(ours, testing.make_tree())


def test_mixed_dtypes_make_two_buffers_and_match_optax():
    params = {"a": testing.seeded_randn(3, 4), "b": testing.seeded_randn(5, dtype=torch.float64),
              "c": testing.seeded_randn(2, seed=1)}
    step = _check_against_optax(lambda o: o.adam(1e-2), params, dtype=torch.float64)
    assert [(b.dtype, b.numel()) for b in step.params] == [(torch.float32, 14),
                                                           (torch.float64, 5)]


def test_params_are_repointed_keeping_values_and_identity():
    model = torch.nn.Linear(3, 2)
    params = dict(model.named_parameters())
    before = {name: (p, p.detach().clone()) for name, p in params.items()}
    step = optax_compat.fused_step(optax_compat.sgd(0.1), params, backend="aot_eager")
    (buffer,) = step.params
    for name, p in model.named_parameters():
        original, values = before[name]
        assert p is original and isinstance(p, torch.nn.Parameter) and p.requires_grad
        torch.testing.assert_close(p.detach(), values, rtol=0, atol=0)
        assert p.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()
    assert step.compile_seconds == 0.0  # nothing compiled before the first step


def test_grads_as_views_accumulate_in_the_flat_buffer_and_match_the_copy_path():
    torch.manual_seed(0)
    models = [torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)]
    models[1].load_state_dict(models[0].state_dict())
    steps = [optax_compat.fused_step(optax_compat.adam(0.1), dict(m.named_parameters()),
                                     backend="aot_eager", grads_as_views=views)
             for m, views in zip(models, (True, False))]
    x = torch.randn(4, 3)
    for _ in range(3):
        for model, step in zip(models, steps):
            step.zero_grad()
            model.zero_grad(set_to_none=False)
            model(x).square().sum().backward()
            step({name: p.grad for name, p in model.named_parameters()})
    viewed, copied = (dict(m.named_parameters()) for m in models)
    for name, p in viewed.items():
        assert p.grad is steps[0].grads[name]
        torch.testing.assert_close(p, copied[name], rtol=0, atol=0)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "inside_torch_compile"])
def test_the_documented_loop_matches_the_functional_update(compiled):
    """``step.zero_grad()`` alone, with the gradients copied (the default): autograd's own
    ``.grad`` tensors must not accumulate from one step to the next. Also inside a training
    step that the user compiles."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    reference = {name: p.detach().clone() for name, p in model.named_parameters()}
    params = dict(model.named_parameters())
    step = optax_compat.fused_step(optax_compat.adamw(0.1), params, backend="aot_eager")
    tx = optax_compat.adamw(0.1)
    state = tx.init(reference)
    x = torch.randn(4, 3)

    def train() -> None:
        step.zero_grad()
        model(x).square().sum().backward()
        step({name: p.grad for name, p in params.items()})

    torch._dynamo.reset()
    train_step = torch.compile(train, backend="eager") if compiled else train
    for _ in range(3):
        train_step()
        grads = torch.func.grad(lambda p: torch.func.functional_call(model, p, (x,)).square()
                                .sum())(reference)
        updates, state = tx.update(grads, state, reference)
        reference = optax_compat.apply_updates(reference, updates)
    for name, p in params.items():
        torch.testing.assert_close(p.detach(), reference[name], rtol=1e-5, atol=1e-6)


def test_state_and_params_stay_in_their_buffers():
    params = testing.make_tree()
    step = optax_compat.fused_step(optax_compat.adamw(1e-2), params, backend="aot_eager")
    tracked = [*step.params, *tm.leaves(step.state)]
    pointers = [x.data_ptr() for x in tracked]
    for grad in _grads(params, 2):
        step(grad)
    assert [x.data_ptr() for x in tm.leaves(step.state)] == pointers[len(step.params):]
    assert [x.data_ptr() for x in step.params] == pointers[:len(step.params)]
    assert int(step.state[0].count) == 2


@pytest.mark.parametrize(("tx", "named"), [
    (lambda: optax_compat.adamw(1e-2, mask=lambda p: tm.tree_map(lambda x: x.ndim > 1, p)),
     "masked is not declared elementwise or per-leaf; fused_step"),
    (lambda: optax_compat.chain(optax_compat.clip_by_global_norm(1.0),
                                optax_compat.adafactor(1e-2)),
     "scale_by_factored_rms factors each matrix by its shape, and clip_by_global_norm divides "
     "by the global norm"),
    (lambda: optax_compat.noisy_sgd(0.1), "add_noise is not declared"),
])
def test_transformations_no_layout_fits_are_refused(tx, named):
    params = testing.make_tree()
    with pytest.raises(ValueError, match=f"{named}.*elementwise, on global reductions or leaf"):
        optax_compat.fused_step(tx(), params, backend="aot_eager")


def test_a_transformation_that_fails_under_vmap_is_refused_when_built():
    def update_fn(updates, state, params=None):
        del params
        return tm.tree_map(lambda g: g * float(g.sum()), updates), state  # reads a value

    tx = optax_compat.GradientTransformation(lambda params: optax_compat.EmptyState(),
                                             bb.per_leaf("reads its values")(update_fn))
    with pytest.raises(ValueError, match=r"cannot run leaf by leaf under torch\.func\.vmap"):
        optax_compat.fused_step(tx, _layered_tree(), backend="aot_eager")


def test_a_state_leaf_computed_from_another_reads_its_old_value_with_inductor():
    # Inductor lowers ``torch._foreach_copy_`` destination after destination, each source
    # computed as it is written: a source that reads an earlier destination (here ``b`` reads
    # ``a``) would read the new value. The write-back therefore copies leaf by leaf.
    def init_fn(params):
        leaves = tm.leaves(params)
        return ([torch.zeros_like(x) for x in leaves], [torch.ones_like(x) for x in leaves])

    @bb.elementwise
    def update_fn(updates, state, params=None):
        a, b = state
        new_a = [x + g for x, g in zip(a, tm.leaves(updates))]
        new_b = [y * x + 1.0 for y, x in zip(b, a)]
        return tm.tree_map(lambda g: -0.1 * g, updates), (new_a, new_b)

    tx = optax_compat.GradientTransformation(init_fn, update_fn)
    steps = {backend: optax_compat.fused_step(tx, {"w": torch.zeros(4, 2)}, backend=backend)
             for backend in (None, "inductor")}
    for seed in (1, 2, 3):
        grad = {"w": testing.random_tree({"w": (4, 2)}, seed=seed)["w"]}
        for step in steps.values():
            step(grad)
    eager, compiled = steps[None].state, steps["inductor"].state
    testing.assert_leaves_close(compiled, eager, what="state")


def _layered_tree(scalar: bool = True) -> dict[str, torch.Tensor]:
    """Three layers of two shapes, a head and a scalar: stacks of sizes 3 and 1."""
    shapes = {**{f"w{i}": (3, 4) for i in range(3)}, **{f"b{i}": (4,) for i in range(3)},
              "head": (4, 2), **({"scale": ()} if scalar else {})}
    return testing.random_tree(shapes)


# Transformations that act leaf by leaf, run on stacks of same-shaped leaves under vmap.
PER_LEAF = {
    "adafactor": lambda o: o.adafactor(1e-2, min_dim_size_to_factor=2),
    "adafactor_momentum_decay": lambda o: o.adafactor(
        1e-2, min_dim_size_to_factor=2, momentum=0.9, weight_decay_rate=1e-3),
    "lamb": lambda o: o.lamb(1e-2, weight_decay=1e-3),
    "lars": lambda o: o.lars(1e-2),
    "novograd": lambda o: o.novograd(1e-2),
    "sm3": lambda o: o.sm3(1e-2),
    "fromage": lambda o: o.fromage(1e-2),
    "agc_centralize": lambda o: o.chain(o.adaptive_grad_clip(0.1), o.centralize(),
                                        o.zero_nans(), o.sgd(0.1, momentum=0.9)),
    "param_block_norm": lambda o: o.chain(o.scale_by_param_block_norm(), o.scale(-1e-2)),
}


def _check_stacked_against_optax(ours: Callable[[Any], Any], backend: str | None,
                                 params: Any = None) -> optax_compat.FusedStep:
    """Runs a stacked ``fused_step`` and jitted Optax side by side: params after every step."""
    import optax

    if params is None:
        params = _layered_tree(scalar=ours is not PER_LEAF["sm3"])  # SM3 refuses 0-d leaves
    with testing.jax_precision(torch.float32):
        theirs_tx = testing.jit_optax(ours(optax))
        theirs_params = testing.to_jax(params)
        theirs_state = theirs_tx.init(theirs_params)
        step = optax_compat.fused_step(ours(optax_compat), params, backend=backend)
        assert step.layout == "stacked"
        for index, grad in enumerate(_grads(params)):
            updates, theirs_state = theirs_tx.update(testing.to_jax(grad), theirs_state,
                                                     theirs_params)
            theirs_params = optax.apply_updates(theirs_params, updates)
            step(grad)
            testing.assert_leaves_close(params, theirs_params, what=f"step {index + 1}: params")
    return step


@pytest.mark.parametrize("name", sorted(PER_LEAF))
def test_per_leaf_transformations_run_stacked_and_match_optax_with_inductor(name):
    """The stacked layout under Inductor (our loop patches included); the graph Inductor
    receives is the one ``aot_eager`` would run, so one backend covers both."""
    _check_stacked_against_optax(PER_LEAF[name], "inductor")


def _long_leaves() -> dict[str, torch.Tensor]:
    """Four 40x40 leaves: 400 times more elements per leaf than leaves, where Inductor would
    keep a leaf's reductions and its update in separate loops (over 300 times)."""
    generator = torch.Generator().manual_seed(3)  # on the CPU: the loops counted are C++'s
    return {f"w{index}": torch.randn(40, 40, generator=generator, device="cpu")
            for index in range(4)}


@needs_every_pass
@pytest.mark.parametrize(("name", "loops"), [("adafactor", 11), ("fromage", 3), ("lamb", 4),
                                           ("lars", 3), ("sm3", 3)])
def test_a_leafs_reductions_and_update_share_one_loop_and_optaxs_numbers(name, loops,
                                                                         monkeypatch):
    """``per_leaf_loops``: Inductor nests a leaf's reductions, its per-leaf values and its
    update in one loop over the leaves (its own count of the loops nested says how), no other
    loop reads a parameter-sized buffer, and the numbers stay Optax's.

    * SM3's update does not read its per-row maxima: the two loops nest although neither
      depends on the other. Its row and column maxima read the gradient by rows and by
      columns, and nest one after the other (three loops) instead of sharing one loop over
      transposed tiles (two).
    * Adafactor's update reads its column factors broadcast over the rows, and its row sums
      would otherwise run over all the leaves' rows merged in a loop of their own.
    * Fromage's and LARS's norms of a leaf's parameter and of its update share one loop
      (three loops, not four).
    """
    from torch._inductor import config, ir, metrics, scheduler
    from torch._inductor.virtualized import V

    readers: list[dict[str, int]] = []
    fuse_nodes = scheduler.Scheduler.fuse_nodes

    def counting_readers(self, nodes):
        fused = fuse_nodes(self, nodes)
        sizes = {name: value.get_numel() for name, value in V.graph.graph_inputs.items()
                 if isinstance(value, ir.TensorBox)}
        largest = max(sizes.values())
        readers.append({name: sum(name in node.read_writes.buffer_names() for node in fused)
                        for name, size in sizes.items() if size == largest})
        return fused

    monkeypatch.setattr(scheduler.Scheduler, "fuse_nodes", counting_readers)
    metrics.reset()
    with config.patch(force_disable_caches=True):  # a cached kernel is not counted
        _check_stacked_against_optax(PER_LEAF[name], "inductor", _long_leaves())
    fused = metrics.cpp_outer_loop_fused_inner_counts
    assert [count.inner_kernel_number for count in fused] == [loops], fused
    assert readers and all(set(counts.values()) == {1} for counts in readers), readers


@needs_every_pass
def test_per_leaf_loops_restores_inductor_as_it_found_it():
    from torch._inductor import config, scheduler
    from torch._inductor.codegen import cpp

    from optax_compat._runtime import inductor_passes

    patched = [(cpp.OuterLoopFusedSchedulerNode, "check_outer_fusion_loop_level_attr"),
               (cpp.TilingSelect, "select_tiling"),
               (cpp.CppScheduling, "_can_fuse_horizontal_impl"),
               (cpp.CppScheduling, "can_fuse_horizontal"),
               (cpp.CppScheduling, "can_fuse_vertical_outer_loop"),
               (cpp.CppScheduling, "_get_outer_loop_fusion_depth"),
               (scheduler.Scheduler, "_score_fusion_memory_for_can_fuse"),
               (scheduler.Scheduler, "can_fuse_vertical"),
               (scheduler.SchedulerNode, "_compute_attrs")]
    before = [getattr(owner, name) for owner, name in patched]
    aggressive = config.aggressive_fusion
    with pytest.raises(RuntimeError, match="inside"):
        with inductor_passes.per_leaf_loops():
            assert all(getattr(owner, name) is not original
                       for (owner, name), original in zip(patched, before, strict=True))
            assert config.aggressive_fusion
            raise RuntimeError("inside")
    assert all(getattr(owner, name) is original
               for (owner, name), original in zip(patched, before, strict=True))
    assert config.aggressive_fusion == aggressive


def test_stacked_state_has_one_tree_per_stack_size():
    params = _layered_tree()
    step = optax_compat.fused_step(optax_compat.lamb(1e-2), params, backend="aot_eager")
    step(_grads(params, 1)[0])
    # Groups in leaf order (sorted keys): b0-b2, head, scale, w0-w2.
    assert [tuple(buffer.shape) for buffer in step.params] == [(12,), (8,), (1,), (36,)]
    by_size = {int(tm.leaves(state)[0].shape[0]): state for state in step.state}
    assert sorted(by_size) == [1, 3]
    adam_state = by_size[3][0]
    assert adam_state.count.tolist() == [1, 1, 1]
    assert [tuple(mu.shape) for mu in adam_state.mu] == [(3, 4), (3, 3, 4)]  # b0-b2, w0-w2


# Declared transformations give the tree's numbers on flat buffers, without compiling.
DECLARED = {
    "sgd": lambda: optax_compat.sgd(0.1, momentum=0.9, nesterov=True),
    "adamax": lambda: optax_compat.adamax(0.1),
    "amsgrad": lambda: optax_compat.amsgrad(0.1),
    "adabelief": lambda: optax_compat.adabelief(0.1),
    "yogi": lambda: optax_compat.yogi(0.1),
    "radam": lambda: optax_compat.radam(0.1),
    "adadelta": lambda: optax_compat.adadelta(0.1),
    "adan": lambda: optax_compat.adan(0.1),
    "rmsprop": lambda: optax_compat.rmsprop(0.1, centered=True, momentum=0.9),
    "adagrad": lambda: optax_compat.adagrad(0.1),
    "rprop": lambda: optax_compat.rprop(0.1),
    "sign_sgd": lambda: optax_compat.chain(optax_compat.scale_by_sign(), optax_compat.scale(-0.1)),
    "optimistic": lambda: optax_compat.optimistic_gradient_descent(0.1),
    "normalize": lambda: optax_compat.normalize_by_update_norm(),
    "zero_clip_ema": lambda: optax_compat.chain(
        optax_compat.set_to_zero(), optax_compat.clip(0.5), optax_compat.ema(0.9),
        optax_compat.keep_params_nonnegative()),
    "named_chain": lambda: optax_compat.named_chain(
        ("clip", optax_compat.clip_by_global_norm(0.5)), ("lion", optax_compat.lion(0.1))),
    "acprop": lambda: optax_compat.contrib.acprop(0.1),
    "ademamix": lambda: optax_compat.contrib.ademamix(0.1),
    "simplified_ademamix": lambda: optax_compat.contrib.simplified_ademamix(0.1),
    "adopt": lambda: optax_compat.contrib.adopt(0.1),
    "prodigy": lambda: optax_compat.contrib.prodigy(weight_decay=0.1),
    "dadapt_adamw": lambda: optax_compat.contrib.dadapt_adamw(weight_decay=0.1),
    "schedule_free_adamw": lambda: optax_compat.contrib.schedule_free_adamw(0.1),
    "conditionally_mask": lambda: optax_compat.conditionally_mask(
        optax_compat.sgd(0.1), lambda step: step > 0),
}


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_declared_transformations_give_the_same_numbers_on_flat_buffers(name):
    params = testing.make_tree()
    flat_params = _as_flat(params, params)
    tx = DECLARED[name]()
    state, flat_state = tx.init(params), tx.init(flat_params)
    for grad in _grads(params, 3):
        updates, state = tx.update(grad, state, params)
        flat_updates, flat_state = tx.update(_as_flat(grad, params), flat_state, flat_params)
        params = optax_compat.apply_updates(params, updates)
        flat_params = optax_compat.apply_updates(flat_params, flat_updates)
        testing.assert_leaves_close(flat_updates, _as_flat(updates, params), what=name)
        testing.assert_leaves_close(flat_state, _as_flat(state, params), what=name)


def test_inductor_options_follow_the_cpu_capability(monkeypatch):
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    assert compilation.compile_options() == {"cpp.simdlen": 0}
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    assert compilation.compile_options() == {"cpp.simdlen": 256}
