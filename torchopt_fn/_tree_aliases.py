"""The tree aliases of the transformation signatures (re-exported by :mod:`torchopt_fn.typing`).

They live apart from :mod:`torchopt_fn.typing` so that :mod:`torchopt_fn.base`, which defines the
transformation types that module re-exports, can use them without importing it back.
"""

from __future__ import annotations

from typing import TypeAlias

from optree.typing import PyTreeTypeVar
from torch import Tensor

__all__ = ["TensorTree", "Params", "Updates", "OptState"]

TensorTree: TypeAlias = PyTreeTypeVar("TensorTree", Tensor)  # type: ignore[valid-type]
Params: TypeAlias = TensorTree
Updates: TypeAlias = Params  # updates have the structure of the parameters
OptState: TypeAlias = TensorTree
