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


# Plain tuples, built at import: constants under torch.compile.
_CODES = {(bits, signed): _dynamic_code(bits, signed) for bits in BITS for signed in (True, False)}
_TABLES = {bits: _CODES[bits, True] + _CODES[bits, False] for bits in BITS}


def code(bits: int, signed: bool, device: torch.device | str | None = None) -> torch.Tensor:
    """The dynamic code as a float32 tensor (see :func:`_dynamic_code`)."""
    return torch.tensor(_CODES[bits, signed], dtype=torch.float32, device=device)


def _blocks(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """``x`` flattened in float32, padded with zeros to whole blocks: ``(blocks, block_size)``."""
    flat = x.reshape(-1).to(torch.float32)
    padding = -flat.numel() % block_size
    if padding:
        flat = torch.cat([flat, flat.new_zeros(padding)])
    return flat.view(-1, block_size)


def _nearest(v: torch.Tensor, unsigned: torch.Tensor, bits: int) -> torch.Tensor:
    """The index in :data:`_TABLES` of the value nearest to each ``v`` in ``[-1, 1]`` of the
    unsigned code where ``unsigned``, else of the signed one.

    Found arithmetically, elementwise (a binary search such as ``torch.bucketize`` does not
    vectorize): the decimal exponent ``e`` by comparisons, the step within it by rounding,
    which gives the magnitude's rank ``k`` among the code's (the ``n - 1`` values of smaller
    exponents come first); then the neighbours on either side are compared, since the nearest
    value of two adjacent exponents may lie across their boundary.
    """
    table = torch.tensor(_TABLES[bits], dtype=torch.float32, device=v.device)
    magnitude = torch.nan_to_num(v.abs(), nan=0.0)  # a NaN's block is NaN whatever the index
    last_exponent = torch.where(unsigned, float(bits - 1), float(bits - 2))
    exponent = torch.minimum(sum((magnitude < 10.0 ** -k).to(torch.float32)
                                 for k in range(1, bits)), last_exponent)
    steps = torch.exp2(last_exponent - exponent)
    step = ((magnitude * torch.pow(10.0, exponent) - 0.1) * (steps / 0.9) - 0.5).round()
    rank = steps - 1 + torch.minimum(step.clamp_min(0), steps - 1)
    zero = 2 ** (bits - 1) - 1  # zero's index in the signed code
    index = torch.where(unsigned, 2 ** bits + rank,
                        torch.where(v < 0, zero - 1 - rank, zero + 1 + rank)).to(torch.int64)
    low = torch.where(unsigned, 2 ** bits, 0)
    best, error = index, (table[index] - v).abs()
    for offset in (-1, 1):
        other = torch.minimum(torch.maximum(index + offset, low), low + 2 ** bits - 1)
        other_error = (table[other] - v).abs()
        closer = other_error < error
        best, error = torch.where(closer, other, best), torch.where(closer, other_error, error)
    return best


def sharded_like(x: torch.Tensor, local: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """``local``, this rank's shard of a tensor of ``shape`` placed as the DTensor ``x`` is."""
    dtensor = type(x)
    stride = torch.empty(shape, device="meta").stride()
    return dtensor.from_local(local, x.device_mesh, x.placements, run_check=False, shape=shape,
                              stride=stride)


def on_local_shard(x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]
                   ) -> torch.Tensor:
    """``fn(x)``; for a DTensor (an FSDP2 shard), ``fn`` of this rank's shard, placed as ``x``
    is: each rank computes on its own elements, with no communication."""
    if not is_distributed([x]):
        return fn(x)
    return sharded_like(x, fn(x.to_local()), tuple(x.shape))


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
    normalized = blocks / torch.where(largest > 0, largest, 1.0)[:, None]
    indices = _nearest(normalized, unsigned[:, None], bits) - torch.where(
        unsigned, 2 ** bits, 0)[:, None]
    indices = indices.to(torch.uint8)
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
    indices = indices.to(torch.int64) + torch.where(unsigned, 2 ** bits, 0)
    table = torch.tensor(_TABLES[bits], dtype=torch.float32, device=stored.codes.device)
    values = table[indices] * stored.scales.abs()[:, None]
    shape = stored.like.shape[:-1]
    return values.reshape(-1)[:shape.numel()].reshape(shape).to(stored.like.dtype)


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
