"""Times one step of the optimizers beyond the core: ``optax.contrib`` aliases and L-BFGS.

Run: ``python benchmarks/bench_contrib.py --threads 1 --sizes a,b`` (``--scale 0.1`` for a
quick run). Each row is the median time of one ``update`` + ``apply_updates`` step, pure path,
as a ratio to ``torch.optim.Adam(foreach=True)`` on the same tensors in the same process, next
to Optax's jitted step of the same optimizer when JAX is installed. Models as in
``bench_step.py``: (a) 4M parameters in 100 tensors, (b) 1M in 1,000.

Optimizers that need extra ``update`` arguments get them: ``momo`` the loss value, L-BFGS runs
without a line search (``linesearch=None``), whose data-dependent loop would time the objective.

XLA takes minutes and several GB to compile Optax's ``momo`` and ``lbfgs`` over the 1,000
tensors of model (b) (more than 5 minutes and 8 GB for ``lbfgs``); ``--without-optax momo,lbfgs``
leaves that column out.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import _checkout  # noqa: F401  (before optax_compat: see its docstring)
from _results import write_markdown
from bench_step import (
    LEARNING_RATE,
    SIZES,
    Setup,
    add_step_options,
    jitted_step,
    median_times,
    parse_step_options,
    pure_step,
    shapes_for,
    torch_optim,
)

import optax_compat

# name -> (factory taking the optax-like module, extra update arguments)
OPTIMIZERS: dict[str, tuple[Callable[[Any], Any], dict[str, float]]] = {
    "acprop": (lambda o: o.contrib.acprop(LEARNING_RATE), {}),
    "ademamix": (lambda o: o.contrib.ademamix(LEARNING_RATE), {}),
    "adopt": (lambda o: o.contrib.adopt(LEARNING_RATE), {}),
    "cocob": (lambda o: o.contrib.cocob(), {}),
    "dadapt_adamw": (lambda o: o.contrib.dadapt_adamw(), {}),
    "dog": (lambda o: o.contrib.dog(), {}),
    "madgrad": (lambda o: o.contrib.madgrad(LEARNING_RATE), {}),
    "momo": (lambda o: o.contrib.momo(), {"value": 1.0}),
    "prodigy": (lambda o: o.contrib.prodigy(), {}),
    "schedule_free_adamw": (lambda o: o.contrib.schedule_free_adamw(LEARNING_RATE), {}),
    "muon": (lambda o: o.contrib.muon(LEARNING_RATE), {}),
    "lbfgs": (lambda o: o.lbfgs(LEARNING_RATE, linesearch=None), {}),
}


def ours(name: str) -> Setup:
    factory, extra = OPTIMIZERS[name]
    return lambda shapes: pure_step(factory(optax_compat), shapes, extra)


def optax_jit(name: str) -> Setup | None:
    try:
        import optax
    except ImportError:
        return None
    factory, extra = OPTIMIZERS[name]
    return lambda shapes: jitted_step(factory(optax), shapes, extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_step_options(parser, sizes="a,b", optimizers=list(OPTIMIZERS), repeats=10, warmup=3)
    parser.add_argument("--without-optax", default="",
                        help="comma-separated optimizers whose Optax column is skipped")
    args = parse_step_options(parser)
    print(f"{'model':<6}{'optimizer':<22}{'adam foreach ms':>16}{'ours':>8}{'optax jit':>11}")
    rows: list[list[str]] = []
    for size in args.sizes.split(","):
        total, count = SIZES[size]
        shapes = shapes_for(int(total * args.scale), count)
        for name in args.optimizers.split(","):
            setups = {"adam": torch_optim("adam", "foreach"), "ours": ours(name),
                      "optax": None if name in args.without_optax.split(",") else optax_jit(name)}
            steps = {key: setup(shapes) for key, setup in setups.items() if setup is not None}
            times = median_times(steps, args.repeats, args.warmup)
            baseline = times["adam"]
            optax_ratio = f"{times['optax'] / baseline:>11.2f}" if "optax" in times else ""
            print(f"{size:<6}{name:<22}{baseline * 1e3:>16.2f}{times['ours'] / baseline:>8.2f}"
                  f"{optax_ratio}", flush=True)
            rows.append([size, name, f"{baseline * 1e3:.2f}", f"{times['ours'] / baseline:.2f}",
                         optax_ratio.strip() or "not run"])
    if args.markdown:
        write_markdown(args.markdown, ["model", "optimizer", "torch.optim.Adam foreach ms",
                                       "optax_compat (x Adam)", "Optax jit (x Adam)"], rows)

if __name__ == "__main__":
    main()
