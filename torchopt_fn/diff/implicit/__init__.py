"""Implicit differentiation: :func:`custom_root` and :class:`ImplicitMetaGradientModule`."""

from torchopt_fn.diff.implicit.decorator import custom_root

__all__ = ["custom_root"]
