"""The implicit meta-gradient module."""

import torchopt_fn.nn.module  # loads torchopt_fn.nn first: it re-exports the class below
from torchopt_fn.diff.implicit.nn.module import ImplicitMetaGradientModule

__all__ = ["ImplicitMetaGradientModule"]
