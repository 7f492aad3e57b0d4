"""What a JAX program takes from ``jax`` itself, for ports of Optax code to PyTorch.

* :func:`split_key` plays ``jax.random.split``'s role for this package's keys (an int seed or a
  ``torch.Generator``).
* :class:`DictKey`, :class:`SequenceKey`, :class:`GetAttrKey` (``jax.tree_util``'s path entries)
  and :class:`NamedTupleKey` are the path entries that ``optax_compat.tree_utils`` functions
  such as ``tree_get_all_with_path`` and ``tree_map_params`` hand to user code.

JAX's 64-bit switch is ``optax_compat.config`` (``update("jax_enable_x64", True)``).
"""

from __future__ import annotations

import torch

from optax_compat._src import utils
from optax_compat.tree_utils._state_utils import DictKey, GetAttrKey, NamedTupleKey, SequenceKey

KeyLike = utils.KeyLike


def split_key(key: KeyLike, num: int = 2) -> torch.Tensor:
    """``num`` independent keys derived from ``key``, as ``jax.random.split(key, num)``.

    Each returned key is an int64 seed that every ``key`` argument of this package accepts.
    An int seed (or seed tensor) behaves like a JAX key: splitting it twice gives the same keys.
    A ``torch.Generator`` advances instead: each split consumes one draw, so two splits of the
    same generator differ (thread the returned keys through your program for reproducibility).

    Args:
      key: an int seed, an int64 seed tensor or a ``torch.Generator``.
      num: how many keys to make.

    Returns:
      An int64 tensor of shape ``(num,)``; ``keys[i]`` is a key.
    """
    return utils.split_key(key, num)


__all__ = ["DictKey", "GetAttrKey", "KeyLike", "NamedTupleKey", "SequenceKey", "split_key"]
