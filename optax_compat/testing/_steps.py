"""What every property check shares: gradients per step, extra arguments, a step of training."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from optax_compat._src import base
from optax_compat._src.update import apply_updates

# A gradient tree used at every step, or ``step -> gradient tree`` with steps counted from 0
# (trees are untyped).
GradsLike = Any
# Extra keyword arguments for ``update`` (``value=`` for reduce_on_plateau, ...), or
# ``step -> arguments``.
ExtraArgsLike = Mapping[str, Any] | Callable[[int], Mapping[str, Any]] | None


def grads_at(grads: GradsLike, step: int) -> Any:
    """The gradient tree for ``step``."""
    return grads(step) if callable(grads) else grads


def extra_args_at(extra_args: ExtraArgsLike, step: int) -> dict[str, Any]:
    """The extra ``update`` keyword arguments for ``step``."""
    if extra_args is None:
        return {}
    return dict(extra_args(step) if callable(extra_args) else extra_args)


def train_step(tx: base.GradientTransformation, params: Any, state: Any, grads: Any,
               extra_args: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """One step: ``(new_params, updates, new_state)``."""
    updates, new_state = tx.update(grads, state, params, **extra_args)
    return apply_updates(params, updates), updates, new_state
