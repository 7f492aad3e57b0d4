"""The zero-order gradient module."""

import torchopt_fn.nn.module  # loads torchopt_fn.nn first: it re-exports the class below
from torchopt_fn.diff.zero_order.nn.module import ZeroOrderGradientModule

__all__ = ["ZeroOrderGradientModule"]
