"""Checks that a transformation does what its capability declarations say.

The fast paths trust what :mod:`optax_compat.capabilities` declares: :func:`~optax_compat.
fused_step` runs an elementwise ``update`` on flat buffers, a per-leaf one on stacks of leaves
under ``torch.func.vmap``, and ``inplace=True`` lets ``update`` write into its inputs. A wrong
declaration gives wrong numbers there, silently. Each check here runs the transformation a few
steps on the given data as it is and rearranged the way a fast path rearranges it, and raises
``AssertionError`` naming the rearrangement, the step and the leaf whose updates changed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from optax_compat._runtime import tree_math
from optax_compat._runtime.capabilities import capabilities_of
from optax_compat._runtime.flat_safe import FLAT, STACKED, why_not
from optax_compat._src import base
from optax_compat._src.update import apply_updates
from optax_compat.testing._asserts import assert_trees_all_close, leaves_with_paths
from optax_compat.testing._properties import Snapshot, checked_pure_update
from optax_compat.testing._steps import ExtraArgsLike, GradsLike, extra_args_at, grads_at

Leaves = list[torch.Tensor]
# One run per tree the rearranged leaves form: the tx is run on each separately.
Runs = list[Leaves]


class _Rearrangement(NamedTuple):
    """How a fast path rearranges the leaves, and back.

    Attributes:
      what: finishes "the updates change when the leaves are ..." in failure messages.
      split: the original leaves -> the leaves of each separate run.
      join: each run's leaves (updates) -> the original leaves' shapes and order.
      vmapped: the runs hold stacks, each updated under ``torch.func.vmap``.
    """

    what: str
    split: Callable[[Leaves], Runs]
    join: Callable[[Runs, Leaves], Leaves]
    vmapped: bool = False


def _reversed() -> _Rearrangement:
    return _Rearrangement("put in the reverse order", lambda leaves: [leaves[::-1]],
                          lambda runs, leaves: runs[0][::-1])


def _groups(leaves: Leaves, by_shape: bool = False) -> list[list[int]]:
    """Leaf numbers grouped by (dtype, device), or by (dtype, device, shape)."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, leaf in enumerate(leaves):
        key = (leaf.dtype, leaf.device) + ((tuple(leaf.shape),) if by_shape else ())
        groups.setdefault(key, []).append(index)
    return list(groups.values())


def _concatenated() -> _Rearrangement:
    """One 1-D leaf per dtype, its elements in reverse order (the flat layout, with the
    elements' positions moved as well)."""

    def split(leaves: Leaves) -> Runs:
        return [[torch.cat([leaves[i].reshape(-1) for i in group]).flip(0)
                 for group in _groups(leaves)]]

    def join(runs: Runs, leaves: Leaves) -> Leaves:
        out: Leaves = list(leaves)
        for group, flat in zip(_groups(leaves), runs[0], strict=True):
            pieces = flat.flip(0).split([leaves[i].numel() for i in group])
            for i, piece in zip(group, pieces, strict=True):
                out[i] = piece.reshape(leaves[i].shape)
        return out

    return _Rearrangement("concatenated into one vector per dtype, elements reversed",
                          split, join)


def _halved() -> _Rearrangement:
    """Each leaf's elements split between two trees updated separately."""

    def halves(leaf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        flat = leaf.reshape(-1)
        return flat[:(flat.numel() + 1) // 2], flat[(flat.numel() + 1) // 2:]

    def split(leaves: Leaves) -> Runs:
        pairs = [halves(leaf) for leaf in leaves]
        second = [b for _, b in pairs if b.numel()]
        return [[a for a, _ in pairs]] + ([second] if second else [])

    def join(runs: Runs, leaves: Leaves) -> Leaves:
        seconds = iter(runs[1] if len(runs) > 1 else [])
        return [torch.cat([a, next(seconds) if halves(leaf)[1].numel() else a[:0]]
                          ).reshape(leaf.shape) for a, leaf in zip(runs[0], leaves, strict=True)]

    return _Rearrangement("split in two halves, updated as two separate trees", split, join)


def _alone() -> _Rearrangement:
    return _Rearrangement("updated one by one, each leaf alone in its tree",
                          lambda leaves: [[leaf] for leaf in leaves],
                          lambda runs, leaves: [run[0] for run in runs])


def _stacked() -> _Rearrangement:
    """Same-shape leaves stacked along a new first axis, updated under ``vmap`` (the stacked
    layout)."""

    def split(leaves: Leaves) -> Runs:
        return [[torch.stack([leaves[i] for i in group])]
                for group in _groups(leaves, by_shape=True)]

    def join(runs: Runs, leaves: Leaves) -> Leaves:
        out: Leaves = list(leaves)
        for group, run in zip(_groups(leaves, by_shape=True), runs, strict=True):
            for i, piece in zip(group, run[0].unbind(0), strict=True):
                out[i] = piece
        return out

    return _Rearrangement("stacked by shape and updated under torch.func.vmap", split, join,
                          vmapped=True)


def _name(tx: base.GradientTransformation) -> str:
    update = getattr(tx, "update", tx)
    qualname = getattr(update, "__qualname__", None) or type(update).__name__
    return qualname.split(".<locals>")[0]


def _data(params: Any, grads: GradsLike, steps: int) -> tuple[Leaves, list[Leaves]]:
    """The params' leaves and each step's gradient leaves, detached copies, checked."""
    leaves, spec = tree_math.flatten(params)
    if not leaves or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        raise ValueError("The declaration checks need params whose leaves are tensors, at "
                         "least one.")
    per_step = []
    for step in range(steps):
        grad_leaves, grad_spec = tree_math.flatten(grads_at(grads, step))
        if grad_spec != spec:
            raise ValueError(f"The gradients of step {step + 1} do not have the params' "
                             "structure.")
        per_step.append([g.detach().clone() for g in grad_leaves])
    return [leaf.detach().clone() for leaf in leaves], per_step


def _update(tx: base.GradientTransformation, kwargs: dict[str, Any], grads: Any, state: Any,
            params: Any) -> tuple[Any, Any]:
    return tx.update(grads, state, params, **kwargs)


def _trajectory(tx: base.GradientTransformation, params: Leaves, grads: list[Leaves],
                extra_args: ExtraArgsLike, vmapped: bool) -> list[Leaves]:
    """The updates of each step of ``tx`` run on the list ``params`` (on stacks under
    ``vmap`` when ``vmapped``)."""
    params = list(params)
    state = (torch.func.vmap(tx.init) if vmapped else tx.init)(params)
    out = []
    for step, grad in enumerate(grads):
        update = functools.partial(_update, tx, extra_args_at(extra_args, step))
        updates, state = (torch.func.vmap(update) if vmapped else update)(list(grad), state,
                                                                          params)
        updates = tree_math.leaves(updates)
        out.append([u.detach().clone() for u in updates])
        params = tree_math.leaves(apply_updates(params, updates))
    return out


def _check(tx: base.GradientTransformation, params: Any, grads: GradsLike, steps: int,
           extra_args: ExtraArgsLike, declared: str,
           rearrangements: Sequence[_Rearrangement]) -> None:
    """Runs ``tx`` on the leaves as given and as each rearrangement has them; raises
    ``AssertionError`` at the first step and leaf whose updates differ."""
    leaves, per_step = _data(params, grads, steps)
    paths = [path for path, _ in leaves_with_paths(params)]
    expected = _trajectory(tx, leaves, per_step, extra_args, vmapped=False)
    for rearranged in rearrangements:
        runs = rearranged.split(leaves)
        grads_runs = [rearranged.split(g) for g in per_step]
        try:
            trajectories = [
                _trajectory(tx, run, [g[number] for g in grads_runs], extra_args,
                            rearranged.vmapped)
                for number, run in enumerate(runs)]
        except Exception as error:  # any failure of a rearranged run is the finding
            raise AssertionError(
                f"{_name(tx)} is declared {declared}, but its update fails when the leaves are "
                f"{rearranged.what}: {type(error).__name__}: {error}") from error
        for step in range(steps):
            got = rearranged.join([trajectory[step] for trajectory in trajectories], leaves)
            try:
                for path, mine, reference in zip(paths, got, expected[step], strict=True):
                    assert_trees_all_close(mine, reference, what=f"the update of params{path}")
            except AssertionError as error:
                raise AssertionError(
                    f"{_name(tx)} is declared {declared}, but its updates at step {step + 1} "
                    f"change when the leaves are {rearranged.what}: {error}") from None


def check_elementwise(tx: base.GradientTransformation, params: Any, grads: GradsLike,
                      steps: int = 2, extra_args: ExtraArgsLike = None) -> None:
    """Checks that each element's update depends on that element alone.

    The declaration :func:`optax_compat.capabilities.elementwise` promises it. The updates must
    not change (beyond rounding) when the leaves are put in another order, concatenated into one
    vector per dtype with their elements reversed, or split in two halves updated as separate
    trees. That catches reductions over a leaf or over the tree, a leaf's shape, its position in
    the tree, an element's position in its leaf.

    Args:
      tx: the transformation under test.
      params: parameters, a tree of tensors (the checks run on copies).
      grads: a gradient tree used at every step, or ``step -> gradient tree``.
      steps: number of update steps (the params are updated between steps).
      extra_args: extra keyword arguments for ``update``, or ``step -> arguments``.

    Raises:
      AssertionError: naming the rearrangement, the step and the first leaf that differs.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> from optax_compat import testing
      >>> params = {"w": torch.ones(3), "b": torch.ones(2)}
      >>> grads = {"w": torch.tensor([1.0, -2.0, 3.0]), "b": torch.tensor([0.5, 4.0])}
      >>> testing.check_elementwise(optax.adam(0.1), params, grads)
      >>> try:  # declared with a global reduction, not elementwise
      ...     testing.check_elementwise(optax.clip_by_global_norm(1.0), params, grads)
      ... except AssertionError as error:
      ...     print(str(error).split(":")[0])
      clip_by_global_norm is declared elementwise, but its updates at step 1 change when
      the leaves are split in two halves, updated as two separate trees
    """
    _check(tx, params, grads, steps, extra_args, "elementwise",
           (_reversed(), _concatenated(), _halved()))


def check_global_reduction(tx: base.GradientTransformation, params: Any, grads: GradsLike,
                           steps: int = 2, extra_args: ExtraArgsLike = None) -> None:
    """Checks that ``tx`` gives the same updates on flat buffers as on the leaves.

    The declaration :func:`optax_compat.capabilities.global_reduction` promises it: the updates
    must not change (beyond the rounding of sums taken in another order) when the leaves are put
    in another order, or concatenated into one vector per dtype with their elements reversed.
    That catches reductions over single leaves, shapes, and positions.

    Args and Raises: as :func:`check_elementwise`.
    """
    _check(tx, params, grads, steps, extra_args, "with global reductions",
           (_reversed(), _concatenated()))


def check_per_leaf(tx: base.GradientTransformation, params: Any, grads: GradsLike,
                   steps: int = 2, extra_args: ExtraArgsLike = None) -> None:
    """Checks that each leaf's update depends on that leaf (its state, its param) alone, and
    that ``tx`` runs on stacks of leaves under ``torch.func.vmap``.

    The declaration :func:`optax_compat.capabilities.per_leaf` promises it. The updates must not
    change when each leaf is updated alone in its own tree, or when the leaves of each shape
    are stacked along a new first axis and updated under ``vmap`` (as
    :func:`optax_compat.fused_step` runs them). That catches reductions over the tree, leaves
    read by others, the number of leaves, a leaf's position in the tree, and updates that
    ``vmap`` cannot run (``.item()``, Python branches on values).

    Args and Raises: as :func:`check_elementwise`.
    """
    _check(tx, params, grads, steps, extra_args, "per leaf", (_alone(), _stacked()))


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.numel() > 0 and b.numel() > 0
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())


def check_inplace(tx: base.GradientTransformation, params: Any, grads: GradsLike,
                  steps: int = 2, extra_args: ExtraArgsLike = None) -> None:
    """Checks that ``update(..., inplace=True)`` gives the pure path's numbers and writes only
    where it may.

    The declaration :func:`optax_compat.capabilities.supports_inplace` promises it. Runs two
    trajectories side by side, one with ``inplace=False`` and one with ``inplace=True`` on
    copies of the updates and state (which that call may overwrite). At every step:

    * the pure call modifies none of its inputs;
    * the in-place call gives the same updates and state (within the dtype's rounding
      tolerance, :func:`.tolerance`: a fused kernel may round differently; NaNs where the pure
      one has them), and never touches the params;
    * no returned update shares memory with the returned state or the params (a chain scales
      its updates in place next).

    Args and Raises: as :func:`check_elementwise`; also ``AssertionError`` if ``update`` does
    not declare in-place support, or refuses the ``inplace`` keyword.
    """
    if capabilities_of(tx).inplace is not True:
        raise AssertionError(f"{_name(tx)} does not declare in-place support "
                             "(optax_compat.capabilities.supports_inplace): inplace=True is "
                             "dropped, and there is nothing to check.")
    pure_state, inplace_state = tx.init(params), tx.init(params)
    for step in range(steps):
        grad, kwargs = grads_at(grads, step), extra_args_at(extra_args, step)
        during = f"update {step + 1}"
        pure_updates, new_pure_state = checked_pure_update(
            tx, grad, pure_state, params, kwargs, f"The pure {during} (inplace=False)")
        params_snapshot = Snapshot(params, "params")
        handed_over = tree_math.tree_map(torch.clone, grad)
        try:
            updates, inplace_state = tx.update(handed_over, inplace_state, params, **kwargs,
                                               inplace=True)
        except TypeError as error:
            raise AssertionError(f"{_name(tx)} declares in-place support, but {during} with "
                                 f"inplace=True fails: {error}") from error
        params_snapshot.assert_unchanged(f"The in-place {during}")
        assert_trees_all_close(updates, pure_updates, what=f"the in-place {during}'s updates")
        assert_trees_all_close(inplace_state, new_pure_state,
                               what=f"the in-place {during}'s state")
        kept = [x for x in tree_math.leaves(inplace_state) + tree_math.leaves(params)
                if isinstance(x, torch.Tensor)]
        for number, update in enumerate(tree_math.leaves(updates)):
            if isinstance(update, torch.Tensor) and any(_shares_memory(update, x)
                                                        for x in kept):
                raise AssertionError(f"The in-place {during} returns update leaf {number} in "
                                     "memory of the state or the params: writing into it "
                                     "(as the next transformation of a chain does) would "
                                     "change them.")
        params = apply_updates(params, pure_updates)
        pure_state = new_pure_state


def _layout_check(tx: base.GradientTransformation) -> Callable[..., None] | None:
    """The check of ``tx``'s layout declaration, or ``None`` if it declares none that a fast
    path uses."""
    flat, stacked = why_not(tx, FLAT) is None, why_not(tx, STACKED) is None
    if flat and stacked:
        return check_elementwise
    if flat:
        return check_global_reduction
    return check_per_leaf if stacked else None


def check_declarations(tx: base.GradientTransformation, params: Any, grads: GradsLike,
                       steps: int = 2, extra_args: ExtraArgsLike = None) -> tuple[str, ...]:
    """Runs the checks of everything ``tx`` declares (:mod:`optax_compat.capabilities`).

    Elementwise → :func:`check_elementwise`; global reductions → :func:`check_global_reduction`;
    per leaf → :func:`check_per_leaf`; in-place support → :func:`check_inplace`.

    Args and Raises: as :func:`check_elementwise`.

    Returns:
      The names of the checks that ran, in order (none for an undeclared transformation).
    """
    checks = [_layout_check(tx), check_inplace if capabilities_of(tx).inplace else None]
    ran = []
    for check in checks:
        if check is not None:
            check(tx, params, grads, steps, extra_args)
            ran.append(check.__name__)
    return tuple(ran)
