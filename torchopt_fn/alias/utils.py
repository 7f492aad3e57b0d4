"""Pieces shared by the aliases: PyTorch-style weight decay and sign flip, ``-lr`` scaling, tags."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

import optax_compat
from optax_compat import _runtime as bb
from optax_compat._runtime import adam_engine, tree_math
from torchopt_fn._graph_tags import tag_optimizer_step
from torchopt_fn.base import (
    ChainedGradientTransformation,
    EmptyState,
    GradientTransformation,
    from_optax,
    identity,
    to_optax,
)
from torchopt_fn.transform import scale, scale_by_schedule
from torchopt_fn.typing import Numeric, OptState, Params, ScalarOrSchedule, Updates

__all__ = ["flip_sign_and_add_weight_decay", "scale_by_neg_lr", "tag_alias_steps",
           "check_learning_rate", "on_adam_engine"]


_use_chain_flat = True


def _set_use_chain_flat(use_chain_flat: bool) -> None:
    """TorchOpt's private switch between ``chain_flat`` (its default) and ``chain`` in the aliases.

    Accepted so that code calling it runs; the aliases here always compose with
    :func:`torchopt_fn.chain` (the state mirrors the params tree), whose numbers are those of
    both TorchOpt modes. The value is only recorded, for :func:`_get_use_chain_flat`.
    """
    global _use_chain_flat
    _use_chain_flat = bool(use_chain_flat)


def _get_use_chain_flat() -> bool:
    """The value last given to :func:`_set_use_chain_flat` (``True`` by default)."""
    return _use_chain_flat


def check_learning_rate(lr: ScalarOrSchedule) -> None:
    """Raises ``TypeError`` for a learning rate that is not a number, tensor or schedule, and
    ``ValueError`` for a negative constant one."""
    bb.check_hyperparameter("lr", lr)
    if not (callable(lr) or lr >= 0.0):
        raise ValueError(f"Invalid learning rate: {lr}")


def flip_sign_and_add_weight_decay(weight_decay: float = 0.0,
                                   maximize: bool = False) -> GradientTransformation:
    """Negates the gradients for maximization and adds ``weight_decay * params`` (L2, coupled).

    This is how ``torch.optim`` applies ``maximize`` and ``weight_decay``: to the gradient,
    before the optimizer's own rescaling.

    Args:
      weight_decay: the L2 coefficient.
      maximize: negate the gradients (gradient ascent).

    Returns:
      The identity when there is nothing to do, else a stateless transformation whose
      ``update`` needs ``params`` if ``weight_decay`` is non-zero.
    """
    if not weight_decay >= 0.0:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")
    if not maximize and weight_decay == 0.0:
        return identity()
    # Decided here, not at each update: a 0-d tensor ``weight_decay`` (a fused optimizer's
    # group entry) is then read only by the arithmetic.
    decays = bool(weight_decay != 0.0)

    def init_fn(params: Params) -> OptState:
        del params
        return EmptyState()

    @bb.elementwise
    def update_fn(updates: Updates, state: OptState, *, params: Params | None = None,
                  inplace: bool = True) -> tuple[Updates, OptState]:
        grads, spec = tree_math.flatten(updates)
        if decays:
            if params is None:
                raise ValueError("Parameters are required for weight decay: call "
                                 "`update(updates, state, params=params)`.")
            weights = tree_math.leaves_like(params, spec, "params", updates)
        if inplace and grads:
            if maximize:
                torch._foreach_neg_(grads)
            if decays:
                # Gradients outside any graph take the parameters' values only (TorchOpt adds
                # ``p.data``): recording the addition would fail on gradients that are views.
                with (contextlib.nullcontext() if tree_math.is_recording(grads)
                      else torch.no_grad()):
                    tree_math.add_scaled_(grads, weight_decay, weights)
            return updates, state
        if maximize:
            grads = tree_math.neg(grads)
        if decays:
            grads = tree_math.add_scaled(grads, weight_decay, weights)
        return tree_math.unflatten(spec, grads), state

    return GradientTransformation(init_fn, update_fn)


def scale_by_neg_lr(lr: ScalarOrSchedule) -> GradientTransformation:
    """Scales updates by ``-lr`` (``lr`` a constant or a schedule of the step count).

    A 0-d tensor ``lr`` is read at each update, not once here: a fused optimizer fills its
    groups' tensor before each step (see ``torchopt_fn.optim.base.HyperparameterOptimizer``).
    """
    check_learning_rate(lr)
    if callable(lr):

        def negated_schedule(count: Numeric) -> Numeric:
            return -lr(count)

        return scale_by_schedule(negated_schedule)
    if isinstance(lr, torch.Tensor):
        return from_optax(_scale_by_negated(lr))
    return scale(-lr)


def _scale_by_negated(lr: torch.Tensor) -> optax_compat.GradientTransformationExtraArgs:
    """``optax_compat.scale(-lr)`` with ``-lr`` formed at each update (the same empty state)."""

    @bb.supports_inplace
    @bb.elementwise
    def update_fn(updates: Updates, state: OptState, params: Params | None = None, *,
                  inplace: bool = False, **extra_args: Any) -> tuple[Updates, OptState]:
        del extra_args
        return optax_compat.scale(-lr).update(updates, state, params, inplace=inplace)

    return optax_compat.GradientTransformationExtraArgs(optax_compat.init_empty_state,
                                                        update_fn)


def _step_count(state: OptState) -> torch.Tensor | None:
    """The step count held in ``state`` (its first 0-d integer tensor), if it holds one."""
    for leaf in tree_math.leaves(state):
        if isinstance(leaf, torch.Tensor) and not leaf.is_floating_point() and leaf.ndim == 0:
            return leaf
    return None


def tag_alias_steps(name: str, tx: GradientTransformation) -> GradientTransformation:
    """Tags the updates of differentiable steps for :func:`torchopt_fn.visual.make_dot`.

    When ``update`` runs with ``inplace=False`` under grad mode and its updates are part of an
    autograd graph, they are tagged ``"<name> step <count>"`` (see
    :func:`torchopt_fn._graph_tags.tag_optimizer_step`), so the visualizer can draw the step as
    one node. The step number is the state's count tensor, read only when the graph is drawn.
    """
    return _keeping_chain_type(tx, from_optax(_tagged(name, tx)))


def _tagged(name: str, tx: GradientTransformation) -> optax_compat.GradientTransformationExtraArgs:
    """``tx`` as an ``optax_compat`` transformation whose steps are tagged (see
    :func:`tag_alias_steps`)."""
    steps = to_optax(tx)

    @bb.elementwise_if(steps)
    @bb.supports_inplace
    def update_fn(updates: Updates, state: OptState, params: Params | None = None, *,
                  inplace: bool = False, **extra_args: Any) -> tuple[Updates, OptState]:
        del extra_args
        new_updates, new_state = steps.update(updates, state, params, inplace=inplace)
        if not inplace and torch.is_grad_enabled() and any(
                isinstance(u, torch.Tensor) and u.grad_fn is not None
                for u in tree_math.leaves(new_updates)):
            tag_optimizer_step(new_updates, (params, updates), f"{name} step",
                               step=_step_count(new_state), state=state)
        return new_updates, new_state

    return optax_compat.GradientTransformationExtraArgs(tx.init, update_fn)


def _keeping_chain_type(tx: GradientTransformation,
                        wrapped: GradientTransformation) -> GradientTransformation:
    """``wrapped`` (``tx`` with a new ``update``) as a chain when ``tx`` is one.

    TorchOpt's aliases are chains; the type and the chained transformations are kept (a further
    chain splices those in, without the wrapper).
    """
    if not isinstance(tx, ChainedGradientTransformation):
        return wrapped
    chained = tuple.__new__(ChainedGradientTransformation, wrapped)
    chained.transformations = tx.transformations
    return chained


def on_adam_engine(name: str, tx: ChainedGradientTransformation,
                   direction: GradientTransformation, hp: adam_engine.AdamHyperParams,
                   terms: adam_engine.AliasTerms) -> GradientTransformation:
    """``tx``, an Adam alias's chain with Adam's ``direction`` among its transformations, with
    its steps tagged ``name`` (:func:`tag_alias_steps`) and on the Adam engine
    (``adam_engine.adam_alias``): the whole alias on PyTorch's fused kernel when it applies
    (and ``terms.fused_kernel``), and the whole in-place step
    (:func:`optax_compat.inplace_step`, used by :class:`torchopt_fn.Optimizer`)."""
    adam_index = next(index for index, inner in enumerate(tx.transformations)
                      if inner is direction)
    return _keeping_chain_type(tx, from_optax(adam_engine.adam_alias(hp, terms, _tagged(name, tx),
                                                                    adam_index)))
