"""Modules holding meta-parameters, and stateless (reparametrized) module calls."""

from torchopt_fn.nn.module import MetaGradientModule
from torchopt_fn.nn.stateless import reparameterize, reparametrize, swap_state

# Imported after the classes above, which these modules subclass and use.
from torchopt_fn.diff.implicit.nn.module import ImplicitMetaGradientModule  # isort: skip
from torchopt_fn.diff.zero_order.nn.module import ZeroOrderGradientModule  # isort: skip

__all__ = [
    "MetaGradientModule",
    "ImplicitMetaGradientModule",
    "ZeroOrderGradientModule",
    "reparametrize",
    "reparameterize",
    "swap_state",
]
