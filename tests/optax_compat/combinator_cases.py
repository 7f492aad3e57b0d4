"""Inner transformations for the combinator tests, built the same way in both worlds.

Each case is ``(ours, theirs)``: zero-argument factories of an optax_compat transformation and
of the same real Optax transformation. ``inner_transforms`` draws random inner transformations
(ours only) for the hypothesis laws, and ``assert_same_runs`` runs two transformations side by
side on the same gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import optax
import pytest
import torch
from hypothesis import strategies as st

import optax_compat as ox
from optax_compat import testing
from optax_compat.testing import strategies


def jitted(tx: Any) -> Any:
    """A real Optax transformation with ``init`` and ``update`` under ``jax.jit``.

    Eager JAX re-traces every ``lax.cond`` on every call; jitting the Optax side once keeps
    the differential tests fast.
    """
    import jax

    return optax.GradientTransformationExtraArgs(jax.jit(tx.init), jax.jit(tx.update))


INNER_CASES: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "adam": (lambda: ox.chain(ox.scale_by_adam(b1=0.8), ox.scale(-0.05)),
             lambda: optax.chain(optax.scale_by_adam(b1=0.8), optax.scale(-0.05))),
    "trace_scale": (lambda: ox.chain(ox.trace(0.9), ox.scale(-0.1)),
                    lambda: optax.chain(optax.trace(0.9), optax.scale(-0.1))),
    "clip_nesterov": (lambda: ox.chain(ox.clip_by_global_norm(1.0), ox.trace(0.5, nesterov=True)),
                      lambda: optax.chain(optax.clip_by_global_norm(1.0),
                                          optax.trace(0.5, nesterov=True))),
    "ema_decay": (lambda: ox.chain(ox.ema(0.8), ox.add_decayed_weights(0.1), ox.scale(-0.05)),
                  lambda: optax.chain(optax.ema(0.8), optax.add_decayed_weights(0.1),
                                      optax.scale(-0.05))),
}
"""Two or more different inner transformations: every combinator is tested with each."""


def inner_transforms() -> st.SearchStrategy[Any]:
    """Random inner transformations (single or chained) from ``optax_compat.testing``.

    Each draw is a ``DrawnTransformation``: ``.transformation``, printed as the code that
    builds it when a law fails.
    """
    return strategies.transforms(max_depth=1, max_length=2)


def run(tx: ox.GradientTransformation, params: Any, grads: Sequence[Any]) -> list[Any]:
    """The updates of ``tx`` at each step, applying them to the params in between."""
    state = tx.init(params)
    all_updates = []
    for grad in grads:
        updates, state = tx.update(grad, state, params)
        params = ox.apply_updates(params, updates)
        all_updates.append(updates)
    return all_updates


def assert_same_runs(actual: ox.GradientTransformation, expected: ox.GradientTransformation,
                     params: Any, grads: Sequence[Any], rtol: float = 1e-6,
                     atol: float = 1e-6) -> None:
    """Asserts two transformations give the same updates step by step.

    If ``expected`` raises (a drawn inner transformation may reject a drawn tree), ``actual``
    must raise the same kind of error: the law is about equal behaviour.
    """
    try:
        expected_updates = run(expected, params, grads)
    except (ValueError, TypeError, RuntimeError) as error:
        with pytest.raises(type(error)):
            run(actual, params, grads)
        return
    for step, (mine, ref) in enumerate(zip(run(actual, params, grads), expected_updates)):
        testing.assert_trees_all_close(mine, ref, rtol=rtol, atol=atol,
                                       what=f"updates at step {step}")


CASES_AND_DTYPES = [("adam", torch.float32), ("clip_nesterov", torch.float64),
                    ("ema_decay", torch.float64)]
"""Every inner case once, float32 and float64 both covered, to keep the Optax runs few."""
