"""Storing state leaves in fewer bits: block-wise dynamic quantization and stochastic rounding.

Block-wise quantization (Dettmers et al., *8-bit Optimizers via Block-wise Quantization*, ICLR
2022; Li et al., *Memory Efficient Optimizers with 4-bit States*, NeurIPS 2023): a leaf is cut
into blocks of ``block_size`` elements; each block is divided by its largest magnitude (its
scale, kept in float32) and each element stored as the index of the nearest value of a code.

The codes are *dynamic*: a value is ``10 ** -e * f`` with ``e`` counted by leading bits and the
remaining bits spread ``f`` linearly over ``[0.1, 1)``, so that small values (most of a block,
after division by its largest) keep relative precision. A block whose elements are all
non-negative (a second moment) uses the unsigned code, one more bit of magnitude and no zero
(Li et al.: rounding a second moment to zero makes the update explode); the others use the
signed code, which has zero. The scale's sign says which: negative for the unsigned code.

Stochastic rounding (:func:`stochastic_round`) rounds to one of the two neighbours in the
target dtype with the probabilities that make it unbiased, from uniform numbers the caller
gives (counter-based, :func:`~optax_compat._runtime.counter_random.uniform_like`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from optax_compat._runtime.tree_math.distributed import is_distributed

#: Block sizes by bit width when none is given: scales cost 4 bytes per block, 1/64 and 1/32
#: of a byte per element.
DEFAULT_BLOCK_SIZE = {8: 256, 4: 128}
BITS = tuple(DEFAULT_BLOCK_SIZE)


class Quantized(NamedTuple):
    """A tensor stored block-wise quantized.

    Attributes:
      codes: ``uint8``, one code per element (8 bits) or two per byte (4 bits, the first in
        the high half), the elements padded to whole blocks.
      scales: ``float32``, one per block: its largest magnitude, negative where the block uses
        the unsigned code.
      like: an empty tensor of shape ``(*shape, 0)`` and the original dtype, which says what
        :func:`dequantize` gives back (it takes no memory).
    """

    codes: torch.Tensor
    scales: torch.Tensor
    like: torch.Tensor


def _dynamic_code(bits: int, signed: bool) -> tuple[float, ...]:
    """The values of the dynamic code, ascending: ``2 ** bits`` of them in ``[-1, 1]``.

    Magnitudes: for ``e = 0, ..., m - 1`` (``m`` the magnitude bits: ``bits - 1`` signed,
    ``bits`` unsigned), the midpoints of ``2 ** (m - 1 - e)`` equal steps of ``[0.1, 1]`` times
    ``10 ** -e``: ``2 ** m - 1`` of them, and ``1``. The signed code adds the midpoints'
    negatives and zero; the unsigned code has no zero.
    """
    magnitude_bits = bits - 1 if signed else bits
    midpoints = [10.0 ** -exponent * (0.1 + 0.9 * (i + 0.5) / 2 ** (magnitude_bits - 1 - exponent))
                 for exponent in range(magnitude_bits)
                 for i in range(2 ** (magnitude_bits - 1 - exponent))]
    values = midpoints + [1.0] + ([0.0] + [-m for m in midpoints] if signed else [])
    return tuple(sorted(values))


# Plain tuples and floats, built at import: constants under torch.compile.
_CODES = {(bits, signed): _dynamic_code(bits, signed) for bits in BITS for signed in (True, False)}


def _halfway_to_one(bits: int, signed: bool) -> float:
    """Above this magnitude the nearest value is ``1``: halfway from the largest midpoint."""
    return (_CODES[bits, signed][-2] + 1.0) / 2


def _decoding_steps(bits: int) -> tuple[tuple[float, float], ...]:
    """For ``j = 0, ..., bits``: ``(offset, slope)`` such that the unsigned code's value of
    rank ``R - 1``, for ``2 ** j <= R < 2 ** (j + 1)``, is ``offset + slope * R``."""
    steps = []
    for j in range(bits):
        power, count = 10.0 ** -(bits - 1 - j), 2 ** j  # exponent bits - 1 - j has 2 ** j values
        slope = power * 0.9 / count
        steps.append((power * 0.1 + slope * (0.5 - count), slope))
    return (*steps, (1.0, 0.0))


_DECODING = {bits: _decoding_steps(bits) for bits in BITS}
_HALFWAY = {(bits, signed): _halfway_to_one(bits, signed) for bits, signed in _CODES}


def _blocks(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """``x`` flattened in float32, padded with zeros to whole blocks: ``(blocks, block_size)``.

    Always a new tensor, made by concatenation (even of no padding). Compiled, this gives the
    values their own buffer in block order, which the passes over blocks read in order.
    Inlined through the reshape instead, each element's index in ``x``'s shape is computed
    with divisions, and Inductor's loops do not vectorize (10x slower); a padding op would
    mask every load.
    """
    flat = x.reshape(-1).to(torch.float32)
    return torch.cat([flat, flat.new_zeros(-flat.numel() % block_size)]).view(-1, block_size)


def _unblocked(values: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``values`` in blocks, unpadded and reshaped to ``shape``: a new tensor, for the reason
    :func:`_blocks` gives (a concatenation, sliced)."""
    flat = torch.cat([values.reshape(-1), values.new_zeros(1)])
    return flat[:shape.numel()].reshape(shape)


def _encode(v: torch.Tensor, unsigned: torch.Tensor, bits: int) -> torch.Tensor:
    """The index of the value nearest to each ``v`` in ``[-1, 1]`` in the unsigned code where
    ``unsigned``, else in the signed one, as a float.

    Computed elementwise with comparisons and selects only, which vectorize (a table lookup or
    a binary search does not). The magnitude's decimal exponent ``e`` is counted against
    ``10 ** -k``; within it the values are evenly spaced, so rounding ``f``, the position on
    that grid, gives the step ``i`` and the rank ``steps(e) - 1 + i`` among the code's
    magnitudes. The largest value of the next smaller exponent lies at ``f = -0.6`` (the grids
    halve their step count from one exponent to the next), so below ``f = -0.3`` it is the
    nearest: rank minus one. ``1``, zero and the signed code's negatives (one fewer than its
    positives, so none is ``-1``) are selected last.
    """
    magnitude = v.abs()
    power, steps = torch.ones_like(magnitude), torch.full_like(magnitude, 2.0 ** (bits - 2))
    for k in range(1, bits):
        below = magnitude < 10.0 ** -k
        if k == bits - 1:  # only the unsigned code, with its extra bit, reaches this exponent
            below = below & unsigned
        power = torch.where(below, 10.0 ** k, power)
        steps = torch.where(below, 2.0 ** (bits - 2 - k), steps)
    # (No select between two numbers below: its dtype would be the default dtype, not v's.)
    steps = torch.where(unsigned, steps * 2, steps)
    position = (magnitude * power - 0.1) * (steps * (1 / 0.9)) - 0.5
    step = torch.where(position < -0.3, -1.0, torch.minimum(position.round(), steps - 1))
    zero = 2.0 ** (bits - 1) - 1  # zero's index in the signed code, its positives above it
    negative = (v < 0).to(v.dtype)
    top = torch.where(unsigned, 2.0 ** bits - 1, zero - negative)
    halfway = torch.where(unsigned, magnitude > _HALFWAY[bits, False],
                          magnitude > _HALFWAY[bits, True])
    rank = torch.where(halfway, top, steps - 1 + step).clamp_min(0)
    # One expression of ``rank`` (it compiles to one pass): the unsigned code counts up from
    # 0, the signed one away from zero on either side.
    first = torch.where(unsigned, 0.0, zero + 1 - 2 * negative)
    index = first + torch.where(unsigned, 1.0, 1 - 2 * negative) * rank
    tiny = magnitude < _CODES[bits, True][2 ** (bits - 1)] / 2  # nearer zero than any other
    return torch.where(tiny & ~unsigned, zero, index)


def _decode(indices: torch.Tensor, unsigned: torch.Tensor, bits: int) -> torch.Tensor:
    """The code values of ``indices`` (floats) in the unsigned code where ``unsigned``, else in
    the signed one: the inverse of :func:`_encode`, with selects only.

    With ``R`` one more than the magnitude's rank (``0`` for zero), the unsigned code's values
    for ``2 ** j <= R < 2 ** (j + 1)`` are affine in ``R``; the signed code's are ten times
    those (its exponents start one lower), but for its largest rank, ``1``.
    """
    zero = 2.0 ** (bits - 1) - 1
    rank = torch.where(unsigned, indices + 1, (indices - zero).abs())
    offset, slope = torch.zeros_like(rank), torch.zeros_like(rank)
    for j, (step_offset, step_slope) in enumerate(_DECODING[bits]):
        reached = rank >= 2.0 ** j
        offset = torch.where(reached, step_offset, offset)
        slope = torch.where(reached, step_slope, slope)
    value = offset + slope * rank
    value = torch.where(unsigned, value, torch.where(rank < 2.0 ** (bits - 1), value * 10, 1.0))
    return torch.where(unsigned | (indices >= zero), value, -value)


def _decoded_table(bits: int) -> tuple[float, ...]:
    """:func:`_decode` of every index, the signed code's then the unsigned code's."""
    indices = torch.arange(2 ** bits, dtype=torch.float32).repeat(2)
    unsigned = torch.arange(2 ** (bits + 1)) >= 2 ** bits
    return tuple(_decode(indices, unsigned, bits).tolist())


#: The values :func:`dequantize` gives, by index (float32): read from here eagerly (a lookup is
#: one pass) and when compiled for a GPU; computed by :func:`_decode` when compiled for the CPU,
#: where its selects fuse into the loop.
_TABLES = {bits: _decoded_table(bits) for bits in BITS}


def code(bits: int, signed: bool, device: torch.device | str | None = None) -> torch.Tensor:
    """The dynamic code's values as :func:`dequantize` gives them (float32, ascending)."""
    values = _TABLES[bits][2 ** bits:] if not signed else _TABLES[bits][:2 ** bits]
    return torch.tensor(values, dtype=torch.float32, device=device)


def sharded_like(x: torch.Tensor, local: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """``local``, this rank's shard of a tensor of ``shape`` placed as the DTensor ``x`` is."""
    dtensor = type(x)
    stride = torch.empty(shape, device="meta").stride()
    return dtensor.from_local(local, x.device_mesh, x.placements, run_check=False, shape=shape,
                              stride=stride)


def _first_position(x: torch.Tensor) -> int:
    """Where this rank's shard of the DTensor ``x`` starts in ``x`` flattened, when the shard
    is one run of elements: sharded along dimension 0 alone (FSDP2's placement), in
    ``torch.chunk``'s pieces. Otherwise (other placements) 0: positions are counted within
    the shard."""
    sharded = [(axis, placement) for axis, placement in enumerate(x.placements)
               if not placement.is_replicate()]
    if len(sharded) != 1 or not sharded[0][1].is_shard(dim=0) or x.dim() == 0:
        return 0
    axis = sharded[0][0]
    rows, pieces = x.shape[0], x.device_mesh.size(axis)
    start = min(x.device_mesh.get_local_rank(axis) * -(-rows // pieces), rows)
    return start * (x.numel() // rows if rows else 0)


def on_local_shard(x: torch.Tensor, fn: Callable[[torch.Tensor, int], torch.Tensor]
                   ) -> torch.Tensor:
    """``fn(x, 0)``; for a DTensor (an FSDP2 shard), ``fn`` of this rank's shard and the
    position of its first element in ``x`` flattened (see :func:`_first_position`), placed as
    ``x`` is: each rank computes on its own elements, with no communication."""
    if not is_distributed([x]):
        return fn(x, 0)
    return sharded_like(x, fn(x.to_local(), _first_position(x)), tuple(x.shape))


def quantize(x: torch.Tensor, bits: int = 8, block_size: int | None = None) -> Quantized:
    """``x`` stored block-wise quantized with the dynamic codes (nearest value).

    A DTensor is quantized shard by shard: each rank keeps the codes and scales of its own
    elements, and ``like`` is a DTensor placed as ``x`` is.
    """
    if is_distributed([x]):
        local = quantize(x.to_local(), bits, block_size)
        return local._replace(like=sharded_like(x, local.like, (*x.shape, 0)))
    block_size = block_size or DEFAULT_BLOCK_SIZE[bits]
    blocks = _blocks(x, block_size)
    largest = blocks.abs().amax(dim=1)
    unsigned = blocks.amin(dim=1) >= 0
    normalized = blocks * (1 / torch.where(largest > 0, largest, 1.0))[:, None]
    indices = _encode(normalized, unsigned[:, None], bits).to(torch.uint8)
    if bits == 4:
        indices = (indices[:, 0::2] << 4) | indices[:, 1::2]
    like = x.new_empty((*x.shape, 0))
    return Quantized(indices.reshape(-1), torch.where(unsigned, -largest, largest), like)


def dequantize(stored: Quantized, bits: int = 8, block_size: int | None = None
               ) -> torch.Tensor:
    """The tensor :func:`quantize` stored (shape and dtype of ``stored.like``; a DTensor
    placed as ``like`` is, for a DTensor ``like``)."""
    if is_distributed([stored.like]):
        local = dequantize(stored._replace(like=stored.like.to_local()), bits, block_size)
        return sharded_like(stored.like, local, tuple(stored.like.shape[:-1]))
    block_size = block_size or DEFAULT_BLOCK_SIZE[bits]
    indices = stored.codes.view(stored.scales.shape[0], -1)
    if bits == 4:
        indices = torch.stack([indices >> 4, indices & 15], dim=-1).view(indices.shape[0], -1)
    unsigned = torch.signbit(stored.scales)[:, None]
    # Compiled for the CPU the selects fuse into the loop; Triton would contract
    # ``offset + slope * rank`` into one rounding (FMA) and differ from the table by an ulp.
    if torch.compiler.is_compiling() and indices.is_cpu:
        values = _decode(indices.to(torch.float32), unsigned, bits)
    else:
        table = torch.tensor(_TABLES[bits], dtype=torch.float32, device=indices.device)
        values = table[indices.to(torch.int64) + torch.where(unsigned, 2 ** bits, 0)]
    values = values * stored.scales.abs()[:, None]
    return _unblocked(values, stored.like.shape[:-1]).to(stored.like.dtype)


def stochastic_round(x: torch.Tensor, dtype: torch.dtype, uniform: torch.Tensor
                     ) -> torch.Tensor:
    """``x`` rounded to ``dtype`` up or down at random, unbiased: to the neighbour at distance
    ``d`` of the two ``D`` apart with probability ``1 - d / D``.

    Args:
      x: the values, in a wider floating dtype.
      dtype: the narrower floating dtype.
      uniform: independent uniform numbers in ``[0, 1)`` shaped like ``x``.
    """
    nearest = x.to(dtype)
    back = nearest.to(x.dtype)
    beyond = torch.where(back > x, float("-inf"), float("inf")).to(dtype)
    other = torch.nextafter(nearest, beyond)
    # Non-finite values, and values already in ``dtype``, stay at ``nearest`` (NaN < p fails).
    chance = (x - back).abs() / (other.to(x.dtype) - back).abs()
    return torch.where(uniform.to(x.dtype) < chance, other, nearest)
