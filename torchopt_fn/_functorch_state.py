"""Whether code runs under a ``torch.func`` transform, for code paths that cannot run under one.

``torch._foreach_*`` kernels have no batching rule, and a data-dependent Python loop (a CG
iteration that stops on its residual) cannot run under ``torch.func.vmap``. The helpers here let
such code pick an equivalent transform-safe path instead of failing.
"""

from __future__ import annotations

from torch._C._functorch import get_interpreter_stack, peek_interpreter_stack
from torch._functorch.pyfunctorch import TransformType


def transform_active() -> bool:
    """Whether any ``torch.func`` transform (``grad``, ``vmap``, ``jvp``, ...) is running."""
    return peek_interpreter_stack() is not None


def vmap_active() -> bool:
    """Whether a ``torch.func.vmap`` (also inside ``jacrev``/``jacfwd``) is running."""
    return any(level.key() == TransformType.Vmap for level in get_interpreter_stack() or ())
