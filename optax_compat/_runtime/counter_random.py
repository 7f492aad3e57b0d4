"""Gaussian noise as a pure function of tensors: a key, a step count and a position.

``torch.randn`` draws from a ``torch.Generator``, which is seeded from a Python integer: a key
held in a tensor would have to be read on the host at every step, which breaks
``torch.compile`` in default mode (a graph break), stalls an asynchronous device and fails on
``meta`` tensors. Here the noise is counter-based instead (Salmon et al, `Parallel random
numbers: as easy as 1, 2, 3 <https://doi.org/10.1145/2063384.2063405>`_, 2011): each element's
value is a hash of ``(key, count, leaf index, element index)``, computed with integer tensor
ops, turned into two uniforms and then into a standard normal by the Box-Muller transform.
The same key and count give the same noise on every device, eagerly or compiled.

The hash is Thomas Mueller's 32-bit integer mixer (multiplier ``0x45d9f3b``), evaluated in
int64 on values below ``2 ** 32`` so that no product overflows; the uniforms have 32 random bits
(the normals' tails stop at about 6.7 standard deviations). Element indices are hashed modulo
``2 ** 32``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import torch

from optax_compat._runtime import tree_math as tm

_MASK = 0xFFFFFFFF
_MULTIPLIER = 0x45D9F3B
_TWO_TO_MINUS_32 = 2.0 ** -32


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit avalanche mix of the low 32 bits of the int64 tensor ``x``."""
    x = x & _MASK
    x = (((x >> 16) ^ x) * _MULTIPLIER) & _MASK
    x = (((x >> 16) ^ x) * _MULTIPLIER) & _MASK
    return (x >> 16) ^ x


def _step_word(key: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """A 0-d int64 word below ``2 ** 32`` mixing the key and the step count."""
    key = key.to(torch.int64)
    word = _hash32(_hash32(key) ^ _hash32(key >> 32))
    return _hash32(word ^ _hash32(count.to(torch.int64)))


def next_key(key: torch.Tensor) -> torch.Tensor:
    """The key after ``key`` in a chain of keys: a 0-d int64 tensor on ``key``'s device, below
    ``2 ** 63``, a hash of ``key`` (for states that hold a key and no step count)."""
    word = _step_word(key, torch.zeros((), dtype=torch.int64, device=key.device))
    return (_hash32(word ^ 0x9E3779B9) << 31) ^ _hash32(word ^ 0x7F4A7C15)


def normal_like(key: torch.Tensor, count: torch.Tensor, index: int,
                like: torch.Tensor) -> torch.Tensor:
    """Standard normal noise shaped like ``like``: a pure function of its arguments.

    Args:
      key: a 0-d integer tensor, the seed of the stream.
      count: a 0-d integer tensor, the step (each step draws afresh).
      index: the leaf's position in its tree (each leaf draws afresh).
      like: the tensor whose shape, dtype and device the noise takes. A complex dtype gets
        real and imaginary parts of variance 1/2 each, as ``torch.randn`` does.

    Returns:
      A tensor of independent standard normal samples.
    """
    return _normals(_step_word(key, count), [index], [like])[0]


def uniform_like(key: torch.Tensor, count: torch.Tensor, index: int,
                 like: torch.Tensor, first: int = 0) -> torch.Tensor:
    """Uniform numbers in ``[0, 1)`` shaped like ``like``: float64 with 32 random bits when
    ``like`` is float64, else float32 with 24. A pure function of its arguments, hashed as
    :func:`normal_like`'s (another stream of the same key); the elements draw at positions
    ``first, first + 1, ...`` (a shard's, in the whole tensor)."""
    word = _hash32(_step_word(key, count) ^ 0x2545F491)
    seed = _hash32(word ^ (2 * index))
    positions = _hash32(torch.arange(first, first + like.numel(), dtype=torch.int64,
                                     device=like.device))
    bits = _hash32(positions ^ seed)
    if like.dtype == torch.float64:
        return (bits.to(torch.float64) * _TWO_TO_MINUS_32).reshape(like.shape)
    # float32 holds 24 bits exactly: more could round up to 1.
    return ((bits >> 8).to(torch.float32) * 2.0 ** -24).reshape(like.shape)


def normal_chunks(key: torch.Tensor, count: torch.Tensor,
                  likes: Sequence[torch.Tensor]) -> Iterator[tuple[slice, list[torch.Tensor]]]:
    """Standard normal noise for every leaf of ``likes`` (leaf ``i`` draws as
    :func:`normal_like` with ``index=i``), computed for runs of consecutive leaves at once.

    A run holds leaves of one device and one computing dtype, at most
    ``tree_math.BLOCK_ELEMENTS`` elements in all (a larger leaf runs alone): the hashing
    temporaries span one run, and a thousand small leaves cost a few dozen kernels, not a few
    dozen per leaf. Under ``torch.compile`` every leaf runs alone (Inductor fuses each one).

    Yields:
      ``(leaves, noise)``: the slice of ``likes`` a run covers and its leaves' noise.
    """
    word = _step_word(key, count)
    start, elements, kind = 0, 0, None
    alone = torch.compiler.is_compiling()
    for stop, like in enumerate(likes):
        like_kind = (like.device, _computing_dtype(like), like.is_complex())
        if stop > start and (alone or like_kind != kind or like_kind[2]
                             or elements + like.numel() > tm.BLOCK_ELEMENTS):
            yield slice(start, stop), _normals(word, range(start, stop), likes[start:stop])
            start, elements = stop, 0
        kind = like_kind
        elements += like.numel()
    if start < len(likes):
        yield slice(start, len(likes)), _normals(word, range(start, len(likes)), likes[start:])


def _computing_dtype(like: torch.Tensor) -> torch.dtype:
    """The dtype the uniforms and the Box-Muller transform are computed in for ``like``."""
    real_dtype = like.real.dtype if like.is_complex() else like.dtype
    return real_dtype if real_dtype in (torch.float32, torch.float64) else torch.float32


def _normals(word: torch.Tensor, indices: Sequence[int],
             likes: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The noise of leaves ``likes`` (of one device and computing dtype, at most one complex),
    whose positions in their tree are ``indices``, hashed as one flat run."""
    device, dtype = likes[0].device, _computing_dtype(likes[0])
    sizes = [like.numel() for like in likes]
    # Each element's position in its leaf, and the leaf's stream seed for each half.
    positions = torch.cat([torch.arange(size, dtype=torch.int64, device=device)
                           for size in sizes]) if len(likes) > 1 else torch.arange(
        sizes[0], dtype=torch.int64, device=device)
    positions = _hash32(positions)
    leaf_halves = torch.tensor([[2 * index, 2 * index + 1] for index in indices],
                               dtype=torch.int64, device=device)
    seeds = _hash32(word ^ leaf_halves)
    repeats = torch.tensor(sizes, device=device) if len(likes) > 1 else None

    def uniform_bits(half: int) -> torch.Tensor:
        seed = seeds[:, half]
        if repeats is not None:
            seed = torch.repeat_interleave(seed, repeats, output_size=positions.numel())
        return _hash32(positions ^ seed).to(dtype)

    first, second = uniform_bits(0), uniform_bits(1)
    radius = torch.sqrt(-2.0 * torch.log((first + 1.0) * _TWO_TO_MINUS_32))
    angle = (2.0 * math.pi * _TWO_TO_MINUS_32) * second
    like = likes[0]
    if like.is_complex():
        scale = radius * math.sqrt(0.5)
        parts = torch.stack((scale * torch.cos(angle), scale * torch.sin(angle)), -1)
        return [torch.view_as_complex(parts.to(like.real.dtype).contiguous()).reshape(
            like.shape)]
    values = radius * torch.cos(angle)
    return [piece.to(like.dtype).reshape(like.shape)
            for piece, like in zip(values.split(sizes), likes, strict=True)]
