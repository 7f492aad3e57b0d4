"""Optimizer memory as composable transformations (ours, not Optax names).

Most of an optimizer's memory is its state: Adam keeps 8 bytes per float32 parameter. Here the
ways PyTorch users save it (bitsandbytes' and torchao's 8-bit and 4-bit optimizers, bf16 states
with stochastic rounding, Kahan-compensated bf16 parameters) are wrappers and transformations
that compose with any chain, instead of flags of one library's classes:

* :func:`quantize_state` stores the large float leaves of any transformation's state block-wise
  quantized to 8 or 4 bits (Dettmers et al., 2022; Li et al., 2023);
* :func:`cast_state` stores them in bfloat16 or float16, rounding stochastically;
* :func:`kahan_summation`, last in a chain, and :func:`apply_updates` with
  ``rounding="stochastic"``: low-precision parameters that follow float32 training.

The random bits come from counters (a key, a step count, an element's position): no generator,
no host reads, the same numbers eagerly and compiled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import optree
import torch

from optax_compat._runtime import counter_random, quantization
from optax_compat._runtime import state as bb_state
from optax_compat._runtime import tree_math as tm
from optax_compat._runtime.capabilities import declare
from optax_compat._runtime.flat_safe import FLAT, LAYOUTS, STACKED, elementwise, why_not
from optax_compat._src import base, update

__all__ = [
    "Cast",
    "CastState",
    "KahanSummationState",
    "QuantizedState",
    "apply_updates",
    "cast_state",
    "kahan_summation",
    "quantize_state",
]


class QuantizedState(NamedTuple):
    """The wrapped transformation's state, its large float leaves block-wise quantized
    (each a :class:`~optax_compat._runtime.quantization.Quantized` of codes, scales and an
    empty tensor recording shape and dtype)."""

    inner: base.OptState


class CastState(NamedTuple):
    """The wrapped transformation's state, each float leaf a :class:`Cast`; the steps taken and
    the key of the rounding's random bits."""

    inner: base.OptState
    count: torch.Tensor
    key: torch.Tensor


class Cast(NamedTuple):
    """A state leaf stored by :func:`cast_state`: its values in the storage dtype, and an empty
    tensor of the dtype the wrapped transformation computes it in."""

    values: torch.Tensor
    original: torch.Tensor


class KahanSummationState(NamedTuple):
    """Each parameter's compensation: what rounding to its dtype has lost so far."""

    compensation: base.Updates


def _stored(state: Any, store: Callable[[torch.Tensor, int], Any],
            chosen: Callable[[torch.Tensor], bool]) -> Any:
    """``state`` with each chosen leaf ``x`` (the ``i``-th tensor leaf) replaced by
    ``store(x, i)``."""
    leaves, spec = tm.flatten(state)
    return tm.unflatten(spec, [store(x, i) if isinstance(x, torch.Tensor) and chosen(x) else x
                               for i, x in enumerate(leaves)])


def _restored(state: Any, kind: type, restore: Callable[[Any], torch.Tensor]) -> Any:
    """``state`` with each node of type ``kind`` replaced by ``restore(node)``."""
    return optree.tree_map(lambda x: restore(x) if isinstance(x, kind) else x, state,
                           is_leaf=lambda x: isinstance(x, kind),
                           none_is_leaf=tm.NONE_IS_LEAF, namespace=tm.NAMESPACE)


def _large_float(min_size: int) -> Callable[[torch.Tensor], bool]:
    return lambda x: x.is_floating_point() and x.dim() > 0 and x.numel() >= min_size


def _per_leaf_layouts(tx: Any, what: str) -> dict[str, str | None]:
    """Layouts for a wrapper that works leaf by leaf around ``tx``: stacks if ``tx`` allows
    them; never flat buffers."""
    return {FLAT: what, STACKED: why_not(tx, STACKED)}


def quantize_state(tx: base.GradientTransformation, *, bits: int = 8,
                   block_size: int | None = None, min_size: int = 4096
                   ) -> base.GradientTransformationExtraArgs:
    """Stores ``tx``'s large float state leaves block-wise quantized.

    Each float leaf of at least ``min_size`` elements (Adam's moments, a momentum) is cut into
    blocks of ``block_size`` elements, each divided by its largest magnitude (kept in float32)
    and stored as codes of a dynamic quantization (Dettmers et al., *8-bit Optimizers via
    Block-wise Quantization*, ICLR 2022; at 4 bits, Li et al., *Memory Efficient Optimizers
    with 4-bit States*, NeurIPS 2023): a signed code for blocks with negative values, an
    unsigned code without zero for non-negative ones (second moments). Each ``update``
    dequantizes, runs ``tx.update`` and quantizes the new state. Integer, scalar and small
    leaves stay as they are. At the default sizes the state takes 1.016 bytes per element at 8
    bits and 0.531 at 4 (float32: 4).

    Args:
      tx: any transformation (a chain, ``inject_hyperparams(...)``, ``MultiSteps(...)``, ...).
      bits: 8 or 4.
      block_size: elements per scale (default 256 at 8 bits, 128 at 4; even at 4 bits).
      min_size: the fewest elements a leaf must have to be quantized.

    Returns:
      A transformation with :class:`QuantizedState`. On packed buffers it runs leaf by leaf
      (``fused_step``'s stacked layout), where ``tx`` allows that: its blocks must not straddle
      two leaves.

    Raises:
      ValueError: for another bit width, a block size below 2 (odd at 4 bits), or a negative
        ``min_size``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> from optax_compat import memory
      >>> tx = memory.quantize_state(optax.adam(1e-3), min_size=1)
      >>> params = {"w": torch.ones(1000)}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.full((1000,), 0.5)}, state, params)
      >>> state.inner[0].mu["w"].codes.dtype, state.inner[0].mu["w"].codes.shape
      (torch.uint8, torch.Size([1024]))
    """
    if bits not in quantization.BITS:
        raise ValueError(f"quantize_state: bits must be one of {quantization.BITS}, got {bits}.")
    block_size = block_size or quantization.DEFAULT_BLOCK_SIZE[bits]
    if block_size < 2 or (bits == 4 and block_size % 2):
        raise ValueError(f"quantize_state: block_size must be at least 2 (and even at 4 bits), "
                         f"got {block_size}.")
    if min_size < 0:
        raise ValueError(f"quantize_state: min_size must be non-negative, got {min_size}.")
    chosen = _large_float(min_size)

    def store(x: torch.Tensor, index: int) -> quantization.Quantized:
        del index
        return quantization.quantize(x, bits, block_size)

    def restore(stored: quantization.Quantized) -> torch.Tensor:
        return quantization.dequantize(stored, bits, block_size)

    def init_fn(params: base.Params) -> QuantizedState:
        return QuantizedState(_stored(tx.init(params), store, chosen))

    def update_fn(updates: base.Updates, state: QuantizedState, params: base.Params = None,
                  **extra_args: Any) -> tuple[base.Updates, QuantizedState]:
        inner = _restored(state.inner, quantization.Quantized, restore)
        new_updates, new_inner = tx.update(updates, inner, params, **extra_args)
        return new_updates, QuantizedState(_stored(new_inner, store, chosen))

    declare(update_fn, layouts=_per_leaf_layouts(
        tx, "quantize_state quantizes each state leaf in blocks of its own"))
    return base.GradientTransformationExtraArgs(init_fn, update_fn)


def cast_state(tx: base.GradientTransformation, dtype: torch.dtype, *,
               stochastic_rounding: bool = True, key: int = 0
               ) -> base.GradientTransformationExtraArgs:
    """Stores ``tx``'s float state leaves in ``dtype`` (bfloat16, float16).

    Each ``update`` widens the stored leaves back to the dtype ``tx`` made them in, runs
    ``tx.update`` and stores the new state in ``dtype``: rounded stochastically (up or down,
    with the probabilities that make the stored value unbiased; Gupta et al., *Deep Learning
    with Limited Numerical Precision*, ICML 2015), or to nearest. Integer and scalar leaves
    (counts, injected hyper-parameters) stay as they are.

    Args:
      tx: any transformation.
      dtype: the floating dtype to store in.
      stochastic_rounding: round stochastically, from counter-based random bits (``key``, the
        step, the leaf, the element); else to nearest.
      key: the seed of the random bits.

    Returns:
      A transformation with :class:`CastState`. With ``stochastic_rounding=False`` it runs on
      packed buffers where ``tx`` does; rounding stochastically, its random bits follow each
      element's place in its leaf, which a packed buffer moves, so it runs unfused.

    Raises:
      ValueError: if ``dtype`` is not a floating dtype.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> from optax_compat import memory
      >>> tx = memory.cast_state(optax.adam(1e-3), torch.bfloat16)
      >>> state = tx.init({"w": torch.ones(3)})
      >>> values, original = state.inner[0].mu["w"]
      >>> values.dtype, original.dtype
      (torch.bfloat16, torch.float32)
    """
    if not dtype.is_floating_point:
        raise ValueError(f"cast_state: dtype must be a floating dtype, got {dtype}.")
    chosen = _large_float(1)

    def store_nearest(x: torch.Tensor, index: int) -> Cast:
        del index
        return Cast(x.to(dtype), x.new_empty((0,)))

    def init_fn(params: base.Params) -> CastState:
        device = bb_state.device_of(params)
        return CastState(_stored(tx.init(params), store_nearest, chosen),
                         torch.zeros([], dtype=torch.int32, device=device),
                         torch.tensor(key, dtype=torch.int64, device=device))

    def update_fn(updates: base.Updates, state: CastState, params: base.Params = None,
                  **extra_args: Any) -> tuple[base.Updates, CastState]:
        inner = _restored(state.inner, Cast, lambda cast: cast.values.to(cast.original.dtype))
        new_updates, new_inner = tx.update(updates, inner, params, **extra_args)
        count = state.count + 1

        def store(x: torch.Tensor, index: int) -> Cast:
            if not stochastic_rounding or x.dtype == dtype:
                return store_nearest(x, index)
            def rounded(local: torch.Tensor, first: int) -> torch.Tensor:
                uniform = counter_random.uniform_like(state.key, count, index, local, first)
                return quantization.stochastic_round(local, dtype, uniform)

            return Cast(quantization.on_local_shard(x, rounded), x.new_empty((0,)))

        return new_updates, CastState(_stored(new_inner, store, chosen), count, state.key)

    if not stochastic_rounding:
        declare(update_fn, layouts={layout: why_not(tx, layout) for layout in LAYOUTS})
    return base.GradientTransformationExtraArgs(init_fn, update_fn)


def kahan_summation() -> base.GradientTransformation:
    """Compensated summation for low-precision parameters, last in a chain.

    A bfloat16 parameter cannot take an update smaller than half its spacing: ``p + u`` rounds
    back to ``p``, and training stalls. This transformation adds to each update what rounding
    lost before (Kahan, *Further remarks on reducing truncation errors*, 1965), returns the
    update that :func:`optax_compat.apply_updates` applies exactly, and keeps what that loses,
    in the parameter's dtype (2 bytes per bfloat16 parameter).

    Returns:
      A transformation with :class:`KahanSummationState`; its ``update`` needs ``params``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> from optax_compat import memory
      >>> params = {"w": torch.ones(2, dtype=torch.bfloat16)}
      >>> tx = optax.chain(optax.sgd(1e-3), memory.kahan_summation())
      >>> state = tx.init(params)
      >>> for _ in range(100):
      ...     updates, state = tx.update({"w": torch.ones(2)}, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params["w"]  # 1 - 100 * 1e-3; without compensation each step rounds back to 1
      tensor([0.8984, 0.8984], dtype=torch.bfloat16)
    """

    def init_fn(params: base.Params) -> KahanSummationState:
        return KahanSummationState(tm.tree_map(torch.zeros_like, params))

    @elementwise
    def update_fn(updates: base.Updates, state: KahanSummationState,
                  params: base.Params = None) -> tuple[base.Updates, KahanSummationState]:
        if params is None:
            raise ValueError("kahan_summation: update needs the params.")
        us, spec = tm.flatten(updates)
        ps = tm.leaves_like(params, spec, "params", reference=updates)
        cs = tm.leaves_like(state.compensation, spec, "state.compensation", reference=updates)
        applied, compensations = [], []
        for u, c, p in zip(us, cs, ps, strict=True):
            wide = torch.promote_types(torch.promote_types(u.dtype, p.dtype), torch.float32)
            wanted = u.to(wide) + c.to(wide)
            step = ((p.to(wide) + wanted).to(p.dtype).to(wide) - p.to(wide)).to(p.dtype)
            taken = (p + step).to(p.dtype).to(wide) - p.to(wide)
            applied.append(step)
            compensations.append((wanted - taken).to(c.dtype))
        return tm.unflatten(spec, applied), KahanSummationState(tm.unflatten(spec, compensations))

    return base.GradientTransformation(init_fn, update_fn)


def apply_updates(params: base.Params, updates: base.Updates, *, rounding: str = "nearest",
                  key: int | torch.Tensor | None = None) -> base.Params:
    """:func:`optax_compat.apply_updates`, rounding each sum to its parameter's dtype to
    nearest or stochastically (unbiased: a bfloat16 parameter then follows float32 training
    in expectation).

    Args:
      params: a tree of parameters.
      updates: a tree of updates like ``params``.
      rounding: ``"nearest"`` or ``"stochastic"``.
      key: with ``"stochastic"``, the seed of this step's random bits (an int or 0-d integer
        tensor); pass a new one each step, as with ``jax.random``.

    Returns:
      New parameters.

    Raises:
      ValueError: for another ``rounding``, or ``"stochastic"`` without a ``key``.

    Examples:
      >>> import torch
      >>> from optax_compat import memory
      >>> params = {"w": torch.ones(10000, dtype=torch.bfloat16)}
      >>> new = memory.apply_updates(params, {"w": torch.full((10000,), 1e-3)},
      ...                            rounding="stochastic", key=0)
      >>> round(new["w"].double().mean().item(), 3)  # nearest rounding would give 1.0
      1.001
    """
    if rounding not in ("nearest", "stochastic"):
        raise ValueError(f"apply_updates: rounding must be 'nearest' or 'stochastic', got "
                         f"{rounding!r}.")
    if rounding == "nearest":
        return update.apply_updates(params, updates)
    if key is None:
        raise ValueError("apply_updates: rounding='stochastic' needs a key.")
    ps, spec = tm.flatten(params)
    us = tm.leaves_like(updates, spec, "updates", reference=params)
    device = bb_state.device_of(params)
    key = torch.as_tensor(key, dtype=torch.int64, device=device)
    count = torch.zeros([], dtype=torch.int64, device=device)
    new = []
    for index, (p, u) in enumerate(zip(ps, us, strict=True)):
        if u is None:
            new.append(p)
            continue
        wide = torch.promote_types(torch.promote_types(u.dtype, p.dtype), torch.float32)
        total = p.to(wide) + u.to(wide)
        new.append(total.to(p.dtype) if wide == p.dtype else quantization.stochastic_round(
            total, p.dtype, counter_random.uniform_like(key, count, index, total)))
    return tm.unflatten(spec, new)
