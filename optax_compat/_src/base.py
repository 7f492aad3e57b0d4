"""Base types of gradient transformations (mirrors ``optax/_src/base.py``).

A gradient transformation is a pair of pure functions: ``init(params) -> state`` and
``update(updates, state, params=None) -> (updates, state)``. Composition, differentiation
through updates (meta-learning) and checkpointing all follow from that purity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Optional, Protocol, Union, runtime_checkable

import torch

from optax_compat._runtime import flat_safe, inplace, none_gradients, tree_math
from optax_compat._runtime.state import NO_PARAMS_MSG as NO_PARAMS_MSG

PyTree = Any
Shape = Sequence[int]
PRNGKey = Union[int, torch.Generator]
ArrayTree = Union[torch.Tensor, Iterable["ArrayTree"], Mapping[Any, "ArrayTree"]]
OptState = ArrayTree
Params = ArrayTree
Updates = Params
Schedule = Callable[[Union[int, torch.Tensor]], Union[float, torch.Tensor]]
ScheduleState = Any
ScalarOrSchedule = Union[float, torch.Tensor, Schedule]


@runtime_checkable
class StatefulSchedule(Protocol):
    """A schedule that carries its own state, advanced by ``update`` (Optax's protocol)."""

    def init(self) -> ScheduleState:
        """Returns the initial schedule state."""

    def update(self, state: ScheduleState, **extra_args: Any) -> ScheduleState:
        """Returns the next schedule state."""

    def __call__(self, state: ScheduleState, **extra_args: Any) -> Union[float, torch.Tensor]:
        """Returns the schedule's value in ``state``."""


class TransformInitFn(Protocol):
    """``init(params) -> state``: builds the initial state of a transformation."""

    def __call__(self, params: Params) -> OptState:
        """Returns the initial state for ``params``."""


class TransformUpdateFn(Protocol):
    """``update(updates, state, params=None) -> (updates, state)``."""

    def __call__(self, updates: Updates, state: OptState,
                 params: Optional[Params] = None) -> tuple[Updates, OptState]:
        """Returns the transformed updates and the new state."""


class TransformUpdateExtraArgsFn(Protocol):
    """An update function that also accepts keyword-only extra arguments (``value``, ``grad``)."""

    def __call__(self, updates: Updates, state: OptState, params: Optional[Params] = None,
                 **extra_args: Any) -> tuple[Updates, OptState]:
        """Returns the transformed updates and the new state."""


class _InitUpdatePair(NamedTuple):
    init: TransformInitFn
    update: TransformUpdateFn


class GradientTransformation(_InitUpdatePair):
    """A pair of pure functions ``(init, update)`` that transforms gradients.

    ``update`` is wrapped at construction with the ``None``-gradient semantics of
    :mod:`optax_compat._runtime.none_gradients` (a PyTorch extension: a ``None``
    gradient gives a ``None`` update and leaves that parameter's state as it was).

    Attributes:
      init: builds the initial state from example parameters.
      update: maps ``(updates, state, params)`` to ``(new_updates, new_state)`` without
        mutating any of its inputs.
    """

    __slots__ = ()

    def __new__(cls, init: TransformInitFn, update: TransformUpdateFn) -> GradientTransformation:
        """Builds the pair; ``update`` gets the ``None``-gradient semantics."""
        return super().__new__(cls, init, none_gradients.tolerates_none(update))

    @classmethod
    def _make(cls, iterable: Iterable[Any]) -> GradientTransformation:
        return cls(*iterable)


class GradientTransformationExtraArgs(GradientTransformation):
    """A :class:`GradientTransformation` whose ``update`` accepts extra keyword arguments.

    The extra argument ``inplace`` reaches ``update`` only if ``update`` declares that it
    supports it (see :mod:`optax_compat._runtime.inplace`); otherwise it is dropped
    at the entry, so a wrapper that keeps an old state never passes the request on.
    """

    __slots__ = ()

    update: TransformUpdateExtraArgsFn

    def __new__(cls, init: TransformInitFn,
                update: TransformUpdateExtraArgsFn) -> GradientTransformationExtraArgs:
        """Builds the pair, guarding ``update`` against in-place requests it does not declare."""
        return super().__new__(cls, init, inplace.without_inplace_request(update))


class EmptyState(NamedTuple):
    """The state of a transformation that keeps none."""


def init_empty_state(params: Params) -> EmptyState:
    """An ``init`` function for stateless transformations.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> optax.init_empty_state({"w": torch.zeros(2)})
      EmptyState()
    """
    tree_math.check_is_tree(params)
    return EmptyState()


def identity() -> GradientTransformation:
    """Leaves updates unchanged.

    Returns:
      A stateless :class:`GradientTransformation`.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.identity()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.5000, -1.0000])
    """

    @flat_safe.elementwise
    def update_fn(updates: Updates, state: OptState, params: Optional[Params] = None):
        del params
        return updates, state

    return GradientTransformation(init_empty_state, update_fn)


def set_to_zero() -> GradientTransformation:
    """Maps updates to zeros, so that applying them leaves parameters unchanged (freezing).

    Returns:
      A stateless :class:`GradientTransformation`.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.set_to_zero()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([0., 0.])
    """

    @flat_safe.elementwise
    def update_fn(updates: Updates, state: OptState, params: Optional[Params] = None):
        del params
        return tree_math.tree_map(torch.zeros_like, updates), state

    return GradientTransformation(init_empty_state, update_fn)


def stateless(f: Callable[[Updates, Optional[Params]], Updates]) -> GradientTransformation:
    """Builds a stateless transformation from ``f(updates, params) -> updates``.

    Args:
      f: maps the whole tree of updates (and parameters, possibly ``None``) to new updates.

    Returns:
      A :class:`GradientTransformation` with an :class:`EmptyState`.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.stateless(lambda updates, params: optax.tree.scale(-0.1, updates))
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state)
      >>> updates["w"]
      tensor([-0.0500,  0.1000])
    """

    def update_fn(updates: Updates, state: OptState, params: Optional[Params] = None):
        del state
        return f(updates, params), EmptyState()

    return GradientTransformation(init_empty_state, update_fn)


def stateless_with_tree_map(
    f: Callable[[torch.Tensor, Optional[torch.Tensor]], torch.Tensor],
) -> GradientTransformation:
    """Builds a stateless transformation from ``f(update_leaf, param_leaf) -> update_leaf``.

    Args:
      f: applied leaf by leaf; its second argument is ``None`` when no params are given.

    Returns:
      A :class:`GradientTransformation` with an :class:`EmptyState`.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.stateless_with_tree_map(lambda g, p: g + 0.1 * p)
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]  # weight decay written by hand
      tensor([ 0.6000, -1.2000])
    """

    def update_fn(updates: Updates, state: OptState, params: Optional[Params] = None):
        del state
        if params is None:
            return tree_math.tree_map(lambda u: f(u, None), updates), EmptyState()
        return tree_math.tree_map(f, updates, params), EmptyState()

    return GradientTransformation(init_empty_state, update_fn)


def with_extra_args_support(tx: GradientTransformation) -> GradientTransformationExtraArgs:
    """Wraps ``tx`` so that its ``update`` accepts (and ignores) extra keyword arguments.

    Args:
      tx: any gradient transformation.

    Returns:
      ``tx`` itself if it already supports extra args, else a wrapper that drops them.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> tx = optax.with_extra_args_support(optax.scale(-0.1))
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.ones(2)}, state, loss=1.0)  # ignored
      >>> updates["w"]
      tensor([-0.1000, -0.1000])
    """
    if isinstance(tx, GradientTransformationExtraArgs):
        return tx

    @flat_safe.elementwise_if(tx)
    def update(updates: Updates, state: OptState, params: Optional[Params] = None,
               **extra_args: Any):
        del extra_args
        return tx.update(updates, state, params)

    return GradientTransformationExtraArgs(tx.init, update)


# The states of stateless transformations, under the names Optax gives them.
AdaptiveGradClipState = EmptyState
AddDecayedWeightsState = EmptyState
ClipByGlobalNormState = EmptyState
ClipState = EmptyState
NonNegativeParamsState = EmptyState
ScaleByTrustRatioState = EmptyState
ScaleState = EmptyState
