"""Times ``optax_compat.fused_step`` against torch.optim, Optax jit and the streaming limit.

Run e.g. ``python benchmarks/bench_fused.py --threads 1 --sizes a,c --repeats 10``.

For each optimizer and size (the shapes of ``bench_step.py``; (d) is 1M parameters in 10,000
tensors), in one process, CPU, float32:

* ``fused (grad views)``: ``step(step.grads)``, the gradients already in the flat buffer;
* ``fused (grad copy)``: ``step(grads)`` with separate gradient tensors (one
  ``_foreach_copy_`` per buffer first);
* ``inplace``: the existing in-place path of ``bench_step.py`` where it has one;
* ``torch.optim foreach`` / ``fused`` (Lion and AdaBelief, which torch.optim lacks, and the
  clipped AdamW chain are compared with ``torch.optim.Adam``/``AdamW``, as yardsticks);
* ``optax jit``: ``jax.jit`` of update + apply_updates;
* ``streaming limit``: the bytes the step must move (read params, grads and state, write
  params and state; one more read of the grads for a global norm) divided by the streaming
  bandwidth measured in the same rounds (``a.add_(b)`` of the same size, which moves what it
  counts; see ``bench_step.streaming_step``).

The compile seconds of the first fused step are printed too: run the script twice with the
same fresh ``TORCHINDUCTOR_CACHE_DIR`` to see a cold and a warm (cached) compile. With
``--memory``, the bytes allocated (by the profiler's count) during one fused step are printed:
they must not grow with the parameters.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any


def _single_threaded_xla() -> None:
    """Keeps XLA's CPU client on one thread, as torch is with ``--threads 1`` (read by JAX at
    its first use, so set before it is imported)."""
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_cpu_multi_thread_eigen=false"
                               + " intra_op_parallelism_threads=1").strip()


if "--threads" in sys.argv and sys.argv[sys.argv.index("--threads") + 1] == "1":
    _single_threaded_xla()

import _checkout  # noqa: E402, F401  (before optax_compat: see its docstring)
import torch  # noqa: E402
from _results import add_markdown_option, write_markdown  # noqa: E402
from bench_step import (  # noqa: E402
    LEARNING_RATE,
    MOMENTUM,
    STREAMING_BYTES_PER_ELEMENT,
    WEIGHT_DECAY,
    jitted_step,
    limit_threads,
    median_times,
    ours_inplace,
    random_tensors,
    shapes_for,
    streaming_step,
)

import optax_compat  # noqa: E402

SIZES = {"a": (4_000_000, 100), "b": (1_000_000, 1000), "c": (32_000_000, 200),
         "d": (1_000_000, 10_000)}

# name -> (factory over the module ``optax`` or ``optax_compat``, bytes moved per float32
# parameter, torch.optim yardstick (class, keyword arguments))
OPTIMIZERS: dict[str, tuple[Callable[[Any], Any], int, tuple[type, dict]]] = {
    "sgd": (lambda o: o.sgd(LEARNING_RATE, momentum=MOMENTUM), 20,
            (torch.optim.SGD, {"momentum": MOMENTUM})),
    "adam": (lambda o: o.adam(LEARNING_RATE), 28, (torch.optim.Adam, {})),
    "adamw": (lambda o: o.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY), 28,
              (torch.optim.AdamW, {"weight_decay": WEIGHT_DECAY})),
    "lion": (lambda o: o.lion(LEARNING_RATE), 20, (torch.optim.Adam, {})),
    "adabelief": (lambda o: o.adabelief(LEARNING_RATE), 28, (torch.optim.Adam, {})),
    "clip_adamw": (lambda o: o.chain(o.clip_by_global_norm(1.0),
                                     o.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY)), 32,
                   (torch.optim.AdamW, {"weight_decay": WEIGHT_DECAY})),
}

Step = Callable[[], None]


def fused(name: str, shapes: list[tuple[int, int]], views: bool, backend: str
          ) -> tuple[Step, Any]:
    params, grads = random_tensors(shapes, 0), random_tensors(shapes, 1)
    step = optax_compat.fused_step(OPTIMIZERS[name][0](optax_compat), params, backend=backend)
    if views:
        torch._foreach_copy_(step.grads, grads)
        grads = step.grads
    return (lambda: step(grads)), step


def torch_optim(name: str, shapes: list[tuple[int, int]], implementation: str) -> Step:
    cls, kwargs = OPTIMIZERS[name][2]
    params = [p.requires_grad_() for p in random_tensors(shapes, 0)]
    for param, grad in zip(params, random_tensors(shapes, 1), strict=True):
        param.grad = grad
    return cls(params, lr=LEARNING_RATE, **kwargs, **{implementation: True}).step


def optax_jit(name: str, shapes: list[tuple[int, int]]) -> Step:
    import optax

    return jitted_step(OPTIMIZERS[name][0](optax), shapes)


def step_allocated_bytes(step: Step) -> int:
    """The bytes allocated during one call of ``step``: the profiler's net allocation of each
    operation, summed over the operations that allocate."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                profile_memory=True) as profile:
        step()
    return sum(max(event.self_cpu_memory_usage, 0) for event in profile.events())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="a,c", help="comma-separated among a, b, c, d")
    parser.add_argument("--optimizers", default=",".join(OPTIMIZERS),
                        help=f"comma-separated among {', '.join(OPTIMIZERS)}")
    parser.add_argument("--repeats", type=int, default=10, help="timed steps (median)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads, and as many CPUs pinned (limit_threads)")
    parser.add_argument("--backend", default="inductor", help="torch.compile backend")
    parser.add_argument("--no-optax", action="store_true", help="skip Optax jit")
    parser.add_argument("--memory", action="store_true",
                        help="print the bytes allocated during one fused step")
    add_markdown_option(parser)
    args = parser.parse_args()
    if args.threads:
        limit_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, CPU, "
          f"backend {args.backend}, Inductor cache {os.environ.get('TORCHINDUCTOR_CACHE_DIR')}"
          f"; median of {args.repeats} alternated steps after {args.warmup} warm-up rounds")
    header = (f"{'size':<5}{'optimizer':<11}{'implementation':<20}{'ms':>9}{'x foreach':>10}"
              f"{'x optax':>9}{'x limit':>9}")
    print(header)
    print("-" * len(header))
    rows: list[list[str]] = []
    for size in args.sizes.split(","):
        total, count = SIZES[size]
        shapes = shapes_for(total, count)
        numel = sum(rows * cols for rows, cols in shapes)
        for name in args.optimizers.split(","):
            steps: dict[str, Step] = {}
            start = time.perf_counter()
            steps["fused (grad views)"], fused_step = fused(name, shapes, True, args.backend)
            steps["fused (grad views)"]()
            first = time.perf_counter() - start
            steps["fused (grad copy)"], _ = fused(name, shapes, False, args.backend)
            inplace = ours_inplace(name) if name in ("sgd", "adam", "adamw", "lion") else None
            if inplace is not None:
                steps["inplace"] = inplace(shapes)
            for implementation in ("foreach", "fused"):
                steps[f"torch.optim {implementation}"] = torch_optim(name, shapes,
                                                                     implementation)
            if not args.no_optax:
                steps["optax jit"] = optax_jit(name, shapes)
            steps["stream"] = streaming_step(numel)
            medians = median_times(steps, args.repeats, args.warmup)
            medians["streaming limit"] = (OPTIMIZERS[name][1] / STREAMING_BYTES_PER_ELEMENT
                                          * medians.pop("stream"))
            for label, seconds in medians.items():
                ratios = [f"{seconds / medians[base]:>{width}.2f}" if base in medians else
                          f"{'':>{width}}"
                          for base, width in (("torch.optim foreach", 10), ("optax jit", 9),
                                              ("streaming limit", 9))]
                print(f"{size:<5}{name:<11}{label:<20}{seconds * 1e3:>9.2f}{''.join(ratios)}",
                      flush=True)
                rows.append([size, name, label, f"{seconds * 1e3:.2f}",
                             *(ratio.strip() for ratio in ratios)])
            memory = (f", bytes allocated in a step "
                      f"{step_allocated_bytes(steps['fused (grad views)'])}" if args.memory else "")
            print(f"{size:<5}{name:<11}compile {fused_step.compile_seconds:.1f} s (first step "
                  f"with setup {first:.1f} s){memory}", flush=True)
            rows.append([size, name, f"compile {fused_step.compile_seconds:.1f} s{memory}",
                         "", "", "", ""])
            steps.clear()
    if args.markdown:
        write_markdown(args.markdown, ["model", "optimizer", "implementation", "ms",
                                       "x torch.optim foreach", "x optax jit",
                                       "x streaming limit"], rows)


if __name__ == "__main__":
    main()
