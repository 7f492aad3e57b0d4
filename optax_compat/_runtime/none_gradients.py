"""``None`` gradients: a PyTorch extension of Optax's semantics, implemented once for all.

``torch.autograd.grad(..., allow_unused=True)`` returns ``None`` for a parameter the loss does
not use (a frozen head, a branch not taken). Optax never sees such a gradient. Here, a ``None``
leaf in ``updates`` where the params and the state hold a tensor

* gives a ``None`` update (so :func:`~optax_compat.apply_updates` leaves that parameter as is),
* leaves that parameter's entries of the state exactly as they were (moments, traces, ...),
* is absent from everything computed across leaves (a global norm is over the present leaves);

state that is not per parameter (step counters, schedule states) advances as usual.

Every update function that goes through :class:`~optax_compat.GradientTransformation` is wrapped
by :func:`tolerates_none`, so each transformation, alias, combinator and wrapper behaves so
without code of its own. When the incoming updates hold ``None`` leaves, the wrapper

1. finds the per-parameter parts of the state: the subtrees shaped like the updates, such as
   ``mu`` and ``nu`` (where an update is ``None`` they may hold a tensor, ``None`` or a
   ``MaskedNode``);
2. replaces their leaves, and those of ``params``, by ``None`` where the update is ``None`` —
   Optax's empty subtree, so the transformation sees a consistent smaller tree;
3. runs the transformation, then puts the old leaves back at those positions of the new state.

Without ``None`` leaves the cost is one flattening of ``updates`` by the outermost transformation
of a call (whether a structure holds ``None`` is computed once per structure); the
transformations it calls skip the check. A ``None`` stands for one tensor leaf: a
``None`` in place of a whole subtree of parameters is a structure mismatch, as in Optax.

The same entry names a leaf whose shape differs from its parameter's or its state's: when torch
raises a ``RuntimeError`` inside ``update`` (a size mismatch, without a path), the shapes of the
updates are compared with those of ``params`` and of the per-parameter parts of the state, and
a ``ValueError`` names the first path and both shapes (see :func:`shape_mismatch`). Nothing is
compared when the update succeeds: shapes that broadcast, as JAX accepts them, are not errors.
Likewise a sparse gradient that a transformation's dense arithmetic fails on gets a
``TypeError`` naming its path and the ways out (see :func:`sparse_leaf`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import operator
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import optree
import torch

from optax_compat._runtime import tree_math as tm
from optax_compat._runtime.capabilities import capabilities_of, declare

UpdateFn = TypeVar("UpdateFn", bound=Callable[..., Any])
StepFn = TypeVar("StepFn", bound=Callable[..., Any])

_WRAPPER = "_tolerating_none"


class _Scope(threading.local):
    """Whether this thread is inside an update call whose updates were found free of ``None``."""

    checked = False


_SCOPE = _Scope()


def _flatten(tree: Any) -> tuple[list[Any], optree.PyTreeSpec]:
    shallow = tm.traced_flatten_one_level(tree, True) if torch.compiler.is_compiling() else None
    if shallow is not None:
        return shallow
    return tm.traced_or_optree_flatten(tree, True)


def _has_none(leaves: list[Any]) -> bool:
    return any(map(operator.is_, leaves, itertools.repeat(None)))


class Pruning:
    """Where the updates are ``None``, and how to hide those positions from a transformation.

    Built by :func:`pruning` from updates that hold ``None`` leaves. A position where the
    params (or a per-parameter part of the state) are ``None`` too is Optax's empty subtree,
    not a ``None`` gradient: nothing is hidden there.
    """

    def __init__(self, updates: Any, leaves: list[Any], spec: optree.PyTreeSpec) -> None:
        self.spec = spec
        self.node_type = type(updates)
        self.present = [leaf is not None for leaf in leaves]
        self.state_hidden = False

    def _entries(self, node: Any) -> list[Any] | None:
        """The entries of ``node`` at the positions of the updates' leaves, if it is shaped like
        the updates: tensors where they are present, anything (a tensor, ``None``, a
        ``MaskedNode``) where they are ``None``."""
        if type(node) is not self.node_type:
            return None
        # Checked on structures first in eager mode: optree's error for a mismatch would format
        # the node's tensors, which reads them on the host (Dynamo traces only the try below).
        if not torch.compiler.is_compiling() and not self.spec.is_prefix(_flatten(node)[1]):
            return None
        try:
            entries = self.spec.flatten_up_to(node)
        except (ValueError, TypeError):
            return None
        if all(isinstance(e, torch.Tensor) if p else _fits_one_parameter(e)
               for e, p in zip(entries, self.present)):
            return entries
        return None

    def _per_parameter(self, node: Any) -> bool:
        return self._entries(node) is not None

    def _hides(self, tree: Any) -> bool:
        return any(e is not None for e, p in zip(self._entries(tree), self.present) if not p)

    def _hide(self, tree: Any) -> Any:
        return self.spec.unflatten([e if p else None
                                    for e, p in zip(self._entries(tree), self.present)])

    def _outer(self, tree: Any) -> tuple[list[Any], optree.PyTreeSpec]:
        return tm.traced_or_optree_flatten(tree, tm.NONE_IS_LEAF, self._per_parameter)

    def _hide_within(self, tree: Any) -> tuple[Any, bool]:
        """``tree`` with the positions hidden in each per-parameter subtree; whether any was."""
        outer, spec = self._outer(tree)
        hidden = [type(x) is self.node_type and self._hides(x) for x in outer]
        if not any(hidden):
            return tree, False
        return spec.unflatten([self._hide(x) if h else x for x, h in zip(outer, hidden)]), True

    def params(self, params: Any) -> Any:
        """``params`` with ``None`` at those positions in each of its per-parameter subtrees
        (``params`` itself, or the parts of a pair such as ``LookaheadParams``)."""
        return self._hide_within(params)[0]

    def state(self, state: Any) -> Any:
        """``state`` with ``None`` at those positions in each of its per-parameter subtrees."""
        state, self.state_hidden = self._hide_within(state)
        return state

    def updates(self, updates: Any) -> Any:
        """The transformed ``updates``, forced to ``None`` at those positions."""
        return self._hide_within(updates)[0]

    def restore(self, old_state: Any, new_state: Any) -> Any:
        """``new_state`` with the leaves of ``old_state`` put back at the hidden positions.

        Call after :meth:`state`. A new state whose layout differs from the old one is
        returned unchanged.
        """
        if not self.state_hidden:
            return new_state
        old_outer, old_spec = self._outer(old_state)
        new_outer, new_spec = self._outer(new_state)
        if new_spec != old_spec:
            return new_state
        return new_spec.unflatten([self._merge(old, new) if type(old) is self.node_type else new
                                   for old, new in zip(old_outer, new_outer)])

    def _merge(self, old: Any, new: Any) -> Any:
        return self.spec.unflatten([n if p else o for o, n, p in zip(
            self._entries(old), self.spec.flatten_up_to(new), self.present)])


def _fits_one_parameter(entry: Any) -> bool:
    """A tensor, ``None`` or an empty node (a ``MaskedNode``): what a state can hold for one
    parameter. A node with children is not (such as a ``chain``'s one-element tuple of states)."""
    return tm.treespec(entry).num_nodes == 1


def pruning(updates: Any) -> Pruning | None:
    """A :class:`Pruning` if ``updates`` has ``None`` leaves, else ``None`` (one flattening)."""
    leaves, spec = _flatten(updates)
    return Pruning(updates, leaves, spec) if _has_none(leaves) else None


def _present_check(updates: Any) -> Pruning | None:
    """:func:`pruning`, in eager mode from the structure of ``updates`` (whether it holds a
    ``None`` node is cached per structure) before anything is flattened with ``None`` leaves."""
    if torch.compiler.is_compiling() or _holds_none(tm.treespec(updates)):
        return pruning(updates)
    return None


def _holds_none(spec: optree.PyTreeSpec) -> bool:
    """Whether a structure (``None`` an empty subtree) has a ``None`` node."""
    try:
        return _holds_none_cached(spec)
    except TypeError:  # a custom node whose metadata is not hashable
        return _has_none_node(spec)


@functools.lru_cache(maxsize=256)
def _holds_none_cached(spec: optree.PyTreeSpec) -> bool:
    return _has_none_node(spec)


def _has_none_node(spec: optree.PyTreeSpec) -> bool:
    pending = [spec]
    while pending:
        node = pending.pop()
        if node.kind == optree.PyTreeKind.NONE:
            return True
        pending.extend(node.children())
    return False


def _params_argument(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs.get("params")


def _with_params(args: tuple[Any, ...], kwargs: dict[str, Any],
                 params: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if args:
        return (params, *args[1:]), kwargs
    if "params" in kwargs:
        return args, {**kwargs, "params": params}
    return args, kwargs


def tolerates_none(update_fn: UpdateFn) -> UpdateFn:
    """``update_fn`` with the ``None``-gradient semantics of this module.

    ``update_fn`` is called ``update_fn(updates, state, *args, **kwargs)`` with ``params`` as the
    first of ``args`` (Optax's convention) or as the keyword ``params`` (TorchOpt's). Wrapped
    functions are returned unchanged, and a function is wrapped once (two transformations built
    from the same functions compare equal); ``update_fn``'s capability record (in-place support,
    layouts) is kept.
    """
    if capabilities_of(update_fn).tolerates_none:
        return update_fn
    wrapped = getattr(update_fn, _WRAPPER, None)
    # One wrapper per function, so that pairs built from it compare equal (a copy of the
    # function made with ``functools.update_wrapper`` carries the original's: not its own).
    if wrapped is not None and wrapped.__wrapped__ is update_fn:
        return wrapped

    @functools.wraps(update_fn)
    def update(updates: Any, state: Any, *args: Any, **kwargs: Any) -> Any:
        if _SCOPE.checked:
            return update_fn(updates, state, *args, **kwargs)
        try:
            plan = _present_check(updates)
            if plan is None:
                if torch.compiler.is_compiling():
                    return update_fn(updates, state, *args, **kwargs)
                _SCOPE.checked = True
                try:
                    return update_fn(updates, state, *args, **kwargs)
                finally:
                    _SCOPE.checked = False
            params = _params_argument(args, kwargs)
            hidden_params, hidden_state = plan.params(params), plan.state(state)
            if hidden_params is params and not plan.state_hidden:  # only Optax's empty subtrees
                return update_fn(updates, state, *args, **kwargs)
            hidden_args, hidden_kwargs = _with_params(args, kwargs, hidden_params)
            new_updates, new_state = update_fn(updates, hidden_state, *hidden_args,
                                               **hidden_kwargs)
            return plan.updates(new_updates), plan.restore(state, new_state)
        except RuntimeError as error:  # ATen's NotImplementedError for a sparse operand too
            sparse = sparse_leaf(updates)
            if sparse is not None:
                raise TypeError(f"{sparse} is a sparse tensor, and this transformation "
                                "computes on dense ones: pass it as .to_dense(), or use "
                                "torch.optim.SparseAdam (or nn.Embedding(..., sparse=False))."
                                ) from error
            mismatch = shape_mismatch(updates, state, _params_argument(args, kwargs))
            if mismatch is None:
                raise
            raise ValueError(f"The shapes of updates and {mismatch}.") from error

    declare(update, tolerates_none=True)
    with contextlib.suppress(AttributeError):  # bound methods take no attributes
        setattr(update_fn, _WRAPPER, update)
    return update  # type: ignore[return-value]


def sparse_leaf(updates: Any) -> str | None:
    """The first leaf of ``updates`` with a sparse layout, as ``updates['emb']``, or ``None``.

    Called after an update failed: transformations whose arithmetic also runs on sparse
    tensors (``sgd`` without momentum, ``scale``) take them; the others fail in ATen, without
    a path or a way out, and get this leaf named instead.
    """
    accessors, leaves, _ = optree.tree_flatten_with_accessor(
        updates, none_is_leaf=tm.NONE_IS_LEAF, namespace=tm.NAMESPACE)
    return next((accessor.codify("updates") for accessor, leaf in zip(accessors, leaves)
                 if isinstance(leaf, torch.Tensor) and leaf.layout != torch.strided), None)


def shape_mismatch(updates: Any, state: Any, params: Any = None) -> str | None:
    """Describes the first leaf of ``updates`` whose shape differs from its counterpart's.

    The counterparts are the leaves of ``params`` and of every parameter-shaped part of
    ``state`` (a subtree shaped like the updates, such as ``mu``; only its floating-point
    leaves, so that a step counter is not taken for a parameter's state). A part is
    parameter-shaped if its leaves have the params' shapes, or, without params, if at least as
    many of them have the updates' shapes as not: Adafactor's factored moments (``v_row``) are
    per-parameter but of other shapes, and are no evidence of a mismatch. Shapes that cannot be
    broadcast together are reported first, then any other difference. Called after an update
    failed.

    Returns:
      The end of the sentence "The shapes of updates and ...", e.g. ``"state[0].mu differ:
      updates['w'] has shape (2, 3) where state[0].mu['w'] has shape (3, 2)"``, or ``None`` if
      every leaf has its counterparts' shape.
    """
    accessors, leaves, spec = optree.tree_flatten_with_accessor(
        updates, none_is_leaf=True, namespace=tm.NAMESPACE)
    matcher = Pruning(updates, leaves, spec)

    def shapes(entries: list[Any], floating_only: bool) -> dict[int, tuple[Any, Any]]:
        """Position -> (update's shape, counterpart's shape), for the tensor leaves compared."""
        return {index: (leaf.shape, other.shape)
                for index, (leaf, other) in enumerate(zip(leaves, entries))
                if isinstance(leaf, torch.Tensor) and isinstance(other, torch.Tensor)
                and (other.is_floating_point() or other.is_complex() or not floating_only)}

    counterparts, param_shapes = [], None
    if params is not None and matcher._per_parameter(params):
        counterparts.append(("params", shapes(matcher._entries(params), False)))
        param_shapes = {index: shape for index, (_, shape) in counterparts[0][1].items()}
    parts_accessors, parts, _ = optree.tree_flatten_with_accessor(
        state, is_leaf=matcher._per_parameter, none_is_leaf=tm.NONE_IS_LEAF,
        namespace=tm.NAMESPACE)
    for part_accessor, part in zip(parts_accessors, parts):
        if not matcher._per_parameter(part):
            continue
        part_shapes = shapes(matcher._entries(part), True)
        if param_shapes is not None:
            parameter_shaped = all(param_shapes.get(index) == other
                                   for index, (_, other) in part_shapes.items())
        else:
            same = sum(shape == other for shape, other in part_shapes.values())
            parameter_shaped = 2 * same >= len(part_shapes)
        if parameter_shaped:
            counterparts.append((part_accessor.codify("state"), part_shapes))
    differences = [(name, accessors[index], shape, other)
                   for name, part_shapes in counterparts
                   for index, (shape, other) in part_shapes.items() if shape != other]
    if not differences:
        return None
    name, accessor, shape, other_shape = min(differences, key=lambda d: _broadcast(d[2], d[3]))
    return (f"{name} differ: {accessor.codify('updates')} has shape {tuple(shape)} where "
            f"{accessor.codify(name)} has shape {tuple(other_shape)}")


def _broadcast(shape: torch.Size, other: torch.Size) -> bool:
    """Whether two shapes broadcast together (``False`` sorts first)."""
    try:
        torch.broadcast_shapes(shape, other)
    except RuntimeError:
        return False
    return True


def present_pairs(params: Any, updates: Any) -> tuple[list[Any], optree.PyTreeSpec, list[Any],
                                                       list[int] | None]:
    """The leaves of ``params``, their structure, the matching updates, and which are present.

    Returns:
      ``(param_leaves, spec, update_leaves, present)``: ``update_leaves`` has ``None`` where the
      update is ``None``; ``present`` lists the indices of the other leaves, or is ``None`` when
      every update is present.

    Raises:
      ValueError: naming the first path where ``updates`` differs from ``params`` other than by
        ``None`` in place of a leaf.
    """
    param_leaves, spec = tm.flatten(params)
    update_leaves, update_spec = tm.flatten(updates)
    if tm.same_structure(update_spec, spec):
        return param_leaves, spec, update_leaves, None
    if not tm.same_structure(_flatten(updates)[1], _flatten(params)[1]):
        raise ValueError("The structure of updates does not match the params: "
                         f"{tm.first_difference(params, updates, 'params', 'updates')}.")
    update_leaves = spec.flatten_up_to(updates)
    return param_leaves, spec, update_leaves, [i for i, u in enumerate(update_leaves)
                                               if u is not None]


def tolerates_none_step(step: StepFn) -> StepFn:
    """A whole in-place step ``step(params, grads, state) -> state`` that skips ``None`` grads.

    The step runs on the parameters whose gradient is present; the others and their state
    entries are left exactly as they were, as :func:`tolerates_none` does for ``update``.
    Keyword options are passed on to ``step``.
    """

    @functools.wraps(step)
    def step_present(params: Any, grads: Any, state: Any, **options: Any) -> Any:
        plan = _present_check(grads)
        if plan is None:
            return step(params, grads, state, **options)
        hidden_params, hidden_state = plan.params(params), plan.state(state)
        if hidden_params is params and not plan.state_hidden:  # only Optax's empty subtrees
            return step(params, grads, state, **options)
        return plan.restore(state, step(hidden_params, grads, hidden_state, **options))

    return step_present
