"""Every Adam path of one checkout, as ratios to ``torch.optim``'s foreach Adam/AdamW.

For before/after comparisons of the core: run it once per revision, each from its own checkout
(``git worktree add --detach /tmp/old <rev>``), alternating, and compare the ratios::

    for i in 1 2 3; do
      for tree in /tmp/old .; do
        (cd $tree && PYTHONPATH=$PWD python $OLDPWD/benchmarks/bench_adam_paths.py --size b)
      done
    done

Paths, each one step of ``adam(1e-3)`` / ``adamw(1e-3, weight_decay=1e-2)`` with the same
gradients every step:

* ``pure``: ``update`` then ``apply_updates`` (new tensors);
* ``update(inplace)``: ``update(..., inplace=True)`` then an in-place add (not in revisions
  before the opt-in in-place mode);
* ``whole``: the whole in-place step, ``optax_compat.inplace_step(tx)`` (in older revisions,
  ``optax_compat._runtime.fused``'s ``adam``/``adamw``, the separate fused variant it replaced);
* ``torchopt_fn.Adam`` and ``accelerated``: ``torchopt_fn.Adam``/``AdamW.step()`` with
  ``.grad`` set, without and with ``use_accelerated_op``;
* ``torch fused``: ``torch.optim``'s ``fused=True`` step, for scale.

Sizes: (a) 4M parameters in 100 tensors, (b) 1M in 1,000, (d) 1M in 10,000. Times are medians
of interleaved steps, 1 thread, wall clock or (``--cpu-time``) the thread's CPU time. In-place
steps may overwrite the gradients they read (TorchOpt's ``inplace=True``): every path gets its
gradients back before each step, outside the timed region, as a training loop's backward pass
would write them.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import _checkout  # noqa: F401  (before optax_compat: see its docstring)
import torch

import optax_compat
import torchopt_fn

SIZES = {"a": (4_000_000, 100), "b": (1_000_000, 1000), "d": (1_000_000, 10_000)}
LEARNING_RATE, WEIGHT_DECAY = 1e-3, 1e-2
Step = Callable[[], None]


def refreshing(step: Step, grads: list[torch.Tensor]) -> Step:
    """``step`` with a ``refresh`` attribute that puts the gradients' values back."""
    originals = [g.clone() for g in grads]
    step.refresh = lambda: torch._foreach_copy_(grads, originals)  # type: ignore[attr-defined]
    return step


def random_tensors(shapes: list[tuple[int, int]], seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=generator) for shape in shapes]


def alias(name: str) -> optax_compat.GradientTransformation:
    if name == "adam":
        return optax_compat.adam(LEARNING_RATE)
    return optax_compat.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY)


def pure(name: str, shapes: list[tuple[int, int]]) -> Step:
    tx, grads = alias(name), random_tensors(shapes, 1)
    current = {"params": random_tensors(shapes, 0)}
    current["state"] = tx.init(current["params"])

    def step() -> None:
        updates, current["state"] = tx.update(grads, current["state"], current["params"])
        current["params"] = optax_compat.apply_updates(current["params"], updates)

    return step


def update_inplace(name: str, shapes: list[tuple[int, int]]) -> Step | None:
    tx, params, grads = alias(name), random_tensors(shapes, 0), random_tensors(shapes, 1)
    current = {"state": tx.init(params)}
    scratch = [g.clone() for g in grads]
    try:
        tx.update(scratch, current["state"], params, inplace=True)
    except TypeError:  # a revision without the in-place mode
        return None

    def step() -> None:
        updates, current["state"] = tx.update(scratch, current["state"], params, inplace=True)
        torch._foreach_add_(params, updates)

    return refreshing(step, scratch)  # update(inplace) overwrites its incoming updates


def whole(name: str, shapes: list[tuple[int, int]]) -> Step:
    params, grads = random_tensors(shapes, 0), random_tensors(shapes, 1)
    tx = alias(name)
    current = {"state": tx.init(params)}
    apply_step = getattr(optax_compat, "inplace_step", lambda tx: None)(tx)
    if apply_step is None:  # a revision with the separate fused variant
        from optax_compat._runtime import fused
        optimizer = (fused.adam(LEARNING_RATE) if name == "adam"
                     else fused.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY))
        state = optimizer.init(params)
        return lambda: optimizer.step(params, grads, state)

    def step() -> None:
        current["state"] = apply_step(params, grads, current["state"])

    return refreshing(step, grads)


def with_grads(optimizer_class: type, name: str, shapes: list[tuple[int, int]],
               **kwargs: object) -> Step:
    params = [torch.nn.Parameter(p) for p in random_tensors(shapes, 0)]
    grads = random_tensors(shapes, 1)
    for param, grad in zip(params, grads):
        param.grad = grad
    if name == "adamw":
        kwargs["weight_decay"] = WEIGHT_DECAY
    optimizer = optimizer_class(params, lr=LEARNING_RATE, **kwargs)
    return refreshing(lambda: optimizer.step(), grads)


def paths(name: str, shapes: list[tuple[int, int]]) -> dict[str, Step]:
    torch_class = torch.optim.Adam if name == "adam" else torch.optim.AdamW
    ours_class = torchopt_fn.Adam if name == "adam" else torchopt_fn.AdamW
    steps = {
        "foreach": with_grads(torch_class, name, shapes, foreach=True),
        "torch fused": with_grads(torch_class, name, shapes, fused=True),
        "pure": pure(name, shapes),
        "update(inplace)": update_inplace(name, shapes),
        "whole": whole(name, shapes),
        "torchopt_fn.Adam": with_grads(ours_class, name, shapes, use_accelerated_op=False),
        "accelerated": with_grads(ours_class, name, shapes, use_accelerated_op=True),
    }
    return {label: step for label, step in steps.items() if step is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="b", choices=sorted(SIZES))
    parser.add_argument("--steps", type=int, default=20, help="timed steps per path")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time with the thread's CPU time instead of the wall clock (steadier "
                             "while other processes load the machine)")
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    total, count = SIZES[arguments.size]
    per_tensor = total // count
    rows = int(per_tensor ** 0.5)
    shapes = [(rows, per_tensor // rows)] * count
    for name in ("adam", "adamw"):
        steps = paths(name, shapes)
        times: dict[str, list[float]] = {label: [] for label in steps}
        for step in steps.values():
            for _ in range(3):
                getattr(step, "refresh", lambda: None)()
                step()
        clock = time.thread_time if arguments.cpu_time else time.perf_counter
        for _ in range(arguments.steps):
            for label, step in steps.items():
                getattr(step, "refresh", lambda: None)()
                start = clock()
                step()
                times[label].append(clock() - start)
        medians = {label: statistics.median(ts) * 1e3 for label, ts in times.items()}
        print(f"({arguments.size}) {name:5s} " + "  ".join(
            f"{label} {ms:.2f} ms ({ms / medians['foreach']:.2f})"
            for label, ms in medians.items()), flush=True)


if __name__ == "__main__":
    main()
