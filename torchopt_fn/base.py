"""TorchOpt's gradient-transformation types, on top of :mod:`optax_compat`'s.

TorchOpt's ``update`` takes ``params`` and ``inplace`` as keywords:
``update(updates, state, *, params=None, inplace=True)``. The transformations themselves are
``optax_compat`` ones; :func:`from_optax` adapts the calling convention, forwarding ``inplace``
as the extra argument ``optax_compat``'s hot transforms accept, and keeps the transformation it
adapts: :func:`to_optax` gives it back instead of adapting the adapter, so a chain of TorchOpt
transformations is one ``optax_compat`` chain behind one adapter, and
:class:`torchopt_fn.Optimizer` steps the ``optax_compat`` transformation itself.
"""

from __future__ import annotations

import weakref
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Protocol

import optax_compat
from optax_compat import EmptyState, inplace_step
from optax_compat import _runtime as bb
from optax_compat import chain as optax_chain
from torchopt_fn._tree_aliases import OptState, Params, Updates

__all__ = [
    "EmptyState",
    "UninitializedState",
    "GradientTransformation",
    "ChainedGradientTransformation",
    "identity",
]

# The ``optax_compat`` transformation behind each :func:`from_optax` adapter's ``update``
# (the very function object: a user's wrapper of it is another one).
_ADAPTED: weakref.WeakKeyDictionary[Any, optax_compat.GradientTransformationExtraArgs] = (
    weakref.WeakKeyDictionary())


class UninitializedState(NamedTuple):
    """The state of an optimizer whose transformation has not been initialized yet."""


class TransformInitFn(Protocol):
    """``init(params) -> state``: builds the initial state of a transformation."""

    @abstractmethod
    def __call__(self, params: Params) -> OptState:
        """Returns the initial state for ``params``."""


class TransformUpdateFn(Protocol):
    """``update(updates, state, *, params=None, inplace=True) -> (updates, state)``.

    With ``inplace=True`` the transformation may reuse the state buffers and write into the
    incoming ``updates``; with ``inplace=False`` it is pure, hence differentiable.
    """

    @abstractmethod
    def __call__(self, updates: Updates, state: OptState, *, params: Params | None = None,
                 inplace: bool = True) -> tuple[Updates, OptState]:
        """Returns the transformed updates and the new state."""


class _InitUpdatePair(NamedTuple):
    init: TransformInitFn
    update: TransformUpdateFn


class GradientTransformation(_InitUpdatePair):
    """A pair of functions ``(init, update)`` transforming gradients, TorchOpt's calling convention.

    A ``None`` gradient gives a ``None`` update and leaves that parameter's state untouched, in
    every transformation (``update`` is wrapped at construction, see
    :mod:`optax_compat._runtime.none_gradients`).

    Attributes:
      init: builds the initial state from example parameters.
      update: ``update(updates, state, *, params=None, inplace=True) -> (updates, state)``.
    """

    __slots__ = ()

    def __new__(cls, init: TransformInitFn, update: TransformUpdateFn) -> GradientTransformation:
        """Builds the pair; ``update`` gets the ``None``-gradient semantics."""
        return super().__new__(cls, init, bb.tolerates_none(update))

    @classmethod
    def _make(cls, iterable: Iterable[Any]) -> GradientTransformation:
        return cls(*iterable)

    def chain(self, next: GradientTransformation) -> ChainedGradientTransformation:
        """Returns the transformation applying ``self`` then ``next``."""
        return ChainedGradientTransformation(self, next)


class ChainedGradientTransformation(GradientTransformation):
    """Transformations applied one after the other; nested chains are flattened.

    The state is the tuple of the inner states. The composition itself is
    :func:`optax_compat.chain`, which forwards ``inplace`` to every inner transformation.
    """

    transformations: tuple[GradientTransformation, ...]

    def __new__(cls, *transformations: GradientTransformation) -> ChainedGradientTransformation:
        """Chains ``transformations``, dropping identities and splicing nested chains."""
        flat = tuple(
            inner
            for t in transformations
            for inner in (t.transformations if isinstance(t, ChainedGradientTransformation)
                          else () if isinstance(t, IdentityGradientTransformation) else (t,)))
        if not flat:
            flat = (IdentityGradientTransformation(),)
        init_fn, update_fn = chain_optax_compat(flat)
        instance = super().__new__(cls, init_fn, update_fn)
        instance.transformations = flat
        return instance

    def __repr__(self) -> str:
        """Lists the chained transformations."""
        inner = ",\n    ".join(repr(t) for t in self.transformations)
        return f"{type(self).__name__}(\n    {inner},\n)"

    def __eq__(self, other: object) -> bool:
        """Chains are equal when they chain equal transformations."""
        if isinstance(other, ChainedGradientTransformation):
            return self.transformations == other.transformations
        if isinstance(other, GradientTransformation):
            return self.transformations == (other,)
        return False

    def __hash__(self) -> int:
        """Hash of the chained transformations."""
        return hash(self.transformations)

    def __reduce__(self) -> tuple[type, tuple[GradientTransformation, ...]]:
        """Pickles as the list of chained transformations."""
        return ChainedGradientTransformation, self.transformations


class IdentityGradientTransformation(GradientTransformation):
    """The transformation that leaves updates unchanged."""

    def __new__(cls) -> IdentityGradientTransformation:
        """Builds the identity transformation."""
        return super().__new__(cls, cls.init_fn, cls.update_fn)

    @staticmethod
    def init_fn(params: Params) -> OptState:
        """Returns an empty state."""
        del params
        return EmptyState()

    @staticmethod
    def update_fn(updates: Updates, state: OptState, *, params: Params | None = None,
                  inplace: bool = True) -> tuple[Updates, OptState]:
        """Returns the updates unchanged."""
        del params, inplace
        return updates, state


def identity() -> IdentityGradientTransformation:
    """The stateless transformation that leaves updates untouched.

    Returns:
      An :class:`IdentityGradientTransformation`.
    """
    return IdentityGradientTransformation()


def from_optax(tx: optax_compat.GradientTransformation) -> GradientTransformation:
    """Presents an ``optax_compat`` transformation with TorchOpt's ``update`` signature.

    Args:
      tx: any ``optax_compat`` gradient transformation.

    Returns:
      A :class:`GradientTransformation` whose ``update`` forwards ``params`` and ``inplace`` (as
      an extra argument, ignored by transformations without a fast path); :func:`to_optax`
      returns ``tx`` from it.
    """
    extra_args_tx = optax_compat.with_extra_args_support(tx)

    def update_fn(updates: Updates, state: OptState, *, params: Params | None = None,
                  inplace: bool = True) -> tuple[Updates, OptState]:
        return extra_args_tx.update(updates, state, params, inplace=inplace)

    bb.elementwise_if(extra_args_tx)(update_fn)  # the fused layouts carry over
    whole_step = inplace_step(tx)
    if whole_step is not None:  # same state: the whole in-place step carries over
        bb.declare(update_fn, whole_step=whole_step)
    adapter = GradientTransformation(tx.init, update_fn)
    _ADAPTED[adapter.update] = extra_args_tx
    return adapter


def _adapted(tx: GradientTransformation) -> optax_compat.GradientTransformationExtraArgs | None:
    """The ``optax_compat`` transformation whose :func:`from_optax` adapter is ``tx.update``."""
    return _ADAPTED.get(tx.update)


def to_optax(tx: GradientTransformation) -> optax_compat.GradientTransformationExtraArgs:
    """Presents a TorchOpt-style transformation with ``optax_compat``'s ``update`` signature.

    A transformation made by :func:`from_optax` gives back the ``optax_compat`` one it adapts
    (with ``tx.init``); any other is adapted: the extra argument ``inplace`` is passed through
    (default ``False``, ``optax_compat``'s convention), other extra arguments are ignored.
    """
    adapted = _adapted(tx)
    if adapted is not None:
        return (adapted if adapted.init is tx.init
                else optax_compat.GradientTransformationExtraArgs(tx.init, adapted.update))

    @bb.elementwise_if(tx)
    @bb.supports_inplace
    def update_fn(updates: Updates, state: OptState, params: Params | None = None,
                  **extra_args: Any) -> tuple[Updates, OptState]:
        return tx.update(updates, state, params=params, inplace=extra_args.get("inplace", False))

    return optax_compat.GradientTransformationExtraArgs(tx.init, update_fn)


def chain_optax_compat(transformations: Sequence[GradientTransformation]) -> GradientTransformation:
    """The ``(init, update)`` pair chaining TorchOpt-style transformations with ``optax_compat``:
    one :func:`optax_compat.chain` of the ``optax_compat`` transformations behind one adapter."""
    return from_optax(optax_chain(*(to_optax(t) for t in transformations)))
