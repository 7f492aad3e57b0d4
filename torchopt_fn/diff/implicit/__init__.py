"""Implicit differentiation: :func:`custom_root` and :class:`ImplicitMetaGradientModule`."""

from torchopt_fn.diff.implicit import nn
from torchopt_fn.diff.implicit.decorator import custom_root
from torchopt_fn.diff.implicit.nn import ImplicitMetaGradientModule

__all__ = ["custom_root", "ImplicitMetaGradientModule"]
