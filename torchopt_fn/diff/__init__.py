"""Differentiable gradient estimation: implicit and zero-order differentiation."""

from torchopt_fn.diff import implicit

__all__ = ["implicit"]
