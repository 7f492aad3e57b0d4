"""``torch.compile`` of a full training step, for every top-level alias and the main wrappers.

For each optimizer, on a 1M-parameter MLP (CPU, float32), the step is forward, backward
(``torch.func.grad``), ``update`` and ``apply_updates``. The table gives:

* ``breaks``: graph breaks that ``torch._dynamo.explain`` reports for ``update`` alone;
* ``default s`` / ``fullgraph s``: seconds of the first compiled call (compilation included)
  with ``torch.compile`` in default mode and with ``fullgraph=True`` (``fail`` if it raises);
* ``eager ms`` / ``compiled ms``: median step time, and their ratio;
* ``max diff``: the largest difference between compiled (default mode) and eager params after
  the timed steps, relative to the largest parameter change.

Run ``python benchmarks/bench_compile.py --threads 1`` for the full table (tens of minutes on a
busy 2-core machine), or ``--optimizers adam,chain`` for some rows.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import _checkout  # noqa: F401  (before optax_compat: see its docstring)
import torch

import optax_compat
from optax_compat._runtime.compilation import compile_options

ALIASES = [
    "adabelief", "adadelta", "adafactor", "adagrad", "adam", "adamax", "adamaxw", "adamw",
    "adan", "amsgrad", "fromage", "lamb", "lars", "lion", "nadam", "nadamw", "noisy_sgd",
    "novograd", "optimistic_adam", "optimistic_adam_v2", "optimistic_gradient_descent",
    "polyak_sgd", "radam", "rmsprop", "rprop", "sgd", "sign_sgd", "signum", "sm3", "yogi",
]
LEARNING_RATE = 1e-3


def wrappers() -> dict[str, Callable[[], Any]]:
    """The combinators and wrappers of the table, each around Adam(W)."""
    return {
        "chain": lambda: optax_compat.chain(optax_compat.clip_by_global_norm(1.0),
                                            optax_compat.adamw(LEARNING_RATE)),
        "masked": lambda: optax_compat.masked(optax_compat.adam(LEARNING_RATE),
                                              {"w1": True, "b1": False, "w2": True,
                                               "b2": False}),
        "inject_hyperparams": lambda: optax_compat.inject_hyperparams(optax_compat.adam)(
            learning_rate=optax_compat.cosine_decay_schedule(LEARNING_RATE, 100)),
        "MultiSteps": lambda: optax_compat.MultiSteps(optax_compat.adam(LEARNING_RATE), 2),
        "apply_if_finite": lambda: optax_compat.apply_if_finite(
            optax_compat.adam(LEARNING_RATE), 3),
    }


def build(name: str) -> Any:
    if name in wrappers():
        return wrappers()[name]()
    if name == "polyak_sgd":
        return optax_compat.polyak_sgd(max_learning_rate=LEARNING_RATE)
    if name == "noisy_sgd":
        return optax_compat.noisy_sgd(LEARNING_RATE, key=0)
    return getattr(optax_compat, name)(LEARNING_RATE)


def mlp_params(seed: int = 0) -> dict[str, torch.Tensor]:
    """A 2-layer MLP with about one million parameters."""
    generator = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator) / shape[0] ** 0.5

    return {"w1": randn(1000, 960), "b1": randn(960), "w2": randn(960, 40), "b2": randn(40)}


def loss_fn(params: dict, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    hidden = torch.relu(inputs @ params["w1"] + params["b1"])
    return ((hidden @ params["w2"] + params["b2"] - targets) ** 2).mean()


def make_step(tx: Any, extra: dict[str, Any]) -> Callable[..., Any]:
    def step(params: dict, state: Any, inputs: torch.Tensor, targets: torch.Tensor) -> Any:
        grads = torch.func.grad(loss_fn)(params, inputs, targets)
        updates, state = tx.update(grads, state, params, **extra)
        return optax_compat.apply_updates(params, updates), state

    return step


def graph_breaks(tx: Any, params: dict, state: Any, extra: dict[str, Any]) -> int | str:
    grads = {k: torch.ones_like(v) for k, v in params.items()}

    def update(grads: Any, state: Any, params: Any) -> Any:
        return tx.update(grads, state, params, **extra)

    try:
        return torch._dynamo.explain(update)(grads, state, params).graph_break_count
    except Exception as error:  # Dynamo raises many types
        return f"error: {type(error).__name__}"
    finally:
        torch._dynamo.reset()


def timed(step: Callable[..., Any], params: dict, state: Any, data: tuple,
          repeats: int) -> tuple[float, list[float], dict]:
    start = time.perf_counter()
    params, state = step(params, state, *data)
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        params, state = step(params, state, *data)
        times.append(time.perf_counter() - start)
    return first, times, params


def row(name: str, repeats: int) -> str:
    tx = build(name)
    extra = {"value": torch.tensor(1.0)} if name == "polyak_sgd" else {}
    params = mlp_params()
    generator = torch.Generator().manual_seed(1)
    data = (torch.randn(64, 1000, generator=generator), torch.randn(64, 40, generator=generator))
    breaks = graph_breaks(tx, params, tx.init(params), extra)
    step = make_step(tx, extra)
    _, eager_times, eager_params = timed(step, mlp_params(), tx.init(params), data, repeats)
    cells = []
    compiled_params: dict = {}
    compiled_times: list[float] = []
    for fullgraph in (False, True):
        torch._dynamo.reset()
        compiled = torch.compile(make_step(tx, extra), fullgraph=fullgraph,
                                 options=compile_options())
        try:
            first, times, final = timed(compiled, mlp_params(), tx.init(params), data, repeats)
            cells.append(f"{first:>10.1f}")
            if not fullgraph:
                compiled_params, compiled_times = final, times
        except Exception as error:  # Dynamo and Inductor raise many types
            cells.append(f"{'fail':>10}")
            print(f"  {name} fullgraph={fullgraph}: {type(error).__name__}: "
                  f"{str(error).strip().splitlines()[0][:120] if str(error).strip() else ''}")
    torch._dynamo.reset()
    eager_ms = statistics.median(eager_times) * 1e3
    if compiled_times:
        compiled_ms = statistics.median(compiled_times) * 1e3
        change = max(float((eager_params[k] - p).abs().max()) for k, p in mlp_params().items())
        diff = max(float((compiled_params[k] - eager_params[k]).abs().max())
                   for k in eager_params) / max(change, 1e-30)
        tail = f"{compiled_ms:>12.1f}{compiled_ms / eager_ms:>8.2f}{diff:>10.1e}"
    else:
        tail = f"{'-':>12}{'-':>8}{'-':>10}"
    return f"{name:<28}{breaks!s:>7}{cells[0]}{cells[1]}{eager_ms:>10.1f}{tail}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optimizers", default=",".join([*ALIASES, *wrappers()]),
                        help="comma-separated alias or wrapper names")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps (median)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads (default: leave PyTorch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU, float32, "
          f"1M-parameter MLP, median of {args.repeats} steps")
    header = (f"{'optimizer':<28}{'breaks':>7}{'default s':>10}{'fullgraph s':>10}"
              f"{'eager ms':>10}{'compiled ms':>12}{'ratio':>8}{'max diff':>10}")
    print(header)
    print("-" * len(header))
    for name in args.optimizers.split(","):
        print(row(name, args.repeats), flush=True)


if __name__ == "__main__":
    main()
