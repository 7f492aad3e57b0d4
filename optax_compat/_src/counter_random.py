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

import torch

_MASK = 0xFFFFFFFF
_MULTIPLIER = 0x45D9F3B
_TWO_TO_MINUS_32 = 2.0 ** -32


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit avalanche mix of the low 32 bits of the int64 tensor ``x``."""
    x = x & _MASK
    x = (((x >> 16) ^ x) * _MULTIPLIER) & _MASK
    x = (((x >> 16) ^ x) * _MULTIPLIER) & _MASK
    return (x >> 16) ^ x


def _stream(key: torch.Tensor, count: torch.Tensor, index: int) -> torch.Tensor:
    """A 0-d int64 seed below ``2 ** 32`` for one leaf at one step."""
    key = key.to(torch.int64)
    word = _hash32(_hash32(key) ^ _hash32(key >> 32))
    word = _hash32(word ^ _hash32(count.to(torch.int64)))
    return _hash32(word ^ index)


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
    positions = _hash32(torch.arange(like.numel(), dtype=torch.int64, device=like.device))
    real_dtype = like.real.dtype if like.is_complex() else like.dtype
    compute_dtype = real_dtype if real_dtype in (torch.float32, torch.float64) else torch.float32
    first, second = (_hash32(positions ^ _stream(key, count, 2 * index + half)).to(compute_dtype)
                     for half in (0, 1))
    radius = torch.sqrt(-2.0 * torch.log((first + 1.0) * _TWO_TO_MINUS_32))
    angle = (2.0 * math.pi * _TWO_TO_MINUS_32) * second
    if like.is_complex():
        scale = radius * math.sqrt(0.5)
        parts = torch.stack((scale * torch.cos(angle), scale * torch.sin(angle)), -1)
        return torch.view_as_complex(parts.to(real_dtype).contiguous()).reshape(like.shape)
    return (radius * torch.cos(angle)).to(real_dtype).reshape(like.shape)
