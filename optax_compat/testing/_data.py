"""Reproducible test data: seeded tensors and a small pytree with every kind of node."""

from __future__ import annotations

from collections.abc import Mapping

import torch


def seeded_randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0,
                 scale: float = 1.0) -> torch.Tensor:
    """A reproducible standard normal tensor (times ``scale``).

    Example:
      >>> from optax_compat import testing
      >>> testing.seeded_randn(2, 3, seed=1).shape
      torch.Size([2, 3])
    """
    generator = torch.Generator().manual_seed(seed)
    return scale * torch.randn(shape, generator=generator, dtype=dtype)


def seeded_randint(high: int, *shape: int, seed: int = 0,
                   dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """A reproducible tensor of integers in ``[0, high)`` (e.g. class labels)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, high, shape, generator=generator).to(dtype)


def make_tree(dtype: torch.dtype = torch.float32, seed: int = 0, scale: float = 1.0) -> dict:
    """A nested pytree with a 0-d leaf, a vector, a matrix, a tuple and a ``None`` subtree.

    Example:
      >>> from optax_compat import testing
      >>> sorted(testing.make_tree())
      ['bias', 'empty', 'layer', 'pair']
    """
    generator = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return scale * torch.randn(shape, generator=generator, dtype=dtype)

    return {"bias": rand(), "layer": {"w": rand(3, 4), "b": rand(4)},
            "pair": (rand(2), rand(2, 2)), "empty": None}


def random_tree(shapes: Mapping[str, tuple[int, ...]], dtype: torch.dtype = torch.float32,
                seed: int = 0) -> dict[str, torch.Tensor]:
    """A dict of standard normal tensors of the given shapes, drawn from one seeded generator.

    Example:
      >>> from optax_compat import testing
      >>> {k: tuple(v.shape) for k, v in testing.random_tree({"w": (2, 3), "b": ()}).items()}
      {'w': (2, 3), 'b': ()}
    """
    generator = torch.Generator().manual_seed(seed)
    return {name: torch.randn(shape, generator=generator, dtype=dtype)
            for name, shape in shapes.items()}
