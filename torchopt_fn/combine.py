"""Chaining transformations (TorchOpt's ``chain``, composed by ``optax_compat``'s ``chain``)."""

from __future__ import annotations

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math
from torchopt_fn.base import ChainedGradientTransformation, GradientTransformation, identity
from torchopt_fn.typing import OptState, Params, Updates

__all__ = ["chain", "chain_flat"]


def chain(*transformations: GradientTransformation) -> GradientTransformation:
    """Applies transformations one after the other; the state is the tuple of their states.

    Args:
      *transformations: the transformations, in the order they are applied.

    Returns:
      The identity for no argument, the transformation itself for one, else a
      :class:`ChainedGradientTransformation`.
    """
    if not transformations:
        return identity()
    if len(transformations) == 1:
        return transformations[0]
    return ChainedGradientTransformation(*transformations)


def chain_flat(*transformations: GradientTransformation) -> GradientTransformation:
    """Like :func:`chain`, but the inner transformations see the list of leaves.

    Args:
      *transformations: transformations written for a flat list of tensors.

    Returns:
      A transformation on trees that flattens updates and params before the inner ones.
    """
    if not transformations:
        return identity()
    inner = chain(*transformations)

    def init_fn(params: Params) -> OptState:
        return inner.init(tree_math.leaves(params))

    def update_fn(updates: Updates, state: OptState, *, params: Params | None = None,
                  inplace: bool = True) -> tuple[Updates, OptState]:
        if params is None:
            flat_updates, spec = tree_math.flatten(updates)
            flat_params = None
        else:  # a None gradient keeps its place in the list (see GradientTransformation)
            flat_params, spec, flat_updates, _ = bb.present_pairs(params, updates)
        flat_updates, state = inner.update(flat_updates, state, params=flat_params,
                                           inplace=inplace)
        return tree_math.unflatten(spec, flat_updates), state

    return GradientTransformation(init_fn, update_fn)


chain.flat = chain_flat  # type: ignore[attr-defined]
