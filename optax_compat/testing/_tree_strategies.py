"""Hypothesis strategies for pytrees of tensors: parameters, gradients, any tree a transform sees.

Trees are built top-down so that hypothesis shrinks a failing example towards fewer leaves,
shallower nesting, smaller shapes and simpler values (a single 0-d leaf holding ``0.0`` is the
simplest tree of all).
"""

from __future__ import annotations

import collections
import functools
import string
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from optax_compat._runtime import tree_math
from optax_compat.testing._data import resolve_device

CONTAINER_KINDS = ("dict", "list", "tuple", "namedtuple")
DEFAULT_DTYPES = (torch.float32, torch.float64)
_KEYS = tuple(string.ascii_lowercase)
_MAX_CHILDREN = 4

# Hypothesis draws the values in numpy; dtypes numpy lacks are drawn wider and rounded.
_NUMPY_WIDTH = {torch.float16: 16, torch.bfloat16: 32, torch.float32: 32, torch.float64: 64}


@functools.cache
def record_type(num_fields: int) -> type:
    """A NamedTuple class with fields ``f0, f1, ...`` (one class per arity, so trees compare)."""
    fields = [f"f{i}" for i in range(num_fields)]
    return collections.namedtuple(f"Record{num_fields}", fields, module=__name__)


def _representable_inside(low: float, high: float, dtype: np.dtype) -> tuple[float, float]:
    """The bounds rounded inwards to values of ``dtype`` (hypothesis wants them exact)."""
    low_rounded, high_rounded = dtype.type(low), dtype.type(high)
    if low_rounded < low:
        low_rounded = np.nextafter(low_rounded, dtype.type(np.inf))
    if high_rounded > high:
        high_rounded = np.nextafter(high_rounded, dtype.type(-np.inf))
    return float(low_rounded), float(high_rounded)


def _value_elements(dtype: torch.dtype, min_value: float, max_value: float, allow_nan: bool,
                    allow_infinity: bool, allow_subnormal: bool,
                    min_magnitude: float) -> st.SearchStrategy[float]:
    width = _NUMPY_WIDTH[dtype]
    low, high = _representable_inside(min_value, max_value, np.dtype(f"float{width}"))
    finite = st.floats(low, high, width=width, allow_subnormal=allow_subnormal)
    if min_magnitude > 0:
        finite = finite.map(lambda value: 0.0 if abs(value) < min_magnitude else value)
    specials = [np.nan] * allow_nan + [np.inf, -np.inf] * allow_infinity
    return st.one_of(finite, st.sampled_from(specials)) if specials else finite


def tensors(shape: Sequence[int], dtype: torch.dtype = torch.float32, *,
            min_value: float = -10.0, max_value: float = 10.0, allow_nan: bool = False,
            allow_infinity: bool = False, allow_subnormal: bool = False,
            min_magnitude: float = 0.0,
            device: str | torch.device | None = None) -> st.SearchStrategy[torch.Tensor]:
    """A strategy for tensors of one shape and dtype with values in ``[min_value, max_value]``.

    Args:
      shape: the tensor's shape (``()`` for a 0-d tensor; a zero makes it empty).
      dtype: a floating dtype (float16, bfloat16, float32 or float64).
      min_value: smallest finite value.
      max_value: largest finite value.
      allow_nan: also draw NaN.
      allow_infinity: also draw ``+inf`` and ``-inf``.
      allow_subnormal: also draw subnormal numbers.
      min_magnitude: draw nonzero values smaller than this in magnitude as 0. Comparisons
        with JAX want e.g. ``1e-6``: XLA on CPU flushes subnormal results (such as the
        product of two tiny values) to zero, PyTorch keeps them.
      device: where the tensor is created (``None``: where factory functions create them,
        torch's default device).

    Returns:
      A hypothesis strategy of tensors.
    """
    if dtype not in _NUMPY_WIDTH:
        raise ValueError(f"Unsupported dtype {dtype}; use one of {sorted(map(str, _NUMPY_WIDTH))}.")
    elements = _value_elements(dtype, min_value, max_value, allow_nan, allow_infinity,
                               allow_subnormal, min_magnitude)
    numpy_dtype = np.dtype(f"float{_NUMPY_WIDTH[dtype]}")
    arrays = hnp.arrays(numpy_dtype, tuple(shape), elements=elements)
    return arrays.map(lambda array: torch.from_numpy(array.copy()).to(
        device=resolve_device(device), dtype=dtype))


class _TreeBuilder:
    """Draws one tree top-down within ``[min_leaves, max_leaves]`` tensor leaves.

    A node draws whether it is a container (``False``, the simplest choice, makes a leaf) and a
    container draws "one more child?" before each child, so the shrinker drops a child by
    deleting its span of choices without disturbing the rest of the tree. While the tree has
    fewer than ``min_leaves`` leaves, containers keep adding children and the last child a
    container can hold nests, so at most ``3 * depth + 1`` leaves can be required.
    """

    def __init__(self, draw: Any, leaf: Any, kinds: Sequence[str], allow_none: bool,
                 min_leaves: int, max_leaves: int) -> None:
        self.draw, self.leaf, self.kinds, self.allow_none = draw, leaf, kinds, allow_none
        self.min_leaves, self.max_leaves, self.num_leaves = min_leaves, max_leaves, 0

    def tree(self, max_depth: int) -> Any:
        if self.max_leaves == 0:
            return self._nest(max_depth)
        return self._subtree(max_depth, last_chance=True)

    def _subtree(self, depth: int, last_chance: bool) -> Any:
        must_nest = last_chance and self.min_leaves - self.num_leaves > 1
        if depth > 0 and (must_nest or self.draw(st.booleans())):
            return self._nest(depth)
        self.num_leaves += 1
        return self.leaf()

    def _nest(self, depth: int) -> Any:
        children: list[Any] = []
        while len(children) < _MAX_CHILDREN and self.num_leaves < self.max_leaves and (
                self.num_leaves < self.min_leaves or self.draw(st.booleans())):
            children.append(self._subtree(depth - 1,
                                          last_chance=len(children) == _MAX_CHILDREN - 1))
        if self.allow_none and self.draw(st.booleans()):
            children.insert(self.draw(st.integers(0, len(children))), None)
        return self._container(children)

    def _container(self, children: list[Any]) -> Any:
        kind = self.draw(st.sampled_from(self.kinds))
        if kind == "list":
            return children
        if kind == "tuple":
            return tuple(children)
        if kind == "namedtuple":
            return record_type(len(children))(*children)
        keys = self.draw(st.lists(st.sampled_from(_KEYS), min_size=len(children),
                                  max_size=len(children), unique=True))
        return dict(zip(keys, children, strict=True))


@st.composite
def pytrees(draw: Any, *, min_leaves: int = 1, max_leaves: int = 5, max_depth: int = 3,
            shapes: st.SearchStrategy[tuple[int, ...]] | None = None, max_dims: int = 2,
            max_side: int = 3, allow_empty: bool = False,
            dtypes: Sequence[torch.dtype] = DEFAULT_DTYPES, mixed_dtypes: bool = False,
            min_value: float = -10.0, max_value: float = 10.0, allow_nan: bool = False,
            allow_infinity: bool = False, allow_subnormal: bool = False,
            min_magnitude: float = 0.0, kinds: Sequence[str] = CONTAINER_KINDS,
            allow_none: bool = True,
            device: str | torch.device | None = None) -> Any:
    """A strategy for nested dict/list/tuple/NamedTuple trees of tensors.

    Args:
      min_leaves: fewest tensor leaves (0 allows trees such as ``{}`` or ``[None]``); at most
        ``3 * max_depth + 1``.
      max_leaves: most tensor leaves.
      max_depth: most levels of containers above a leaf (0 gives a bare tensor); containers
        hold up to four children.
      shapes: a strategy for leaf shapes; by default shapes of up to ``max_dims`` dimensions of
        size up to ``max_side``, 0-d included.
      max_dims: most dimensions per leaf (default ``shapes`` only).
      max_side: largest size of a dimension (default ``shapes`` only).
      allow_empty: allow dimensions of size 0 (default ``shapes`` only).
      dtypes: the floating dtypes to draw from (bfloat16 and float16 are opt-in).
      mixed_dtypes: draw a dtype per leaf instead of one for the whole tree.
      min_value: smallest finite leaf value.
      max_value: largest finite leaf value.
      allow_nan: also draw NaN values.
      allow_infinity: also draw infinite values.
      allow_subnormal: also draw subnormal values.
      min_magnitude: draw nonzero values smaller than this in magnitude as 0 (see
        :func:`tensors`).
      kinds: container kinds among ``"dict"``, ``"list"``, ``"tuple"``, ``"namedtuple"``.
      allow_none: sometimes add a ``None`` child (an empty subtree, as in Optax).
      device: where leaves are created (``None``: torch's default device).

    Returns:
      A hypothesis strategy of pytrees.
    """
    unknown = set(kinds) - set(CONTAINER_KINDS)
    if unknown or not kinds:
        raise ValueError(f"kinds must be a non-empty subset of {CONTAINER_KINDS}, got {kinds}.")
    if not 0 <= min_leaves <= max_leaves:
        raise ValueError(f"Need 0 <= min_leaves <= max_leaves, got {min_leaves}, {max_leaves}.")
    if min_leaves > 3 * max_depth + 1 or (max_depth == 0 and max_leaves == 0):
        raise ValueError(f"max_depth={max_depth} cannot hold min_leaves={min_leaves} leaves "
                         f"(at most 3 * max_depth + 1, and a bare leaf at depth 0).")
    shape_strategy = shapes if shapes is not None else hnp.array_shapes(
        min_dims=0, max_dims=max_dims, min_side=0 if allow_empty else 1, max_side=max_side)
    dtype_strategy = st.sampled_from(list(dtypes))
    tree_dtype = None if mixed_dtypes else draw(dtype_strategy)

    def leaf() -> torch.Tensor:
        dtype = tree_dtype if tree_dtype is not None else draw(dtype_strategy)
        return draw(tensors(draw(shape_strategy), dtype, min_value=min_value,
                            max_value=max_value, allow_nan=allow_nan,
                            allow_infinity=allow_infinity, allow_subnormal=allow_subnormal,
                            min_magnitude=min_magnitude, device=device))

    return _TreeBuilder(draw, leaf, list(kinds), allow_none, min_leaves, max_leaves).tree(
        max_depth)


@st.composite
def matching_trees(draw: Any, tree: Any, *, min_value: float = -10.0, max_value: float = 10.0,
                   allow_nan: bool = False, allow_infinity: bool = False,
                   allow_subnormal: bool = False, min_magnitude: float = 0.0) -> Any:
    """A strategy for trees with the structure, shapes, dtypes and devices of ``tree``.

    Typical use: gradients (or a second set of parameters) for drawn parameters.

    Args:
      tree: the tree to match.
      min_value: smallest finite leaf value.
      max_value: largest finite leaf value.
      allow_nan: also draw NaN values.
      allow_infinity: also draw infinite values.
      allow_subnormal: also draw subnormal values.
      min_magnitude: draw nonzero values smaller than this in magnitude as 0 (see
        :func:`tensors`).

    Returns:
      A hypothesis strategy of trees.
    """
    leaves, spec = tree_math.flatten(tree)
    drawn = [draw(tensors(leaf.shape, leaf.dtype, min_value=min_value, max_value=max_value,
                          allow_nan=allow_nan, allow_infinity=allow_infinity,
                          allow_subnormal=allow_subnormal, min_magnitude=min_magnitude,
                          device=leaf.device))
             for leaf in leaves]
    return tree_math.unflatten(spec, drawn)


@st.composite
def params_and_grads(draw: Any, steps: int = 1, **pytree_kwargs: Any) -> tuple[Any, list[Any]]:
    """A strategy for ``(params, [grads_step_0, ...])``: a tree and ``steps`` matching trees.

    Args:
      steps: how many gradient trees to draw.
      **pytree_kwargs: forwarded to :func:`pytrees` (value-range arguments also apply to the
        gradients).

    Returns:
      A hypothesis strategy of ``(params, grads)`` pairs.
    """
    params = draw(pytrees(**pytree_kwargs))
    value_kwargs = {name: pytree_kwargs[name] for name in (
        "min_value", "max_value", "allow_nan", "allow_infinity", "allow_subnormal",
        "min_magnitude")
        if name in pytree_kwargs}
    grads = [draw(matching_trees(params, **value_kwargs)) for _ in range(steps)]
    return params, grads
