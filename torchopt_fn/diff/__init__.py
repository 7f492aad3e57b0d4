"""Differentiable gradient estimation: implicit and zero-order differentiation."""

from torchopt_fn.diff import implicit, zero_order
from torchopt_fn.diff.implicit import ImplicitMetaGradientModule
from torchopt_fn.diff.zero_order import ZeroOrderGradientModule

__all__ = ["implicit", "zero_order", "ImplicitMetaGradientModule", "ZeroOrderGradientModule"]
