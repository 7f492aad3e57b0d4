"""Optimizer memory: state bytes, fused step time and training quality of optax_compat.memory.

Three parts (``--parts``), each a table:

* ``bytes``: the state bytes per parameter of AdamW on one 10M-parameter tensor, scales
  included: float32, ``quantize_state`` at 8 and 4 bits, ``cast_state(bfloat16)``, and
  torchao's ``AdamW8bit``/``AdamW4bit`` and bitsandbytes' ``AdamW8bit`` when importable (their
  state after one step, every tensor they hold, quantization maps included).
* ``speed``: one step, milliseconds, the median of interleaved steps: ``fused_step`` of AdamW
  and of its 8-bit ``quantize_state``, the unfused 8-bit step (``TorchOptimizer``), and
  torchao's and bitsandbytes' 8-bit AdamW, at the sizes of ``bench_step.py``.
* ``quality``: a small causal language model (two pre-norm transformer layers, width 64,
  context 64, vocabulary 64, batch 16) trained for ``--steps`` steps of AdamW (warm-up, cosine
  decay) on text from a fixed random Markov chain (built here, no download), the held-out loss
  at the end for each seed: float32; 8-bit and 4-bit states; bfloat16 states; bfloat16
  parameters plain, with Kahan summation, and with stochastic rounding (the forward and
  backward pass in float32 from the bfloat16 values); torchao's and bitsandbytes' 8-bit
  AdamW and torchao's 4-bit on the same model and data.

``python benchmarks/bench_memory.py --threads 1 --markdown benchmarks/results/bench_memory.md``
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import _checkout  # noqa: F401  (before optax_compat: see its docstring)
import optree
import torch
from _results import add_markdown_option, write_markdown
from bench_step import (
    SIZES,
    keep_freed_memory,
    limit_threads,
    random_tensors,
    sample_times,
    shapes_for,
    use_device,
)

import optax_compat as optax
from optax_compat import memory

LEARNING_RATE, WEIGHT_DECAY = 3e-3, 0.01
VOCAB, WIDTH, CONTEXT, LAYERS, BATCH = 64, 64, 64, 2, 16
NONE = "\N{EN DASH}"  # a cell with nothing to measure


def _state_bytes(state: Any) -> int:
    """Bytes of every tensor in ``state``, inside tensor subclasses (torchao's) too."""
    total = 0
    for leaf in optree.tree_leaves(state):
        if not isinstance(leaf, torch.Tensor):
            continue
        if hasattr(leaf, "__tensor_flatten__") and type(leaf) is not torch.Tensor:
            names, _ = leaf.__tensor_flatten__()
            total += _state_bytes([getattr(leaf, name) for name in names])
        else:
            total += leaf.numel() * leaf.element_size()
    return total


def _external(name: str) -> Callable[[Any], torch.optim.Optimizer] | None:
    """torchao's or bitsandbytes' optimizer class ``name``, or ``None`` (printing why)."""
    module, cls = name.rsplit(".", 1)
    try:
        owner = __import__(module, fromlist=[cls])
        return lambda params: getattr(owner, cls)(params, lr=LEARNING_RATE,
                                                  weight_decay=WEIGHT_DECAY)
    except Exception as error:  # not installed, or not on this CPU: reported, not fatal
        print(f"{name}: {type(error).__name__}: {error}")
        return None


EXTERNAL = {"torchao AdamW8bit": "torchao.optim.AdamW8bit",
            "torchao AdamW4bit": "torchao.optim.AdamW4bit",
            "bitsandbytes AdamW8bit": "bitsandbytes.optim.AdamW8bit"}


def _ours(kind: str) -> optax.GradientTransformation:
    adamw = optax.adamw(LEARNING_RATE, weight_decay=WEIGHT_DECAY)
    return {"float32": lambda: adamw,
            "8-bit": lambda: memory.quantize_state(adamw),
            "4-bit": lambda: memory.quantize_state(adamw, bits=4),
            "bf16 states": lambda: memory.cast_state(adamw, torch.bfloat16)}[kind]()


def bytes_part() -> tuple[list[str], list[list[str]]]:
    count = 10 * 2 ** 20  # a whole number of blocks: torchao keeps float32 states otherwise
    rows = []
    for kind in ("float32", "8-bit", "4-bit", "bf16 states"):
        state = _ours(kind).init({"w": torch.zeros(count)})
        rows.append([f"optax_compat {kind}", f"{_state_bytes(state) / count:.3f}"])
    for label, name in EXTERNAL.items():
        make = _external(name)
        if make is None:
            rows.append([label, NONE])
            continue
        param = torch.nn.Parameter(torch.zeros(count))
        optimizer = make([param])
        param.grad = torch.ones(count)
        optimizer.step()
        rows.append([label, f"{_state_bytes(dict(optimizer.state[param])) / count:.3f}"])
    return ["AdamW state", "bytes per parameter"], rows


class _Fused:
    def __init__(self, tx: optax.GradientTransformation, shapes: list[tuple[int, int]]) -> None:
        self.step = optax.fused_step(tx, random_tensors(shapes, 0))
        for view, grad in zip(self.step.grads, random_tensors(shapes, 1), strict=True):
            view.copy_(grad)

    def __call__(self) -> None:
        self.step(self.step.grads)


def _torch_step(make: Callable[[Any], torch.optim.Optimizer],
                shapes: list[tuple[int, int]]) -> Callable[[], None]:
    params = [torch.nn.Parameter(t) for t in random_tensors(shapes, 0)]
    for param, grad in zip(params, random_tensors(shapes, 1), strict=True):
        param.grad = grad
    optimizer = make(params)
    return optimizer.step


SPEED_LABELS = ("fused float32", "fused 8-bit", "TorchOptimizer 8-bit", *EXTERNAL)


def speed_part(sizes: list[str], repeats: int, labels: list[str]
               ) -> tuple[list[str], list[list[str]]]:
    """The step times of ``labels`` (among :data:`SPEED_LABELS`; the two fused ones always)."""
    labels = [label for label in SPEED_LABELS
              if label in labels or label in ("fused float32", "fused 8-bit")]
    rows = []
    for size in sizes:
        shapes = shapes_for(*SIZES[size])
        steps: dict[str, Callable[[], None]] = {
            "fused float32": _Fused(_ours("float32"), shapes),
            "fused 8-bit": _Fused(_ours("8-bit"), shapes)}
        if "TorchOptimizer 8-bit" in labels:
            steps["TorchOptimizer 8-bit"] = _torch_step(
                lambda params: optax.TorchOptimizer(params, _ours("8-bit")), shapes)
        for label, name in EXTERNAL.items():
            make = _external(name) if label in labels else None
            if make is not None and "8bit" in name:
                steps[label] = _torch_step(make, shapes)
        for step in steps.values():
            step()  # compiles
        times = sample_times(steps, repeats, warmup=2)
        medians = {label: statistics.median(values) * 1e3 for label, values in times.items()}
        ratio = medians["fused 8-bit"] / medians["fused float32"]
        rows.append([size, *(f"{medians[label]:.3g}" if label in medians else NONE
                             for label in labels), f"{ratio:.2f}"])
        print(rows[-1], flush=True)
    return ["model", *labels, "fused 8-bit ÷ fused float32"], rows


# --- quality ---------------------------------------------------------------------------------


def _corpus(tokens: int, seed: int = 1234) -> torch.Tensor:
    """Text from a fixed random Markov chain: each token allows a few next tokens, with skewed
    probabilities (a bigram language a small model learns within a thousand steps)."""
    generator = torch.Generator().manual_seed(seed)
    cumulative = torch.softmax(torch.randn(VOCAB, VOCAB, generator=generator) * 3.0,
                               dim=-1).cumsum(-1)
    draws = torch.rand(tokens, generator=generator)
    text = torch.empty(tokens, dtype=torch.int64)
    text[0] = 0
    for i in range(1, tokens):
        text[i] = min(int(torch.searchsorted(cumulative[text[i - 1]], draws[i])), VOCAB - 1)
    return text


class TinyGPT(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.position = torch.nn.Parameter(torch.zeros(CONTEXT, WIDTH))
        layer = torch.nn.TransformerEncoderLayer(WIDTH, 4, 4 * WIDTH, dropout=0.0,
                                                 batch_first=True, norm_first=True)
        self.layers = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(
            CONTEXT), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[:tokens.shape[1]]
        x = self.layers(x, mask=self.mask[:tokens.shape[1], :tokens.shape[1]], is_causal=True)
        return self.head(self.norm(x))


def _batch(text: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    starts = torch.randint(text.numel() - CONTEXT - 1, (BATCH,), generator=generator)
    windows = torch.stack([text[s:s + CONTEXT + 1] for s in starts.tolist()])
    return windows[:, :-1], windows[:, 1:]


def _loss(model: TinyGPT, values: dict[str, torch.Tensor], x: torch.Tensor,
          y: torch.Tensor) -> torch.Tensor:
    logits = torch.func.functional_call(model, values, (x,))
    return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))


def _schedule(steps: int) -> optax.Schedule:
    return optax.warmup_cosine_decay_schedule(0.0, LEARNING_RATE, steps // 20, steps,
                                              LEARNING_RATE / 100)


CONFIGS = ("float32", "8-bit", "4-bit", "bf16 states", "bf16 params", "bf16 params + Kahan",
           "bf16 params + stochastic rounding", *EXTERNAL)


def train(config: str, seed: int, steps: int, train_text: torch.Tensor,
          test_batches: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[float, float]:
    """The held-out loss after ``steps`` steps, and the optimizer's mean step milliseconds."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = TinyGPT()
    generator = torch.Generator().manual_seed(seed)
    low = config.startswith("bf16 params")
    params = {name: p.detach().to(torch.bfloat16 if low else torch.float32)
              for name, p in model.named_parameters()}
    adamw = optax.adamw(_schedule(steps), weight_decay=WEIGHT_DECAY)
    external = EXTERNAL.get(config)
    if external:
        make = _external(external)
        if make is None:
            return math.nan, math.nan
        leaves = {name: torch.nn.Parameter(p) for name, p in params.items()}
        optimizer = make(list(leaves.values()))
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: float(_schedule(steps)(step)) / LEARNING_RATE)
    else:
        tx = {"8-bit": lambda: memory.quantize_state(adamw, min_size=4096),
              "4-bit": lambda: memory.quantize_state(adamw, bits=4, min_size=4096),
              "bf16 states": lambda: memory.cast_state(adamw, torch.bfloat16, key=seed),
              "bf16 params + Kahan": lambda: optax.chain(adamw, memory.kahan_summation()),
              }.get(config, lambda: adamw)()
        state = tx.init(params)
    optimizer_seconds = 0.0
    for step in range(steps):
        x, y = _batch(train_text, generator)
        if external:
            optimizer.zero_grad()
            _loss(model, leaves, x, y).backward()
            start = time.perf_counter()
            optimizer.step()
            scheduler.step()
            optimizer_seconds += time.perf_counter() - start
            continue
        wide = {name: p.float().requires_grad_() for name, p in params.items()}
        grads = dict(zip(wide, torch.autograd.grad(_loss(model, wide, x, y),
                                                   list(wide.values())), strict=True))
        start = time.perf_counter()
        updates, state = tx.update(grads, state, params)
        if config == "bf16 params + stochastic rounding":
            params = memory.apply_updates(params, updates, rounding="stochastic",
                                          key=seed * 1_000_003 + step)
        else:
            params = optax.apply_updates(params, updates)
        optimizer_seconds += time.perf_counter() - start
    values = leaves if external else {name: p.float() for name, p in params.items()}
    with torch.no_grad():
        test = statistics.fmean(_loss(model, values, x, y).item() for x, y in test_batches)
    return test, optimizer_seconds / steps * 1e3


def quality_part(steps: int, seeds: list[int]) -> tuple[list[str], list[list[str]]]:
    text = _corpus(300_000)
    train_text, test_text = text[:250_000], text[250_000:]
    generator = torch.Generator().manual_seed(99)
    test_batches = [_batch(test_text, generator) for _ in range(20)]
    results = {}
    for config in CONFIGS:
        runs = [train(config, seed, steps, train_text, test_batches) for seed in seeds]
        results[config] = runs
        print(config, runs, flush=True)
    base = statistics.fmean(loss for loss, _ in results["float32"])
    rows = []
    for config, runs in results.items():
        losses = [loss for loss, _ in runs]
        if any(math.isnan(loss) for loss in losses):
            rows.append([config, NONE, NONE, NONE, NONE])
            continue
        mean = statistics.fmean(losses)
        rows.append([config, f"{mean:.4f}", f"{min(losses):.4f} to {max(losses):.4f}",
                     f"{(mean / base - 1) * 100:+.2f}%",
                     f"{statistics.fmean(ms for _, ms in runs):.2f}"])
    return ["configuration", f"held-out loss, mean of {len(seeds)} seeds", "min to max",
            "vs float32", "optimizer ms/step"], rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="bytes,speed,quality")
    parser.add_argument("--sizes", default="a,c")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--steps", type=int, default=1000, help="training steps (quality)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--first-cpu", type=int, default=0)
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="keep freed memory in the process (see bench_step.keep_freed_memory)")
    parser.add_argument("--device", default="cpu",
                        help="where the speed part's tensors live and its steps run")
    parser.add_argument("--speed-implementations", default=",".join(SPEED_LABELS),
                        help="the speed part's columns, comma-separated among "
                             f"{', '.join(SPEED_LABELS)} (the two fused ones always)")
    add_markdown_option(parser)
    args = parser.parse_args()
    if args.threads:
        limit_threads(args.threads, args.first_cpu)
    if args.keep_freed_memory:
        keep_freed_memory()
    use_device(args.device)
    tables = []
    parts = args.parts.split(",")
    if "bytes" in parts:
        tables.append(("State bytes per parameter, AdamW, one tensor of 10M parameters.",
                       *bytes_part()))
    if "speed" in parts:
        tables.append(("One step, ms, median of interleaved steps (float32 parameters).",
                       *speed_part(args.sizes.split(","), args.repeats,
                                   args.speed_implementations.split(","))))
    if "quality" in parts:
        tables.append((f"Held-out loss after {args.steps} steps of AdamW on the small causal "
                       "language model.", *quality_part(args.steps,
                                                        [int(s) for s in args.seeds.split(",")])))
    for paragraph, columns, rows in tables:
        print(f"\n{paragraph}\n{' | '.join(columns)}")
        for row in rows:
            print(" | ".join(row))
    if args.markdown and tables:
        (_, columns, rows), more = tables[0], tables[1:]
        write_markdown(args.markdown, columns, rows, more)


if __name__ == "__main__":
    main()
