"""TorchOpt's gradient-transformation types, on top of :mod:`optax_compat`'s.

TorchOpt's ``update`` takes ``params`` and ``inplace`` as keywords:
``update(updates, state, *, params=None, inplace=True)``. The transformations themselves are
``optax_compat`` ones; :func:`torchopt_fn.transform.utils.from_optax` adapts the calling
convention, forwarding ``inplace`` as the extra argument ``optax_compat``'s hot transforms accept.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from optax_compat._src import building_blocks as bb
from optax_compat._src.base import EmptyState

if TYPE_CHECKING:
    from torchopt_fn.typing import OptState, Params, Updates

__all__ = [
    "EmptyState",
    "UninitializedState",
    "GradientTransformation",
    "ChainedGradientTransformation",
    "identity",
]


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
    :mod:`optax_compat._src.building_blocks.none_gradients`).

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
        # Imported here: ``transform.utils`` builds on this module's types.
        from torchopt_fn.transform.utils import chain_optax_compat

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
