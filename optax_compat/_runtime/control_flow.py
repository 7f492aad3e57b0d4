"""``lax.cond`` without a host sync: run both branches and select leaf by leaf.

Optax's wrappers (``apply_if_finite``, ``MultiSteps``, ``conditionally_transform``) choose
between two whole results with ``lax.cond`` on a traced boolean. Reading that boolean on the
host (``if pred.item():``) would stall an asynchronous device and break
``torch.compile(fullgraph=True)``, so when the predicate is a tensor both branches run and every
leaf is picked with ``torch.where``. A Python ``bool`` predicate is static: only its branch runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

from optax_compat._runtime import tree_math

T = TypeVar("T")


def select_tree(pred: torch.Tensor, on_true: T, on_false: T) -> T:
    """Per-leaf ``torch.where(pred, on_true, on_false)`` over two trees of the same structure.

    Each result leaf keeps the dtype of ``on_false`` (the state being carried over), as
    ``lax.cond`` requires both branches to agree on dtypes. Leaves that are not tensors must be
    the same object in both trees (a generator, a static Python value) and are kept as is.

    Raises:
      ValueError: naming the first differing path if the trees' structures differ.
      TypeError: if two non-tensor leaves differ, as they cannot be selected on the device.
    """
    def select(if_true: Any, if_false: Any) -> Any:
        if isinstance(if_true, torch.Tensor) or isinstance(if_false, torch.Tensor):
            selected = torch.where(pred, if_true, if_false)
            dtype = if_false.dtype if isinstance(if_false, torch.Tensor) else None
            return selected if dtype is None or selected.dtype == dtype else selected.to(dtype)
        if if_true is if_false or (type(if_true) is type(if_false) and if_true == if_false):
            return if_false
        raise TypeError(f"Cannot select between the non-tensor leaves {if_true!r} and "
                        f"{if_false!r} without a host sync.")

    # tree_map, not flatten: Dynamo cannot flatten a tree holding an empty dict (the state
    # of inject_hyperparams without schedules), but it can map over one.
    try:
        return tree_math.tree_map(select, on_true, on_false)
    except ValueError:
        tree_math.leaves_like(on_false, tree_math.treespec(on_true), "the carried-over branch",
                              on_true)  # raises, naming the first differing path
        raise


def cond(pred: torch.Tensor | bool, true_fn: Callable[[], T], false_fn: Callable[[], T]) -> T:
    """``lax.cond(pred, true_fn, false_fn)``: both branches run unless ``pred`` is a Python bool.

    Args:
      pred: a boolean 0-d tensor, or a Python bool known without looking at data.
      true_fn: computes the result when ``pred`` holds.
      false_fn: computes the result otherwise; its dtypes are kept.

    Returns:
      The selected result, computed without reading ``pred`` on the host.
    """
    if not isinstance(pred, torch.Tensor):
        return true_fn() if pred else false_fn()
    return select_tree(pred, true_fn(), false_fn())
