"""Linear algebra helpers (mirrors ``optax/_src/linear_algebra.py``)."""

from __future__ import annotations

import warnings

import torch

from optax_compat._src import base
from optax_compat.tree_utils import _tree_math


def global_norm(updates: base.PyTree) -> torch.Tensor:
    """The L2 norm of all leaves of ``updates`` taken together (deprecated in Optax too).

    Prefer :func:`optax_compat.tree.norm`.
    """
    warnings.warn("optax_compat.global_norm is deprecated in favor of optax_compat.tree.norm",
                  DeprecationWarning, stacklevel=2)
    return _tree_math.tree_norm(updates)
