"""Random pytrees (mirrors ``optax/tree_utils/_random.py``).

Where Optax takes a JAX key, these take an int seed or a ``torch.Generator``; a "key" tree is a
tree of int64 0-d seed tensors, one per leaf, so that it is a plain, checkpointable pytree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import utils


def tree_split_key_like(rng_key: utils.KeyLike, target_tree: Any) -> Any:
    """One independent seed per leaf of ``target_tree``, in a tree of the same structure."""
    spec = tm.treespec(target_tree)
    return tm.unflatten(spec, list(utils.split_key(rng_key, spec.num_leaves)))


def _normal(generator: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype,
            device: torch.device) -> torch.Tensor:
    return torch.randn(shape, generator=generator, dtype=dtype, device=device)


def tree_random_like(
    rng_key: utils.KeyLike,
    target_tree: Any,
    sampler: Callable[..., torch.Tensor] = _normal,
    dtype: Optional[torch.dtype] = None,
) -> Any:
    """A tree of random tensors shaped like ``target_tree``.

    Args:
      rng_key: an int seed, an int64 seed tensor or a ``torch.Generator``.
      target_tree: the tree whose structure, shapes, dtypes and devices to match.
      sampler: ``sampler(generator, shape, dtype, device) -> tensor``; standard normal by
        default.
      dtype: dtype of the samples; each leaf's own dtype when ``None``.

    Returns:
      A random tree with the structure of ``target_tree``.
    """
    dtype = bb.canonical_dtype(dtype)
    xs, spec = tm.flatten(target_tree)
    seeds = utils.split_key(rng_key, len(xs))
    return tm.unflatten(spec, [
        sampler(utils.generator_from_key(seed, x.device), tuple(x.shape), dtype or x.dtype,
                x.device)
        for seed, x in zip(seeds, xs)])


def tree_unwrap_random_key_data(input_tree: Any) -> Any:
    """Replaces ``torch.Generator`` leaves by their state tensors, for numerical comparison."""
    return tm.tree_map(
        lambda x: x.get_state() if isinstance(x, torch.Generator) else x, input_tree)
