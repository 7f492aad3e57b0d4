"""Functional optimizer wrappers (``torchopt.optim.func``)."""

from torchopt_fn.optim.func.base import FuncOptimizer

__all__ = ["FuncOptimizer"]
