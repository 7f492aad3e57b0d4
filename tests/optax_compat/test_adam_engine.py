"""The Adam engine: its paths, their numbers, layouts, inf moments and meta-gradients."""

from __future__ import annotations

import warnings
from typing import Any

import optree
import pytest
import torch

import optax_compat
import torchopt_fn as torchopt
from optax_compat._runtime import adam_engine
from optax_compat.testing import assert_leaves_close, make_tree, to_jax
from optax_compat.transforms import chain
from tests.conftest import FLOAT32_ATOL, TEST_DEVICE

# Optax op by op and Optax under jax.jit differ by about 2e-7 of the largest update per float32
# step; the multi-tensor paths stay within twice that. The fused kernel rounds in another order
# and was measured up to 4.1e-7 (one leaf in 30 steps of these cases).
ROUNDING = {torch.float32: 4e-7, torch.float64: 1e-15}
# On CUDA the kernel reads its learning rate as float32, one rounding more (measured 5.07e-7 on
# an H200, torch 2.11); it takes no float64 leaves there (adam_engine._kernel_fits).
KERNEL_ROUNDING = {torch.float32: 6.5e-7 if TEST_DEVICE.type == "cuda" else 5e-7,
                   torch.float64: 1e-15}
KERNEL_TAKES_FLOAT64 = TEST_DEVICE.type != "cuda"


def leaves(tree: Any) -> list[torch.Tensor]:
    return optree.tree_leaves(tree, none_is_leaf=False)


def clone(tree: Any) -> Any:
    return optree.tree_map(torch.clone, tree, none_is_leaf=False)


def assert_within_rounding(ours: Any, reference: Any, dtype: torch.dtype, what: str) -> None:
    """Every leaf within ``KERNEL_ROUNDING`` times the largest reference value (per tree)."""
    scale = max(float(x.abs().max()) for x in leaves(reference) if x.numel())
    assert_leaves_close(ours, reference, rtol=0, atol=KERNEL_ROUNDING[dtype] * scale, what=what)


def assert_whole_step_close(ours: Any, new_params: Any, updates: Any, rounding: float,
                            dtype: torch.dtype, what: str) -> None:
    """A whole in-place step's params against ``apply_updates``'s: within ``rounding`` times
    the largest update, plus the params' own rounding (an ulp of the largest param)."""
    scale = max(float(u.abs().max()) for u in leaves(updates))
    ulp = torch.finfo(dtype).eps * max(float(p.abs().max()) for p in leaves(new_params))
    assert_leaves_close(ours, new_params, rtol=0, atol=rounding * scale + ulp, what=what)


def optax_chain(learning_rate: Any, weight_decay: float | None = None,
                mask: Any = None, **kwargs: Any) -> Any:
    """``adam`` (or with ``weight_decay``, ``adamw``) evaluated transform by transform."""
    decay = ([] if weight_decay is None
             else [optax_compat.add_decayed_weights(weight_decay, mask)])
    return chain(optax_compat.scale_by_adam(**kwargs), *decay,
                 optax_compat.scale_by_learning_rate(learning_rate))


@pytest.fixture
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    for name in ("_fused_adam_", "_fused_adamw_"):
        kernel = getattr(torch, name)

        def counting(*args: Any, _kernel: Any = kernel, **kwargs: Any) -> None:
            calls.append(len(args[0]))
            _kernel(*args, **kwargs)

        monkeypatch.setattr(torch, name, counting)
    return calls


def schedule() -> Any:
    return optax_compat.exponential_decay(0.1, 3, 0.7)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("lr", ["constant", "schedule", "tensor"])
@pytest.mark.parametrize("weight_decay", [None, 0.0, 0.05], ids=["adam", "adamw0", "adamw"])
def test_kernel_paths_keep_optax_numbers(dtype: torch.dtype, lr: str,
                                         weight_decay: float | None,
                                         kernel_calls: list[int]) -> None:
    def learning_rate() -> Any:
        return {"constant": 0.1, "schedule": schedule(),
                "tensor": torch.tensor(0.05)}[lr]

    hyper = {"b1": 0.8, "b2": 0.99, "eps": 1e-6}
    fast = (optax_compat.adam(learning_rate(), **hyper) if weight_decay is None else
            optax_compat.adamw(learning_rate(), weight_decay=weight_decay, **hyper))
    whole = (optax_compat.adam(learning_rate(), **hyper) if weight_decay is None else
             optax_compat.adamw(learning_rate(), weight_decay=weight_decay, **hyper))
    apply_step = optax_compat.inplace_step(whole)
    assert apply_step is not None
    slow = optax_chain(learning_rate(), weight_decay, **hyper)
    params = make_tree(dtype)
    fast_state, slow_state = fast.init(params), slow.init(params)
    whole_params, whole_state = clone(params), whole.init(params)
    for step in range(30):
        grads = make_tree(dtype, seed=step + 1, scale=0.1 + step % 3)
        grads_copy, state_copy = clone((grads, fast_state))
        fast_updates, fast_state = fast.update(grads, fast_state, params)
        assert_leaves_close((grads, state_copy), clone((grads_copy, state_copy)), rtol=0,
                     atol=0, what="inputs must be untouched")
        slow_updates, slow_state = slow.update(grads, slow_state, params)
        assert_within_rounding(fast_updates, slow_updates, dtype, f"updates {step}")
        assert_leaves_close(fast_state, slow_state, what=f"state {step}")
        assert fast_state[0].count.dtype == torch.int32
        before = leaves(whole_params)
        whole_state = apply_step(whole_params, grads, whole_state, keep_grads=True)
        assert all(a is b for a, b in zip(before, leaves(whole_params), strict=True))
        assert_leaves_close(grads, grads_copy, rtol=0, atol=0, what="grads must be untouched")
        new_params = optax_compat.apply_updates(params, slow_updates)
        assert_whole_step_close(whole_params, new_params, slow_updates, KERNEL_ROUNDING[dtype],
                                dtype, f"whole step {step}")
        assert_leaves_close(whole_state, slow_state, what=f"whole-step state {step}")
        params = new_params
        whole_params = clone(params)
    if dtype == torch.float64 and not KERNEL_TAKES_FLOAT64:
        assert kernel_calls == []
    else:
        assert len(kernel_calls) == 60 and kernel_calls[0] == len(leaves(params))


def test_other_paths_when_the_kernel_does_not_apply(kernel_calls: list[int]) -> None:
    params = make_tree(torch.float64)
    grads = make_tree(torch.float64, seed=1)
    learning_rate = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    for tx in (optax_compat.adam(learning_rate),  # autograd must see the learning rate
               optax_compat.adam(0.1, eps_root=1e-8),
               optax_compat.adam(0.1, nesterov=True),
               optax_compat.adam(0.1, mu_dtype=torch.float32),
               optax_compat.adam(0.1, b1=torch.tensor(0.9)),
               optax_compat.adamw(0.1, mask=lambda params: True),
               optax_compat.adamw(0.1, weight_decay=lambda count: 0.1)):
        tx.update(grads, tx.init(params), params)
    tx = optax_compat.adam(0.1)
    tx.update(grads, tx.init(params), params, inplace=True)
    mixed = {"a": torch.ones(2), "b": torch.ones(2, dtype=torch.float64)}
    tx.update(mixed, tx.init(mixed), mixed)
    assert kernel_calls == []


def mixed_tree(seed: int = 0, scale: float = 1.0) -> dict[str, Any]:
    """float32 and float64 leaves in one tree: the kernel (one dtype) does not fit it."""
    return {"single": make_tree(torch.float32, seed, scale),
            "double": make_tree(torch.float64, seed + 100, scale)}


@pytest.mark.parametrize("lr", ["constant", "schedule", "tensor"])
@pytest.mark.parametrize(("alias", "tree"), [
    *[(alias, "mixed") for alias in ("optax.adam", "optax.adamw")],
    *[(alias, tree) for tree in ("float32", "float64", "mixed") for alias in (
        "torchopt.adam", "torchopt.adam(l2, maximize)", "torchopt.adamw",
        "torchopt.adamw(maximize)")]])
def test_foreach_whole_steps_keep_the_chains_numbers(alias: str, lr: str, tree: str,
                                                     kernel_calls: list[int],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole steps where the kernel does not run (TorchOpt's Adam without the accelerated op;
    optax's on a tree of two dtypes, as the kernel takes one) add ``m / (d / s)`` in one pass:
    the chain's numbers, within the multi-tensor path's rounding and the params' own."""

    def build() -> Any:
        learning_rate = {"constant": 0.1, "schedule": schedule(),
                         "tensor": torch.tensor(0.05)}[lr]
        hyper = {"b1": 0.8, "b2": 0.99, "eps": 1e-6}
        if alias.startswith("optax"):
            return getattr(optax_compat, alias[6:])(learning_rate, **hyper)
        flags = {"maximize": "maximize" in alias, "betas": (0.8, 0.99), "eps": 1e-6}
        if alias.startswith("torchopt.adamw"):
            return torchopt.adamw(learning_rate, weight_decay=0.05, **flags)
        return torchopt.adam(learning_rate, weight_decay=0.05 if "l2" in alias else 0.0, **flags)

    def make(seed: int = 0, scale: float = 1.0) -> Any:
        return (mixed_tree(seed, scale) if tree == "mixed"
                else make_tree(getattr(torch, tree), seed, scale))

    dtype = torch.float64 if tree == "float64" else torch.float32
    foreach_steps: list[int] = []  # the engine's whole step ran, not the chain it falls back to
    apply_on_foreach = adam_engine._foreach_apply
    monkeypatch.setattr(adam_engine, "_foreach_apply", lambda *args: (
        foreach_steps.append(1), apply_on_foreach(*args))[1])
    whole, chained = build(), build()
    apply_step = optax_compat.inplace_step(whole)
    assert apply_step is not None
    params = make()
    whole_params, whole_state, state = clone(params), whole.init(params), chained.init(params)
    for step in range(12):
        grads = make(seed=step + 1, scale=0.1 + step % 3)
        updates, state = chained.update(clone(grads), state, params=params, inplace=False)
        whole_state = apply_step(whole_params, grads, whole_state)
        new_params = optax_compat.apply_updates(params, updates)
        assert_whole_step_close(whole_params, new_params, updates, ROUNDING[dtype], dtype,
                                f"whole step {step}")
        assert_leaves_close(whole_state, state, what=f"whole-step state {step}")
        params, whole_params = new_params, clone(new_params)
    assert kernel_calls == [] and len(foreach_steps) == 12


@pytest.mark.parametrize("mode", ["pure", "inplace", "apply"])
def test_plan(mode: str) -> None:
    hp = adam_engine.AdamHyperParams()
    terms = adam_engine.AliasTerms(0.1)
    x = [torch.ones(3)]
    kernel = "foreach" if mode == "inplace" else "kernel"
    assert adam_engine.plan(hp, x, [torch.zeros(3)], [torch.zeros(3)], mode, terms, x) == kernel
    assert adam_engine.plan(hp, x, [torch.zeros(3)], [torch.zeros(3)], mode) == "foreach"
    meta = [torch.ones(3, device="meta")]
    assert adam_engine.plan(hp, meta, meta, meta, mode, terms, meta) == "foreach"
    assert adam_engine.plan(hp._replace(nesterov=True), x, x, x, mode, terms, x) == "formula"
    half = [torch.ones(3, dtype=torch.float16)]
    assert adam_engine.plan(hp, half, half, half, mode, terms, half) == "foreach"
    # Moments that hold a non-finite value leave the kernel (its first moment is a lerp).
    for bad in (float("inf"), float("nan")):
        assert adam_engine.plan(hp, x, [torch.zeros(3)], [torch.tensor([0.0, bad, 1.0])], mode,
                                terms, x) == "foreach"
    # Nor does b1 <= 0.5: the kernel's lerp then gives NaN at an infinite gradient.
    assert adam_engine.plan(hp._replace(b1=0.5), x, [torch.zeros(3)], [torch.zeros(3)], mode,
                            terms, x) == "foreach"
    # Leaves with no elements go along (the check of the moments skips them).
    two = [torch.ones(3), torch.ones(0)]
    assert adam_engine.plan(hp, two, [torch.zeros(3), torch.zeros(0)],
                            [torch.zeros(3), torch.zeros(0)], mode, terms, two) == kernel
    if mode == "apply":  # buffers written by the kernel must be packed
        transposed = [torch.zeros(3, 2).t()]
        assert adam_engine.plan(hp, [torch.ones(2, 3)], transposed, transposed, mode, terms,
                                [torch.ones(2, 3)]) == "foreach"


def test_inplace_step_only_on_the_aliases_themselves() -> None:
    assert optax_compat.inplace_step(optax_compat.adam(0.1)) is not None
    assert optax_compat.inplace_step(optax_compat.adamw(0.1)) is not None
    assert optax_compat.inplace_step(optax_compat.adam(None)) is None
    assert optax_compat.inplace_step(optax_compat.sgd(0.1)) is None
    assert optax_compat.inplace_step(chain(optax_compat.adam(0.1))) is None
    assert optax_compat.inplace_step(torchopt.adam(use_accelerated_op=True)) is not None
    assert optax_compat.inplace_step(torchopt.adam()) is not None


def test_adamw_without_params_raises_as_the_chain_does() -> None:
    tx = optax_compat.adamw(0.1)
    params = {"a": torch.ones(2)}
    with pytest.raises(ValueError, match="params"):
        tx.update(params, tx.init(params))


def test_mismatched_trees_name_the_path() -> None:
    tx = optax_compat.adam(0.1)
    params = {"a": torch.ones(2), "b": torch.ones(3)}
    state = tx.init(params)
    with pytest.raises(ValueError, match="'c'"):
        tx.update({"a": torch.ones(2), "c": torch.ones(3)}, state)
    with pytest.raises(ValueError, match="'c'"):
        optax_compat.inplace_step(tx)(params, {"a": torch.ones(2), "c": torch.ones(3)}, state)


# ----------------------------------------------------------------------------------------------
# Layouts: strided, transposed, expanded and complex-split inputs give the numbers of the same
# run on contiguous copies, on every alias and path.

ALIASES = (
    "adabelief adadelta adafactor adagrad adam adamax adamaxw adamw adan amsgrad fromage lamb "
    "lars lion nadam nadamw noisy_sgd novograd optimistic_adam optimistic_adam_v2 "
    "optimistic_gradient_descent polyak_sgd radam rmsprop rprop sgd sign_sgd signum sm3 yogi"
).split()


def build_alias(name: str) -> Any:
    if name == "polyak_sgd":
        return optax_compat.polyak_sgd(max_learning_rate=0.1)
    if name == "noisy_sgd":
        return optax_compat.noisy_sgd(0.1, key=0)
    return getattr(optax_compat, name)(0.1)


def strided_views(seed: int) -> dict[str, dict[str, torch.Tensor]]:
    """Gradient trees whose leaves are views with unusual layouts, by kind."""
    generator = torch.Generator(TEST_DEVICE).manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator, device=TEST_DEVICE)

    return {
        "strided": {"v": torch.arange(1.0, 7.0)[::2] * randn(3), "w": randn(8, 3)[::2]},
        "transposed": {"v": randn(3), "w": randn(3, 4).t()},
        "expanded": {"v": randn(1).expand(3), "w": randn(1, 3).expand(4, 3)},
    }


@pytest.mark.parametrize("kind", ["strided", "transposed", "expanded"])
@pytest.mark.parametrize("name", ALIASES)
def test_every_alias_reads_views_as_their_values(name: str, kind: str) -> None:
    params = {"v": torch.ones(3), "w": torch.ones(4, 3)}
    views = [strided_views(seed)[kind] for seed in range(3)]
    packed = [optree.tree_map(torch.Tensor.contiguous, g) for g in views]
    modes = ["pure", "inplace"] + (["apply"] if name in ("adam", "adamw") else [])
    for mode in modes:
        kwargs = {"value": torch.tensor(1.0)} if name == "polyak_sgd" else {}
        ours = run_with(build_alias(name), params, [clone(g) for g in views], mode, kwargs)
        reference = run_with(build_alias(name), params, [clone(g) for g in packed], mode,
                             kwargs)
        assert_leaves_close(ours, reference, rtol=1e-6, atol=1e-7,
                     what=f"{name} {mode}")


def run_with(tx: Any, params: Any, grads: list[Any], mode: str,
             kwargs: dict[str, Any]) -> tuple[Any, Any]:
    params, state = clone(params), tx.init(params)
    for grad in grads:
        if mode == "apply":
            state = optax_compat.inplace_step(tx)(params, grad, state)
            continue
        updates, state = tx.update(grad, state, params, inplace=mode == "inplace", **kwargs)
        params = optax_compat.apply_updates(params, updates)
    return params, state


def test_strided_gradient_gives_optax_first_moment() -> None:
    g = torch.arange(1.0, 7.0)[::2]
    for tx in (optax_compat.adam(1.0), optax_compat.adamw(1.0)):
        _, state = tx.update(g, tx.init(torch.zeros(3)), torch.zeros(3))
        torch.testing.assert_close(state[0].mu, torch.tensor([0.1, 0.3, 0.5]))


@pytest.mark.parametrize("mode", ["pure", "inplace"])
def test_complex_split_matches_contiguous_parts(mode: str, device: torch.device) -> None:
    # ``inplace`` reaches the inner adam only through a transformation that declares it.
    generator = torch.Generator(device).manual_seed(0)
    params = {"z": torch.randn(4, 3, dtype=torch.complex64, generator=generator, device=device)}
    grads = [{"z": torch.randn(4, 3, dtype=torch.complex64, generator=generator, device=device)}
             for _ in range(3)]
    split = optax_compat.with_extra_args_support(
        optax_compat.contrib.split_real_and_imaginary(optax_compat.adam(0.1)))
    ours, _ = run_with(split, params, grads, mode, {})
    parts = {"re": params["z"].real.contiguous(), "im": params["z"].imag.contiguous()}
    part_grads = [{"re": g["z"].real.contiguous(), "im": g["z"].imag.contiguous()}
                  for g in grads]
    reference, _ = run_with(optax_compat.adam(0.1), parts, part_grads, mode, {})
    assert_leaves_close({"im": ours["z"].imag, "re": ours["z"].real}, reference,
                        rtol=1e-6, atol=FLOAT32_ATOL / 10)


@pytest.mark.parametrize("accelerated", [False, True], ids=["foreach", "accelerated"])
@pytest.mark.parametrize("optimizer", ["Adam", "AdamW"])
@pytest.mark.parametrize("kind", ["strided", "transposed", "expanded", "transposed_params"])
def test_torchopt_optimizers_read_views_as_their_values(optimizer: str, accelerated: bool,
                                                        kind: str) -> None:
    def run(packed: bool) -> list[torch.Tensor]:
        if kind == "transposed_params":
            params = [torch.ones(3, 4).t(), torch.ones(3)]
            if packed:
                params = [p.contiguous() for p in params]
        else:
            params = [torch.ones(4, 3), torch.ones(3)]
        opt = getattr(torchopt, optimizer)(params, lr=0.1, use_accelerated_op=accelerated)
        for seed in range(3):
            grads = strided_views(seed)["transposed" if kind == "transposed_params" else kind]
            for p, g in zip(params, (grads["w"], grads["v"]), strict=True):
                p.grad = g.contiguous() if packed else g.clone() if g.stride() == (
                    0,) * g.ndim else g
            opt.step()
        return params

    # An expanded ``.grad`` too: the steps only read the gradients (the in-place paths that
    # would write into them get copies).
    for ours, reference in zip(run(False), run(True), strict=True):
        torch.testing.assert_close(ours, reference, rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------------------------
# Infinite moments stay infinite at the next finite gradient, as in Optax.


@pytest.mark.parametrize(("name", "mode"), [
    (name, mode) for name in ("adam", "adamw", "lion") for mode in ("pure", "inplace", "apply")
    if (name, mode) != ("lion", "apply")])  # lion has no whole in-place step
def test_inf_moments_match_optax(name: str, mode: str, device: torch.device) -> None:
    import optax

    if device.type == "cuda" and name != "lion" and mode != "inplace":
        pytest.xfail("torch's fused CUDA Adam kernel gives NaN where a squared gradient "
                     "overflows to inf and Optax gives 0 (seen on an H200, torch 2.11)")
    inf = float("inf")
    params = {"w": torch.tensor([1.0, -2.0, 3.0]), "b": torch.tensor([0.5, 0.25])}
    grads = [{"w": torch.tensor([inf, 1.0, -inf]), "b": torch.tensor([1e30, 2.0])}] + [
        {"w": torch.tensor([0.5, -1.0, 2.0]), "b": torch.tensor([1.0, -3.0])}
        for _ in range(3)]
    ours_tx, theirs_tx = getattr(optax_compat, name)(0.1), getattr(optax, name)(0.1)
    ours_state, theirs_state = ours_tx.init(params), theirs_tx.init(to_jax(params))
    ours_params, theirs_params = clone(params), to_jax(params)
    for step, grad in enumerate(grads):
        theirs_updates, theirs_state = theirs_tx.update(to_jax(grad), theirs_state,
                                                        theirs_params)
        theirs_params = optax.apply_updates(theirs_params, theirs_updates)
        if mode == "apply":
            ours_state = optax_compat.inplace_step(ours_tx)(ours_params, clone(grad), ours_state)
        else:
            updates, ours_state = ours_tx.update(clone(grad), ours_state, ours_params,
                                                 inplace=mode == "inplace")
            assert_leaves_close(updates, theirs_updates, what=f"updates {step}")
            ours_params = optax_compat.apply_updates(ours_params, updates)
        assert_leaves_close(ours_params, theirs_params, what=f"params {step}")
        assert_leaves_close(ours_state, theirs_state, what=f"state {step}")


# ----------------------------------------------------------------------------------------------
# Meta-gradients through Adam at eps_root=0 on a ReLU network with dead units.


def meta_gradients(accelerated: bool, eps_root: float = 0.0) -> list[torch.Tensor]:
    """Meta-gradients of a 2-step MAML with MetaAdam(lr=0.1) on a ReLU MLP with dead units."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    with torch.no_grad():
        net[0].bias[:4] = -100.0  # four hidden units that never fire
    inputs, targets = torch.randn(16, 4), torch.randn(16, 1)
    initial = list(net.parameters())
    optimizer = torchopt.MetaAdam(net, lr=0.1, eps_root=eps_root,
                                  use_accelerated_op=accelerated)
    for _ in range(2):
        optimizer.step(torch.nn.functional.mse_loss(net(inputs), targets))
    torch.nn.functional.mse_loss(net(inputs), targets).backward()
    return [p.grad for p in initial]


def test_meta_adam_accelerated_op_keeps_meta_gradients_finite() -> None:
    grads = meta_gradients(accelerated=True)
    assert all(torch.isfinite(g).all() for g in grads)
    # Elsewhere the same meta-gradients as the default path where that one is finite.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = meta_gradients(accelerated=False)
    for ours, reference in zip(grads, default, strict=True):
        finite = torch.isfinite(reference)
        torch.testing.assert_close(ours[finite], reference[finite])


def test_meta_adam_default_path_warns_once_naming_eps_root(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adam_engine, "_warned_non_finite", False)
    with pytest.warns(RuntimeWarning, match="eps_root"):
        grads = meta_gradients(accelerated=False)
    assert not all(torch.isfinite(g).all() for g in grads)  # Optax's numbers: NaN
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        meta_gradients(accelerated=False)  # once only
        assert all(torch.isfinite(g).all() for g in meta_gradients(False, eps_root=1e-8))


def test_a_parameter_with_no_elements_steps_like_torch_optim() -> None:
    def make():
        params = [torch.nn.Parameter(torch.linspace(-1.0, 1.0, 6)), torch.nn.Parameter(
            torch.zeros(0, 4))]
        for p in params:
            p.grad = torch.ones_like(p)
        return params

    ours, theirs = make(), make()
    ours_optimizer = optax_compat.TorchOptimizer(ours, optax_compat.adam(0.1))
    theirs_optimizer = torch.optim.Adam(theirs, lr=0.1)
    for _ in range(3):
        ours_optimizer.step()
        theirs_optimizer.step()
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.detach(), b.detach())
    tx = optax_compat.adam(0.1)
    params = {"w": torch.ones(3), "empty": torch.zeros(0)}
    updates, _ = tx.update({"w": torch.ones(3), "empty": torch.zeros(0)}, tx.init(params),
                           params)
    assert updates["empty"].shape == (0,)
