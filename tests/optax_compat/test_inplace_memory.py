"""In-place steps allocate nothing proportional to the parameters.

``update(..., inplace=True)`` writes the new state into its buffers and the updates into the
incoming ones; what it allocates besides must not grow with the parameters. PyTorch's CPU
allocator reports every allocation and free to ``torch.profiler`` (``profile_memory=True``),
so the most bytes held at once during one update is the maximum of their running sum. The
blocks of ``tree_math.blocks`` are made small here, so that parameters of a few hundred KiB
span many blocks and a temporary of the parameters' size would be seen.
"""

from __future__ import annotations

import pytest
import torch

import optax_compat as optax
import torchopt_fn as torchopt
from optax_compat._runtime import tree_math as tm
from optax_compat._src import transform as T
from optax_compat.testing import assert_inplace_matches_pure, random_tree

BLOCK = 1024
# Leaves above and below the block size, some not multiples of it (a last partial view).
SHAPES = {"big": (40, 1000), "odd": (3, 1001), "small": (300,), "scalar": (), "square": (64, 64)}
PARAM_BYTES = 4 * sum(torch.Size(shape).numel() for shape in SHAPES.values())
# Several block-sized float32 temporaries at once, far below the parameters' 209 KiB.
BOUND = 12 * 4 * BLOCK

TRANSFORMS = {
    "lion": lambda: optax.lion(1e-3),
    "lion_smooth": lambda: T.scale_by_lion(mode="smooth"),
    "sign_sgd": lambda: optax.sign_sgd(1e-3),
    "signum": lambda: optax.signum(1e-3),
    "ema_debias": lambda: optax.ema(0.9, debias=True),
    "rmsprop": lambda: optax.rmsprop(1e-3),
    "rms_bias_correction": lambda: T.scale_by_rms(eps_in_sqrt=False, bias_correction=True),
    "rmsprop_centered": lambda: optax.rmsprop(1e-3, centered=True),
    "adagrad": lambda: optax.adagrad(1e-3),
    "adamax": lambda: optax.adamax(1e-3),
    "adamaxw": lambda: optax.adamaxw(1e-3),
    "radam": lambda: optax.radam(1e-3),
    "radam_nesterov": lambda: T.scale_by_radam(nesterov=True),
    "adadelta": lambda: optax.adadelta(1e-3),
    "adabelief": lambda: optax.adabelief(1e-3),
    "adabelief_nesterov": lambda: T.scale_by_belief(nesterov=True),
    "yogi": lambda: optax.yogi(1e-3),
    "amsgrad": lambda: optax.amsgrad(1e-3),
    "optimistic_gradient_descent": lambda: optax.optimistic_gradient_descent(1e-3),
    "adan": lambda: optax.adan(1e-3),
    "rprop": lambda: optax.rprop(1e-3),
    "fromage": lambda: optax.fromage(1e-3),
    "lamb": lambda: optax.lamb(1e-3),
    "lars": lambda: optax.lars(1e-3),
    "clip_by_block_rms": lambda: optax.clip_by_block_rms(0.5),
    "acprop": lambda: optax.contrib.acprop(1e-3),
    "ademamix": lambda: optax.contrib.ademamix(1e-3),
    "adopt": lambda: optax.contrib.adopt(1e-3),
    "adopt_nesterov_unclipped": lambda: optax.contrib.scale_by_adopt(nesterov=True,
                                                                     use_clipping=False),
    "nadam": lambda: optax.nadam(1e-3),
    "nadamw": lambda: optax.nadamw(1e-3),
    "optimistic_adam_v2": lambda: optax.optimistic_adam_v2(1e-3),
}


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    # Read by tm.blocks in the module that defines it, and as tm.BLOCK_ELEMENTS by the noise
    # runs of counter_random.
    monkeypatch.setattr(tm.arithmetic, "BLOCK_ELEMENTS", BLOCK)
    monkeypatch.setattr(tm, "BLOCK_ELEMENTS", BLOCK)


def _grads(seed: int) -> dict:
    grads = random_tree(SHAPES, seed=seed)
    grads["big"][0, :3] = torch.tensor([float("inf"), float("-inf"), float("nan")])
    return grads


def peak_bytes(step) -> int:
    """The most bytes PyTorch's CPU allocator holds during ``step()`` above its level at the start.

    The profiler does not report the free of a block allocated before it started, so this is
    an upper bound (such frees only lower the true level).
    """
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as profiler:
        step()
    events = sorted((event for event in profiler.profiler.kineto_results.events()
                     if event.name() == "[memory]"), key=lambda event: event.start_ns())
    live = peak = 0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    return peak


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_an_inplace_update_allocates_less_than_the_parameters(name):
    tx = TRANSFORMS[name]()
    params = random_tree(SHAPES, seed=0)
    state = tx.init(params)
    for seed in (1, 2):  # the state past its first step
        _, state = tx.update(_grads(seed), state, params, inplace=True)
    grads = _grads(3)
    peak = peak_bytes(lambda: tx.update(grads, state, params, inplace=True))
    assert peak <= BOUND < PARAM_BYTES, f"{name}: {peak} bytes at peak"


WHOLE_STEPS = {
    "adam (fused kernel)": lambda: optax.adam(1e-3),
    "adamw (fused kernel)": lambda: optax.adamw(1e-3),
    "torchopt adam (foreach)": lambda: torchopt.adam(1e-3, weight_decay=1e-2, maximize=True),
    "torchopt adamw (foreach)": lambda: torchopt.adamw(1e-3, weight_decay=1e-2),
}


@pytest.mark.parametrize("name", sorted(WHOLE_STEPS))
def test_a_whole_adam_step_allocates_less_than_the_parameters(name):
    tx = WHOLE_STEPS[name]()
    apply_step = optax.inplace_step(tx)
    params = random_tree(SHAPES, seed=0)
    state = tx.init(params)
    for seed in (1, 2):
        state = apply_step(params, _grads(seed), state)
    grads = _grads(3)
    peak = peak_bytes(lambda: apply_step(params, grads, state))
    assert peak <= BOUND < PARAM_BYTES, f"{name}: {peak} bytes at peak"


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_inplace_in_blocks_is_bit_identical_to_pure(name):
    assert_inplace_matches_pure(TRANSFORMS[name](), torch.float32, params=random_tree(SHAPES),
                                grads=[_grads(seed) for seed in (1, 2, 3)])


def test_blocks_cover_every_element_once_and_stay_within_the_block_size():
    leaves = [*random_tree(SHAPES).values(), torch.ones(5, 4).t()]  # one non-contiguous
    others = [torch.zeros_like(x) for x in leaves]
    seen = 0
    for xs, ys in tm.blocks(leaves, others):
        assert [x.shape for x in xs] == [y.shape for y in ys]
        contiguous = [x for x in xs if x.is_contiguous()]
        assert sum(x.numel() for x in contiguous) <= BLOCK or len(xs) == 1
        torch._foreach_add_(ys, 1.0)
        seen += sum(x.numel() for x in xs)
    assert seen == sum(x.numel() for x in leaves)
    assert all(bool((y == 1).all()) for y in others)


def test_sign_in_place_keeps_nan_and_maps_subnormals_and_infinities_to_one():
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        limits = torch.finfo(dtype)
        values = [float("nan"), float("inf"), -float("inf"), limits.max, -limits.max,
                  limits.smallest_normal * limits.eps, -limits.smallest_normal * limits.eps,
                  0.5, -2.0, 0.0]
        x = torch.tensor(values, dtype=dtype)
        (signs,) = tm.sign_([x.clone()])
        expected = torch.sign(x)
        expected[0] = float("nan")
        torch.testing.assert_close(signs, expected, equal_nan=True, rtol=0, atol=0)


def test_inplace_noise_is_drawn_one_leaf_at_a_time():
    # The counter-based noise of a leaf is hashed from int64 positions: several times the
    # leaf's size, but one leaf at a time, so many leaves keep the peak far below the params.
    shapes = {f"w{i:02d}": (10, 100) for i in range(50)}
    leaf_bytes, param_bytes = 4 * 1000, 4 * 1000 * len(shapes)
    tx = optax.noisy_sgd(1e-3, key=0)
    params = random_tree(shapes, seed=0)
    grads = random_tree(shapes, seed=1)
    state = tx.init(params)
    peak = peak_bytes(lambda: tx.update(grads, state, params, inplace=True))
    # About ten leaves' worth of int64 hashing plus a few 0-d tensors (48,016 bytes seen in one
    # run): bounded by sixteen leaves, under a third of the params.
    assert peak <= 16 * leaf_bytes < param_bytes / 3, f"{peak} bytes at peak"
    assert_inplace_matches_pure(optax.noisy_sgd(1e-3, key=0), torch.float32,
                                params=random_tree(shapes),
                                grads=[random_tree(shapes, seed=seed) for seed in (1, 2)])


def test_inplace_adafactor_works_one_leaf_at_a_time():
    # The factored second moment reduces the squared gradient of each matrix over its rows and
    # columns: whole leaves, so the temporaries span the largest leaf, not the parameters.
    _check_leaf_by_leaf(lambda: optax.adafactor(1e-3, momentum=0.9))


def test_inplace_novograd_works_one_leaf_at_a_time():
    # Each leaf is divided by a function of its norm: whole leaves again.
    _check_leaf_by_leaf(lambda: optax.novograd(1e-3))


def test_inplace_sm3_works_one_leaf_at_a_time():
    # The per-axis maxima reduce each leaf's accumulator over its other axes: blocks of whole
    # leaves (here each leaf is larger than the test's block, so one leaf per block; smaller
    # leaves share a block). Its chain of leaf-sized temporaries (squared gradient, broadcast
    # minimum, accumulator, its root, the scaled gradient, the momentum's terms) holds up to
    # six leaves at once.
    _check_leaf_by_leaf(lambda: optax.sm3(1e-3), leaves=6)


def test_inplace_muon_works_one_run_of_leaves_at_a_time():
    # Each matrix is orthogonalized whole: the new moment, the terms of its look-ahead, the
    # stack, the Newton-Schulz iterates and the direction span a run of leaves (here one leaf,
    # about nine leaves' worth at once), not the parameters.
    _check_leaf_by_leaf(lambda: optax.contrib.muon(1e-3), leaves=9)


def _check_leaf_by_leaf(make, leaves=4):
    shapes = {**{f"w{i:02d}": (130, 140) for i in range(12)}, "b": (140,), "v": (3, 5)}
    leaf_bytes = 4 * 130 * 140
    param_bytes = 4 * sum(torch.Size(shape).numel() for shape in shapes.values())
    peak = _third_inplace_update_peak(make(), shapes)
    assert peak <= leaves * leaf_bytes < param_bytes, f"{peak} bytes at peak"
    assert_inplace_matches_pure(make(), torch.float32,
                                params=random_tree(shapes),
                                grads=[random_tree(shapes, seed=seed) for seed in (1, 2, 3)])


def test_inplace_lbfgs_reads_its_memory_where_it_lies():
    # Ten rows of differences per leaf: the pure update copies the memory (in its new ring
    # order) to run the recursion; in place, the rows are read where they are, and the
    # recursion's temporaries span a block.
    shapes = {f"w{i:02d}": (130, 140) for i in range(6)}
    param_bytes = 4 * 6 * 130 * 140
    peak = _third_inplace_update_peak(optax.lbfgs(1e-2, linesearch=None), shapes)
    assert peak <= BOUND < param_bytes, f"{peak} bytes at peak"
    assert_inplace_matches_pure(optax.lbfgs(1e-2, linesearch=None), torch.float32, steps=12,
                                params=random_tree(shapes),
                                grads=[random_tree(shapes, seed=seed) for seed in range(1, 13)])


def _third_inplace_update_peak(tx, shapes) -> int:
    """:func:`peak_bytes` of the third in-place update of ``tx`` on random trees of ``shapes``."""
    params = random_tree(shapes, seed=0)
    state = tx.init(params)
    for seed in (1, 2):
        _, state = tx.update(random_tree(shapes, seed=seed), state, params, inplace=True)
    grads = random_tree(shapes, seed=3)
    return peak_bytes(lambda: tx.update(grads, state, params, inplace=True))


@pytest.mark.parametrize("name", ["adafactor", "lamb", "sm3"])
def test_a_stacked_fused_step_allocates_less_than_a_leaf(name):
    # Compiled by Inductor, the per-leaf reductions of these steps (row and column means, trust
    # ratios, per-axis maxima) sit between the state's update and the step that reads their
    # results: nothing the size of a stack of leaves may be stored in between.
    make = {"adafactor": lambda: optax.adafactor(1e-3, momentum=0.9),
            "lamb": lambda: optax.lamb(1e-3), "sm3": lambda: optax.sm3(1e-3)}[name]
    shapes = {f"w{i}": (64, 64) for i in range(8)}
    step = optax.fused_step(make(), random_tree(shapes, seed=0))
    for seed in (1, 2):
        step(random_tree(shapes, seed=seed))
    grads = random_tree(shapes, seed=3)
    peak = peak_bytes(lambda: step(grads))
    assert peak < 4 * 64 * 64, f"{name}: {peak} bytes at peak"
