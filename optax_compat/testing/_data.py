"""Reproducible test data: seeded tensors and a small pytree with every kind of node.

The numbers are drawn on the CPU, from a seeded generator, and then placed on ``device``
(torch's default device when ``None``, as for factory functions): the same seed gives the
same numbers on every device.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Union

import torch

DeviceLike = Union[torch.device, str, None]


def resolve_device(device: DeviceLike) -> torch.device:
    """``device``, else where a factory call naming no device puts its tensor (under
    ``with torch.device(...)`` too, which ``torch.get_default_device`` of torch 2.3 misses)."""
    return torch.empty(0).device if device is None else torch.device(device)


def _drawn(seed: int, device: DeviceLike) -> tuple[torch.Generator, torch.device]:
    """A CPU generator seeded with ``seed``, and where its draws go."""
    return torch.Generator().manual_seed(seed), resolve_device(device)


def seeded_randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0,
                 scale: float = 1.0, device: DeviceLike = None) -> torch.Tensor:
    """A reproducible standard normal tensor (times ``scale``), on ``device``.

    Example:
      >>> from optax_compat import testing
      >>> testing.seeded_randn(2, 3, seed=1).shape
      torch.Size([2, 3])
    """
    generator, device = _drawn(seed, device)
    return (scale * torch.randn(shape, generator=generator, dtype=dtype,
                                device=generator.device)).to(device)


def seeded_randint(high: int, *shape: int, seed: int = 0,
                   dtype: torch.dtype = torch.int64, device: DeviceLike = None) -> torch.Tensor:
    """A reproducible tensor of integers in ``[0, high)`` (e.g. class labels), on ``device``."""
    generator, device = _drawn(seed, device)
    return torch.randint(0, high, shape, generator=generator,
                         device=generator.device).to(device, dtype)


def make_tree(dtype: torch.dtype = torch.float32, seed: int = 0, scale: float = 1.0,
              device: DeviceLike = None) -> dict:
    """A nested pytree with a 0-d leaf, a vector, a matrix, a tuple and a ``None`` subtree,
    on ``device``.

    Example:
      >>> from optax_compat import testing
      >>> sorted(testing.make_tree())
      ['bias', 'empty', 'layer', 'pair']
    """
    generator, device = _drawn(seed, device)

    def rand(*shape: int) -> torch.Tensor:
        return (scale * torch.randn(shape, generator=generator, dtype=dtype,
                                    device=generator.device)).to(device)

    return {"bias": rand(), "layer": {"w": rand(3, 4), "b": rand(4)},
            "pair": (rand(2), rand(2, 2)), "empty": None}


def random_tree(shapes: Mapping[str, tuple[int, ...]], dtype: torch.dtype = torch.float32,
                seed: int = 0, device: DeviceLike = None) -> dict[str, torch.Tensor]:
    """A dict of standard normal tensors of the given shapes, drawn from one seeded generator,
    on ``device``.

    Example:
      >>> from optax_compat import testing
      >>> {k: tuple(v.shape) for k, v in testing.random_tree({"w": (2, 3), "b": ()}).items()}
      {'w': (2, 3), 'b': ()}
    """
    generator, device = _drawn(seed, device)
    return {name: torch.randn(shape, generator=generator, dtype=dtype,
                              device=generator.device).to(device)
            for name, shape in shapes.items()}
