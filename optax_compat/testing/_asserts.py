"""Tree assertions whose failure messages name the first offending path."""

from __future__ import annotations

from typing import Any

import numpy as np
import optree
import torch

from optax_compat._src.building_blocks import tree_math

# Default tolerances per dtype; those of float32 and float64 are the project's Optax tolerances.
RTOL = {torch.bfloat16: 1.6e-2, torch.float16: 1e-3, torch.float32: 1e-5, torch.float64: 1e-10}
ATOL = {torch.bfloat16: 1e-5, torch.float16: 1e-5, torch.float32: 1e-6, torch.float64: 1e-12}


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


def assert_trees_all_close(actual: Any, expected: Any, rtol: float | None = None,
                           atol: float | None = None, what: str = "tree") -> None:
    """Asserts that two trees have the same structure and close leaves of the same shapes.

    Leaves may be torch tensors, numpy arrays or JAX arrays; NaNs compare equal to NaNs.

    Args:
      actual: the tree under test.
      expected: the reference tree.
      rtol: relative tolerance; by default that of ``actual``'s leaf dtype (float32 1e-5,
        float64 1e-10).
      atol: absolute tolerance; by default that of the leaf dtype (float32 1e-6, float64 1e-12).
      what: a name for ``actual`` used in the failure message.

    Raises:
      AssertionError: naming the first path whose structure, shape or values differ.
    """
    actual_leaves, expected_leaves = leaves_with_paths(actual), leaves_with_paths(expected)
    if [p for p, _ in actual_leaves] != [p for p, _ in expected_leaves]:
        raise AssertionError(f"The structure of {what} differs from the expected one: "
                             f"{tree_math.first_difference(expected, actual, 'expected', what)}.")
    for (path, mine), (_, reference) in zip(actual_leaves, expected_leaves, strict=True):
        mine_t, reference_t = as_tensor(mine), as_tensor(reference)
        if mine_t.shape != reference_t.shape:
            raise AssertionError(f"{what}{path}: shape {tuple(mine_t.shape)} where "
                                 f"{tuple(reference_t.shape)} was expected.")
        leaf_rtol = RTOL.get(mine_t.dtype, 0.0) if rtol is None else rtol
        leaf_atol = ATOL.get(mine_t.dtype, 0.0) if atol is None else atol
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
