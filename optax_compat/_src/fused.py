"""Fused steps: any elementwise transformation, compiled into one pass over flat buffers.

:func:`fused_step` moves the parameters into one contiguous 1-D buffer per (dtype, device)
group, the way FSDP's flat parameters and ZeRO do: the user's tensors (or
``nn.Parameter``\\ s) stay the same Python objects and keep their values, but their ``.data``
becomes a view of the group's buffer. The transformation then runs on the tree of those
buffers — its own ``update``, the code that gives Optax's numbers — and ``torch.compile``
turns update, ``apply_updates`` and the write-back of the state into a few fused kernels that
write the parameters and the state buffers in place.

This is only valid for transformations that act elementwise or on global reductions (a
global norm, a tree dot product: one reduction per buffer): those declared with
:func:`optax_compat._src.building_blocks.flat_safe.elementwise`. A transformation that
reads leaf shapes or per-leaf statistics would compute something else on a flat buffer, and is
refused.

Nothing is compiled until the first step, so code that never calls :func:`fused_step` never
pays a compilation. Inductor's FX-graph and AOTAutograd caches (on by default) keep the
compiled kernels across processes.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import time
import types
from collections.abc import Sequence
from typing import Any

import optree
import torch

from optax_compat._src import base, compilation, update
from optax_compat._src import building_blocks as bb
from optax_compat._src.building_blocks import tree_math as tm

GroupKey = tuple[torch.dtype, torch.device]


class FusedStep:
    """One optimizer step over flat buffers, compiled on its first call.

    Build it with :func:`fused_step`.

    Attributes:
      params: the flat parameter buffers, a tuple with one 1-D tensor per (dtype, device)
        group, in the order the groups first appear among the leaves; every leaf of the
        user's params is a view of one of them.
      grads: the user's params' structure, each leaf a view of a flat gradient buffer with
        that parameter's shape. Gradients passed as these very tensors are not copied.
      state: the transformation's state for the tree ``params``, updated in place.
      compile_seconds: seconds spent in the calls that compiled (tracing, code generation or
        a cache hit, and the one step run then); 0.0 before the first call.
    """

    def __init__(self, tx: base.GradientTransformation, params: base.Params, *,
                 backend: str = "inductor", grads_as_views: bool = False) -> None:
        """See :func:`fused_step`."""
        reason = bb.why_not_elementwise(tx)
        if reason is not None:
            raise ValueError(f"fused_step: {reason}; fused_step runs transformations that "
                             "act elementwise or on global reductions.")
        leaves, self._spec = tm.flatten(params)
        _check_leaves(leaves)
        groups: dict[GroupKey, list[int]] = {}
        for index, leaf in enumerate(leaves):
            groups.setdefault((leaf.dtype, leaf.device), []).append(index)
        self._groups = list(groups.values())
        self.params = tuple(_flat_buffer([leaves[i] for i in group]) for group in self._groups)
        self._grad_buffers = tuple(torch.zeros_like(buffer) for buffer in self.params)
        param_views, grad_views = _views(self.params, self._groups, leaves), _views(
            self._grad_buffers, self._groups, leaves)
        with torch.no_grad():
            for leaf, view in zip(leaves, param_views, strict=True):
                leaf.data = view
        self._grad_views = [[grad_views[i] for i in group] for group in self._groups]
        self.grads = tm.unflatten(self._spec, grad_views)
        if grads_as_views:
            for leaf, view in zip(leaves, grad_views, strict=True):
                leaf.grad = view
        self.state = tx.init(self.params)
        _check_state_kept(tx, self.params, self.state)
        self._state_paths = _leaf_paths(self.state)
        self._tx = tx
        self._backend = backend
        self._compiled_in_call = False
        self._compiled = torch.compile(_with_own_code(_apply_step),
                                       backend=self._timed_backend, fullgraph=True,
                                       dynamic=False)
        self.compile_seconds = 0.0

    def __call__(self, grads: base.Updates) -> None:
        """Applies one step in place: copies ``grads`` into the flat gradient buffers (unless
        they are the views in :attr:`grads`), then runs the compiled update on the buffers.

        Args:
          grads: a tree with the structure of the params.

        Raises:
          ValueError: if ``grads`` does not have the params' structure.
        """
        if grads is not self.grads:
            self._gather(grads)
        self._compiled_in_call = False
        start = time.perf_counter()
        with torch.no_grad():
            self._compiled(self._tx, self.params, self._grad_buffers, self.state,
                           self._state_paths)
        if self._compiled_in_call:
            self.compile_seconds += time.perf_counter() - start

    def _gather(self, grads: base.Updates) -> None:
        """Copies into the flat gradient buffers the groups of ``grads`` that are not already
        their views."""
        gs = tm.leaves_like(grads, self._spec, "grads", reference=self.grads)
        for group, views in zip(self._groups, self._grad_views, strict=True):
            sources = [gs[i] for i in group]
            if not all(map(operator.is_, sources, views)):
                tm.copy_(views, sources)

    def zero_grad(self) -> None:
        """Sets the flat gradient buffers (and so every tensor of :attr:`grads`) to zero."""
        for buffer in self._grad_buffers:
            buffer.zero_()

    def _timed_backend(self, graph: torch.fx.GraphModule,
                       example_inputs: Sequence[torch.Tensor]) -> Any:
        """The chosen backend, noting that this call compiles; Inductor runs with
        :func:`~optax_compat._src.compilation.compile_options` and the post-grad pass
        :class:`~optax_compat._src.inductor_passes.HoistScalars`."""
        self._compiled_in_call = True
        compiler = torch._dynamo.lookup_backend(self._backend)
        options = {}
        if self._backend == "inductor":
            from optax_compat._src import inductor_passes  # Inductor loads only when used

            options = {**(compilation.compile_options() or {}),
                       "post_grad_custom_post_pass": inductor_passes.HoistScalars()}
        with (torch._inductor.config.patch(options) if options else contextlib.nullcontext()):
            return compiler(graph, example_inputs)


def fused_step(tx: base.GradientTransformation, params: base.Params, *,
               backend: str = "inductor", grads_as_views: bool = False) -> FusedStep:
    """Runs ``tx`` as one compiled, in-place pass over flat per-(dtype, device) buffers.

    **The params are re-pointed** (as FSDP's flat parameters are): each leaf of ``params``
    stays the same Python object with the same values, but its ``.data`` becomes a contiguous
    view into one flat buffer per (dtype, device). Each call of the returned step updates
    those buffers, and so every leaf, in place. Leaves must be distinct tensors (no tied
    weights listed twice).

    Each call copies the gradients into flat gradient buffers (one ``_foreach_copy_`` per
    group) unless they already are the views :attr:`FusedStep.grads`. With
    ``grads_as_views=True`` every leaf's ``.grad`` is set to its view, so that autograd
    accumulates into the flat buffer (as DDP's ``gradient_as_bucket_view``) and
    ``step({name: p.grad ...})`` copies nothing; zero them with :meth:`FusedStep.zero_grad`
    (``zero_grad(set_to_none=True)`` elsewhere replaces the views, and the step copies again).

    The step is the transformation's own ``update`` followed by
    :func:`optax_compat.apply_updates`, on the tree of flat buffers, compiled with
    ``torch.compile(fullgraph=True)`` at the first call: the same numbers as the pure path
    within Optax's own jit-vs-op-by-op rounding (global reductions sum in another order).

    Args:
      tx: a transformation that acts elementwise or on global reductions (declared with
        ``optax_compat._src.building_blocks.flat_safe``; ``chain``, ``named_chain``,
        ``inject_hyperparams``, ``apply_if_finite``, ... are iff their inner ones are).
      params: a tree (dict, list, tuple, ...) of tensors, re-pointed as described above.
      backend: the ``torch.compile`` backend (``"aot_eager"`` compiles faster, fuses nothing).
      grads_as_views: set each leaf's ``.grad`` to its view of the flat gradient buffer.

    Returns:
      A :class:`FusedStep`: ``step(grads)`` applies one step in place and returns ``None``;
      ``step.state`` is the state (of the flat tree), ``step.compile_seconds`` the seconds
      spent compiling so far.

    Raises:
      ValueError: if ``tx`` is not declared elementwise (naming the transformation that is
        not), or ``params`` has leaves that are not distinct floating-point tensors.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0]), "b": torch.tensor([0.5])}
      >>> step = optax.fused_step(optax.sgd(0.1, momentum=0.9), params, backend="aot_eager")
      >>> step({"w": torch.tensor([1.0, 1.0]), "b": torch.tensor([2.0])})
      >>> params["w"], params["b"]
      (tensor([ 0.9000, -2.1000]), tensor([0.3000]))
    """
    return FusedStep(tx, params, backend=backend, grads_as_views=grads_as_views)


def _apply_step(tx: base.GradientTransformation, params: tuple[torch.Tensor, ...],
                grads: tuple[torch.Tensor, ...], state: base.OptState,
                state_paths: tuple[tuple[Any, ...], ...]) -> None:
    """The step that is compiled: update, apply, and write everything back in place.

    The state's leaves are read at ``state_paths`` (:func:`_leaf_paths`): Dynamo cannot
    flatten every tree (one holding an empty dict, as ``inject_hyperparams`` without
    schedules does), but it can index one.

    All new values are computed before anything is written, the state before the params, so
    a state leaf that is the old params (or updates aliasing the state) read the values they
    would in the pure step.
    """
    updates, new_state = tx.update(grads, state, params)
    new_params = tm.leaves(update.apply_updates(params, updates))
    written = [(old, new) for old, new in ((_at(state, path), _at(new_state, path))
                                           for path in state_paths) if old is not new]
    tm.copy_([old for old, _ in written], [new for _, new in written])
    tm.copy_(list(params), new_params)


def _leaf_paths(tree: Any) -> tuple[tuple[Any, ...], ...]:
    """The path (keys and indices, outermost first) of each leaf of ``tree``, found eagerly.

    Raises:
      ValueError: if indexing ``tree`` along a path does not give that leaf back.
    """
    paths, leaves, _ = optree.tree_flatten_with_path(tree, none_is_leaf=tm.NONE_IS_LEAF,
                                                     namespace=tm.NAMESPACE)
    if any(_at(tree, path) is not leaf for path, leaf in zip(paths, leaves, strict=True)):
        raise ValueError("fused_step: the transformation's state must be a tree of tuples, "
                         "NamedTuples, lists and dicts, whose leaves indexing reaches.")
    return tuple(paths)


def _at(tree: Any, path: tuple[Any, ...]) -> Any:
    """The node of ``tree`` at ``path``."""
    return functools.reduce(operator.getitem, path, tree)


def _with_own_code(fn: types.FunctionType) -> types.FunctionType:
    """A copy of ``fn`` with a code object of its own.

    Dynamo keeps its compiled graphs per code object, at most ``recompile_limit`` of them;
    each :class:`FusedStep` compiles its own graph, so each gets its own code object.
    """
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


def _check_leaves(leaves: list[Any]) -> None:
    """Raises ``ValueError`` unless the leaves are distinct floating-point tensors."""
    seen: set[int] = set()
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor) or not leaf.is_floating_point():
            raise ValueError("fused_step: every leaf of params must be a floating-point "
                             f"tensor, got {type(leaf).__name__} "
                             f"{getattr(leaf, 'dtype', '')}".rstrip() + ".")
        if id(leaf) in seen:
            raise ValueError("fused_step: the same tensor appears twice among the params; "
                             "list tied parameters once.")
        seen.add(id(leaf))


def _flat_buffer(leaves: list[torch.Tensor]) -> torch.Tensor:
    """A new contiguous 1-D buffer holding the values of ``leaves`` back to back."""
    with torch.no_grad():
        return torch.cat([leaf.detach().reshape(-1) for leaf in leaves])


def _views(buffers: tuple[torch.Tensor, ...], groups: list[list[int]],
           leaves: list[torch.Tensor]) -> list[torch.Tensor]:
    """For each leaf, in leaf order, its view of its group's buffer (with the leaf's shape)."""
    views: list[torch.Tensor] = list(leaves)
    for buffer, group in zip(buffers, groups, strict=True):
        pieces = buffer.split([leaves[i].numel() for i in group])
        for i, piece in zip(group, pieces, strict=True):
            views[i] = piece.view(leaves[i].shape)
    return views


def _check_state_kept(tx: base.GradientTransformation, params: tuple[torch.Tensor, ...],
                      state: base.OptState) -> None:
    """Raises ``ValueError`` unless an update keeps the state's structure and dtypes, all its
    leaves tensors (the step writes the new state into the old buffers).

    Checked with one eager update on one element per buffer, which has the same state
    structure and dtypes as the real buffers for an elementwise transformation.
    """
    tiny_params = tuple(buffer[:1].clone() for buffer in params)
    tiny_state = tx.init(tiny_params)
    _, new_state = tx.update(tuple(torch.ones_like(p) for p in tiny_params), tiny_state,
                             tiny_params)
    leaves, spec = tm.flatten(state)
    new_leaves, new_spec = tm.flatten(new_state)
    if new_spec != spec or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        raise ValueError("fused_step: the transformation's state must be a tree of tensors "
                         "whose structure its update keeps.")
    for old, new in zip(leaves, new_leaves, strict=True):
        if old.dtype != new.dtype:
            raise ValueError(f"fused_step: the update changes a state leaf's dtype from "
                             f"{old.dtype} to {new.dtype}; it must keep it.")
