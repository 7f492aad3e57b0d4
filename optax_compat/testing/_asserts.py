"""Tree assertions whose failure messages name the first offending path, and their tolerances.

Tolerances follow the dtype of the values compared: two leaves are compared at the tolerance
of the least precise floating dtype among them. A float32 value met inside a float64 test (JAX's
promotion makes some values float32 even with x64 on) is compared at float32 tolerance, so that
the last-bit differences of float32 ``pow``/``exp`` between CPUs do not fail the comparison; two
float64 values keep the float64 tolerance.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import optree
import torch

from optax_compat._runtime import tree_math

# Default tolerances per dtype; those of float32 and float64 are the project's Optax tolerances.
RTOL = {torch.bfloat16: 1.6e-2, torch.float16: 1e-3, torch.float32: 1e-5, torch.float64: 1e-10}
ATOL = {torch.bfloat16: 1e-5, torch.float16: 1e-5, torch.float32: 1e-6, torch.float64: 1e-12}

# A tolerance for every dtype, or one per dtype (dtypes not listed keep the default).
Tolerance = float | Mapping[torch.dtype, float] | None


def leaves_with_paths(tree: Any) -> list[tuple[str, Any]]:
    """``(path, leaf)`` pairs of ``tree``, paths written as code: ``.mu['layer'][0]``."""
    accessors, leaves, _ = optree.tree_flatten_with_accessor(
        tree, none_is_leaf=tree_math.NONE_IS_LEAF, namespace=tree_math.NAMESPACE)
    return [(accessor.codify(""), leaf) for accessor, leaf in zip(accessors, leaves, strict=True)]


def as_tensor(leaf: Any) -> torch.Tensor:
    """A torch view of a torch, numpy or JAX leaf (detached; bfloat16 JAX arrays widened)."""
    if isinstance(leaf, torch.Tensor):
        return leaf.detach()
    array = np.asarray(leaf)
    if array.dtype.kind not in "biufc":  # bfloat16 and other extension dtypes
        array = array.astype(np.float32)
    return torch.from_numpy(np.array(array))


def is_random_key(leaf: Any) -> bool:
    """Whether ``leaf`` is a ``torch.Generator`` or a JAX PRNG key (compared statistically)."""
    return isinstance(leaf, torch.Generator) or "key" in str(getattr(leaf, "dtype", ""))


def leaf_dtype(leaf: Any) -> torch.dtype | None:
    """The torch dtype of a torch, numpy or JAX leaf (JAX's bfloat16 included), else ``None``."""
    if isinstance(leaf, torch.Tensor):
        return leaf.dtype
    dtype = getattr(torch, str(getattr(leaf, "dtype", None) or np.asarray(leaf).dtype), None)
    return dtype if isinstance(dtype, torch.dtype) else None


def least_precise_dtype(*trees: Any) -> torch.dtype | None:
    """The least precise floating dtype among the leaves of ``trees`` (complex counts as its
    real part's dtype), or ``None`` when no leaf is floating."""
    dtypes = [dtype.to_real() for tree in trees for leaf in tree_math.leaves(tree)
              if not is_random_key(leaf)
              and (dtype := leaf_dtype(leaf)) is not None
              and (dtype.is_floating_point or dtype.is_complex)]
    return max(dtypes, key=lambda dtype: torch.finfo(dtype).eps, default=None)


class Tolerances(NamedTuple):
    """A relative and an absolute tolerance; ``**tolerances._asdict()`` fits
    ``torch.testing.assert_close`` and ``numpy.testing.assert_allclose``."""

    rtol: float
    atol: float


def _pick(given: Tolerance, defaults: Mapping[torch.dtype, float],
          dtype: torch.dtype | None) -> float:
    if isinstance(given, (int, float)):
        return float(given)
    if given is not None and dtype in given:
        return given[dtype]
    return defaults.get(dtype, 0.0)


def tolerance(*trees: Any, rtol: Tolerance = None, atol: Tolerance = None) -> Tolerances:
    """``(rtol, atol)`` for comparing the values in ``trees``, following their dtypes.

    The tolerance is that of the least precise floating dtype among all the leaves: float32
    (or bfloat16, float16) values get that dtype's tolerance even beside float64 ones; only
    float64 compared with float64 gets float64's. Integer and boolean values compare exactly.

    Args:
      *trees: the trees (torch, numpy or JAX leaves) whose values are compared.
      rtol: ``None`` for the defaults (float32 1e-5, float64 1e-10, float16 1e-3,
        bfloat16 1.6e-2); a number for every dtype; or ``{dtype: rtol}`` overriding the
        default of the dtypes listed, e.g. ``{torch.float32: 1e-4}`` for an algorithm that
        loses precision in float32 only.
      atol: likewise (float32 1e-6, float64 1e-12, float16 and bfloat16 1e-5).

    Returns:
      The relative and absolute tolerances.

    Example:
      >>> import torch
      >>> from optax_compat import testing
      >>> testing.tolerance(torch.zeros(2, dtype=torch.float64), torch.zeros(2))
      Tolerances(rtol=1e-05, atol=1e-06)
      >>> testing.tolerance(torch.zeros(2, dtype=torch.float64), rtol={torch.float32: 1e-4})
      Tolerances(rtol=1e-10, atol=1e-12)
    """
    dtype = least_precise_dtype(*trees)
    return Tolerances(_pick(rtol, RTOL, dtype), _pick(atol, ATOL, dtype))


def assert_tree_structure_equal(expected: Any, actual: Any, what: str = "tree") -> None:
    """Asserts that two trees have the same structure (containers, keys, NamedTuple types).

    Args:
      expected: the reference tree.
      actual: the tree under test.
      what: a name for ``actual`` used in the failure message.

    Raises:
      AssertionError: naming the first path at which the structures differ.
    """
    if tree_math.treespec(expected) != tree_math.treespec(actual):
        raise AssertionError(f"The structure of {what} differs from the expected one: "
                             f"{tree_math.first_difference(expected, actual, 'expected', what)}.")


def assert_trees_all_close(actual: Any, expected: Any, rtol: Tolerance = None,
                           atol: Tolerance = None, what: str = "tree") -> None:
    """Asserts that two trees have the same structure and close leaves of the same shapes.

    Leaves may be torch tensors, numpy arrays or JAX arrays; NaNs compare equal to NaNs.
    Random keys (``torch.Generator``, JAX PRNG keys) are skipped: randomness is compared
    statistically, not bit for bit.

    Args:
      actual: the tree under test.
      expected: the reference tree.
      rtol: relative tolerance; by default, for each pair of leaves, that of the least precise
        floating dtype of the two (see :func:`.tolerance`, which also explains per-dtype
        overrides ``{dtype: rtol}``).
      atol: absolute tolerance; likewise.
      what: a name for ``actual`` used in the failure message.

    Raises:
      AssertionError: naming the first path whose structure, shape or values differ.

    Example:
      >>> import numpy as np
      >>> import torch
      >>> from optax_compat import testing
      >>> testing.assert_trees_all_close({"w": torch.ones(2)}, {"w": np.ones(2, np.float32)})
    """
    actual_leaves, expected_leaves = leaves_with_paths(actual), leaves_with_paths(expected)
    if [p for p, _ in actual_leaves] != [p for p, _ in expected_leaves]:
        raise AssertionError(f"The structure of {what} differs from the expected one: "
                             f"{tree_math.first_difference(expected, actual, 'expected', what)}.")
    _assert_pairs_close(actual_leaves, [leaf for _, leaf in expected_leaves], rtol, atol, what)


def assert_leaves_close(actual: Any, expected: Any, rtol: Tolerance = None,
                        atol: Tolerance = None, what: str = "tree") -> None:
    """Asserts that two trees have as many leaves, pairwise close, in traversal order.

    Unlike :func:`assert_trees_all_close`, the containers may differ: a torch tree against
    its JAX counterpart, a list of leaves against a NamedTuple. Leaves and tolerances are
    handled as by :func:`assert_trees_all_close`.

    Args:
      actual: the tree under test; failure messages name its paths.
      expected: the reference tree.
      rtol: relative tolerance (see :func:`.tolerance`).
      atol: absolute tolerance (see :func:`.tolerance`).
      what: a name for ``actual`` used in the failure message.

    Raises:
      AssertionError: on a different number of leaves, or naming the first leaf that differs.
    """
    actual_leaves, expected_leaves = leaves_with_paths(actual), leaves_with_paths(expected)
    if len(actual_leaves) != len(expected_leaves):
        raise AssertionError(
            f"{what} has {len(actual_leaves)} leaves where {len(expected_leaves)} were expected: "
            f"{[p for p, _ in actual_leaves]} vs expected {[p for p, _ in expected_leaves]}.")
    _assert_pairs_close(actual_leaves, [leaf for _, leaf in expected_leaves], rtol, atol, what)


def _assert_pairs_close(actual_leaves: list[tuple[str, Any]], expected_leaves: list[Any],
                        rtol: Tolerance, atol: Tolerance, what: str) -> None:
    for (path, mine), reference in zip(actual_leaves, expected_leaves, strict=True):
        if is_random_key(mine) or is_random_key(reference):
            continue
        mine_t, reference_t = as_tensor(mine), as_tensor(reference)
        if mine_t.shape != reference_t.shape:
            raise AssertionError(f"{what}{path}: shape {tuple(mine_t.shape)} where "
                                 f"{tuple(reference_t.shape)} was expected.")
        leaf_rtol, leaf_atol = tolerance(mine, reference, rtol=rtol, atol=atol)
        compute_dtype = torch.promote_types(mine_t.dtype, reference_t.dtype)
        if not compute_dtype.is_floating_point and not compute_dtype.is_complex:
            compute_dtype = torch.float64
        mine_c = mine_t.cpu().to(compute_dtype)
        reference_c = reference_t.cpu().to(compute_dtype)
        close = torch.isclose(mine_c, reference_c, rtol=leaf_rtol, atol=leaf_atol, equal_nan=True)
        if not bool(close.all()):
            index = tuple(int(i) for i in torch.nonzero(~close)[0])
            largest = (mine_c - reference_c).abs().nan_to_num(nan=float("inf")).max().item()
            raise AssertionError(
                f"{what}{path}: {int((~close).sum())} of {close.numel()} values differ "
                f"(rtol={leaf_rtol}, atol={leaf_atol}); first at index {index}: "
                f"{mine_c[index].item()!r} vs expected {reference_c[index].item()!r}; "
                f"largest absolute difference {largest:.3g}.")
