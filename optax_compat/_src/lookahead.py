"""The lookahead wrapper (mirrors ``optax/_src/lookahead.py``).

References:
  Zhang et al., `Lookahead Optimizer: k steps forward, 1 step back
  <https://arxiv.org/abs/1907.08610>`_, 2019.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math
from optax_compat._src import base

_LOGGER = logging.getLogger(__name__)


class LookaheadState(NamedTuple):
    """State of :func:`lookahead`.

    Attributes:
      fast_state: the state of the fast optimizer.
      steps_since_sync: fast steps taken since the slow and fast params were synchronised.
    """

    fast_state: base.OptState
    steps_since_sync: torch.Tensor


class LookaheadParams(NamedTuple):
    """The fast params (to compute gradients with) and the slow params (for evaluation).

    References:
      Zhang et al., `Lookahead Optimizer: k steps forward, 1 step back
      <https://arxiv.org/abs/1907.08610>`_, 2019.
    """

    fast: base.Params
    slow: base.Params

    @classmethod
    def init_synced(cls, params: base.Params) -> LookaheadParams:
        """A pair of synchronised parameters, both ``params``."""
        return cls(slow=params, fast=params)


def _lookahead_updates(updates: base.Updates, sync_next: torch.Tensor,
                       params: LookaheadParams,
                       slow_step_size: float | torch.Tensor) -> LookaheadParams:
    """The updates of the fast and slow params for one lookahead step.

    On a synchronising step the slow params move ``slow_step_size`` of the way to where the
    fast params land, and the fast params are reset onto the new slow params.
    """
    fast, spec = tree_math.flatten(params.fast)
    fast_updates = tree_math.leaves_like(updates, spec, "updates", params.fast)
    slow = tree_math.leaves_like(params.slow, spec, "params.slow", params.fast)
    # Multiplying by the 0/1 flag, as Optax does, keeps a non-finite difference non-finite.
    last_difference = tree_math.sub(tree_math.add(fast, fast_updates), slow)
    slow_updates = tree_math.mul(tree_math.mul(last_difference, slow_step_size), sync_next)
    fast_updates = tree_math.sub(
        fast_updates, tree_math.mul(tree_math.mul(last_difference, 1 - slow_step_size),
                                    sync_next))
    return LookaheadParams(fast=tree_math.unflatten(spec, fast_updates),
                           slow=tree_math.unflatten(spec, slow_updates))


def lookahead(
    fast_optimizer: base.GradientTransformation,
    sync_period: int,
    slow_step_size: float | torch.Tensor,
    reset_state: bool = False,
) -> base.GradientTransformation:
    """Lookahead: ``sync_period`` fast steps forward, then one slow step back.

    The params are a :class:`LookaheadParams`; gradients must be computed at ``params.fast``
    and the returned updates applied unmodified to the whole pair.

    Args:
      fast_optimizer: the optimizer of the inner loop.
      sync_period: fast steps between synchronisations, at least 1.
      slow_step_size: step size of the slow params towards the fast ones.
      reset_state: re-initialise the fast optimizer's state after each synchronisation.

    Returns:
      A :class:`GradientTransformation` with a :class:`LookaheadState`.

    Raises:
      ValueError: if ``sync_period`` is below 1.

    References:
      Zhang et al., `Lookahead Optimizer: k steps forward, 1 step back
      <https://arxiv.org/abs/1907.08610>`_, 2019.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> opt = optax.lookahead(optax.sgd(0.1), sync_period=2, slow_step_size=0.5)
      >>> params = optax.LookaheadParams.init_synced(params)
      >>> state = opt.init(params)
      >>> for _ in range(2):
      ...     grads = {"w": 2 * params.fast["w"]}  # gradient at the fast weights
      ...     updates, state = opt.update(grads, state, params)
      ...     params = optax.apply_updates(params, updates)
      >>> params.slow["w"]  # halfway to the fast weights after two fast steps
      tensor([ 0.8200, -1.6400])
    """
    if sync_period < 1:
        raise ValueError("Synchronization period must be >= 1.")

    def init_fn(params: base.Params) -> LookaheadState:
        fast_params = getattr(params, "fast", None)
        if fast_params is None:
            _LOGGER.warning("`params` has no attribute `fast`. Continuing by assuming that "
                            "only fast parameters were passed to lookahead init.")
            fast_params = params
        return LookaheadState(fast_state=fast_optimizer.init(fast_params),
                              steps_since_sync=torch.zeros([], dtype=torch.int32))

    def update_fn(updates: base.Updates, state: LookaheadState,
                  params: LookaheadParams | None = None) -> tuple[LookaheadParams,
                                                                   LookaheadState]:
        if params is None:
            raise ValueError(bb.NO_PARAMS_MSG + " (lookahead needs the LookaheadParams)")
        updates, fast_state = fast_optimizer.update(updates, state.fast_state, params.fast)
        sync_next = state.steps_since_sync == (sync_period - 1)
        updates = _lookahead_updates(updates, sync_next, params, slow_step_size)
        if reset_state:
            initial_state = fast_optimizer.init(params.fast)
            keep = torch.logical_not(sync_next)
            fast_state = tree_math.tree_map(
                lambda current, initial: current * keep + initial * sync_next,
                fast_state, initial_state)
        steps_since_sync = torch.remainder(state.steps_since_sync + 1, sync_period)
        return updates, LookaheadState(fast_state, steps_since_sync)

    return base.GradientTransformation(init_fn, update_fn)
