"""Fused steps: a transformation compiled into a few passes over packed parameter buffers.

:func:`fused_step` moves the parameters into a few contiguous buffers, the way FSDP's flat
parameters and ZeRO do: the user's tensors (or ``nn.Parameter``\\ s) stay the same Python objects
and keep their values, but their ``.data`` becomes a view of a buffer. The transformation then
runs on the buffers — its own ``update``, the code that gives Optax's numbers — and
``torch.compile`` turns update, ``apply_updates`` and the write-back of the state into a few
fused kernels that write the parameters and the state buffers in place.

The buffers follow the transformation's layout (:mod:`.building_blocks.flat_safe`):

* ``FLAT``, for transformations that act elementwise or on global reductions (a global norm, a
  tree dot product): one 1-D buffer per (dtype, device) group, the update run on the tree of
  those buffers.
* ``STACKED``, for transformations that act leaf by leaf (Adafactor's row and column means,
  LAMB's trust ratios, NovoGrad's layer norms): one buffer per (dtype, device, shape) group,
  holding its leaves stacked along a new first axis, the update run on each stack under
  ``torch.func.vmap``. A model's many layers of one shape then cost one kernel, not one each.

Nothing is compiled until the first step, so code that never calls :func:`fused_step` never
pays a compilation. Inductor's FX-graph and AOTAutograd caches (on by default) keep the
compiled kernels across processes.
"""

from __future__ import annotations

import functools
import operator
import time
import types
import warnings
from collections.abc import Sequence
from typing import Any

import optree
import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import compilation, huge_pages
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, update

# Inductor stores a value read by two kernels when its expression reads more than
# ``realize_reads_threshold`` (default 4) buffers, and recomputes it otherwise. In the stacked
# layout such a value is typically the update before a per-leaf reduction (LAMB's trust ratio,
# SM3's per-axis maxima, Adafactor's factored moments): a buffer the size of a stack, freshly
# allocated, so page-faulted, at every step. Recomputing it after the reduction moves fewer
# bytes (at 32M parameters in 200 leaves: LAMB 158 -> 44 ms, SM3 176 -> 47 ms, the others
# within noise; benchmarks/results/bench_all_per_leaf_ac.md). The flat layout keeps the
# default: recomputing made ADAN 41 -> 55 ms.
STACKED_REALIZE_READS_THRESHOLD = 16


class FusedStep:
    """One optimizer step over packed buffers, compiled on its first call.

    Build it with :func:`fused_step`.

    Attributes:
      layout: ``"flat"`` or ``"stacked"`` (see the module's docstring), the first of the two
        the transformation allows.
      params: the parameter buffers, a tuple with one 1-D tensor per group (``"flat"``: per
        (dtype, device); ``"stacked"``: per (dtype, device, shape)), in the order the groups
        first appear among the leaves; every leaf of the user's params is a view of one of
        them.
      grads: the user's params' structure, each leaf a view of a gradient buffer with that
        parameter's shape. Gradients passed as these very tensors are not copied.
      state: the transformation's state, updated in place. ``"flat"``: the state for the tree
        of :attr:`params`. ``"stacked"``: a tuple with one state per stack size, each for the
        tuple of stacks (``(size, *shape)`` views of :attr:`params`) of that size, every leaf
        with a leading axis of that size (a per-leaf scalar such as the step count repeated).
      parts: what each part of the update runs on, as buffer numbers (indices into
        :attr:`params`): one part holding every buffer (``"flat"``), or one per stack size.
      compile_seconds: seconds spent in the calls that compiled (tracing, code generation or
        a cache hit, and the one step run then); 0.0 before the first call.
    """

    def __init__(self, tx: base.GradientTransformation, params: base.Params, *,
                 backend: str | None = "inductor", grads_as_views: bool = False,
                 validate: bool = False) -> None:
        """See :func:`fused_step`."""
        reasons = [bb.why_not(tx, layout) for layout in bb.LAYOUTS]
        if None not in reasons:
            raise ValueError(f"fused_step: {', and '.join(dict.fromkeys(reasons))}; fused_step "
                             "runs transformations that act elementwise, on global reductions "
                             "or leaf by leaf.")
        self.layout = bb.LAYOUTS[reasons.index(None)]
        stacked = self.layout == bb.STACKED
        leaves, self._spec = tm.flatten(params)
        _check_leaves(leaves)
        if validate:
            _validate(tx, leaves)
        groups: dict[tuple[Any, ...], list[int]] = {}
        for index, leaf in enumerate(leaves):
            key = (leaf.dtype, leaf.device) + ((tuple(leaf.shape),) if stacked else ())
            groups.setdefault(key, []).append(index)
        self._groups = list(groups.values())
        self.params = tuple(_flat_buffer([leaves[i] for i in group]) for group in self._groups)
        self._grad_buffers = tuple(map(huge_pages.zeros_like, self.params))
        param_views, grad_views = _views(self.params, self._groups, leaves), _views(
            self._grad_buffers, self._groups, leaves)
        with torch.no_grad():
            for leaf, view in zip(leaves, param_views, strict=True):
                leaf.data = view
        self._leaves, self._leaf_grad_views = leaves, grad_views
        self._grad_views = [[grad_views[i] for i in group] for group in self._groups]
        self.grads = tm.unflatten(self._spec, grad_views)
        if grads_as_views:
            for leaf, view in zip(leaves, grad_views, strict=True):
                leaf.grad = view
        # What the update runs on, in parts: the flat buffers at once, or the stacks of each
        # stack size (one ``vmap``, whose batch size is that size).
        if stacked:
            sizes: dict[int, list[int]] = {}
            for number, group in enumerate(self._groups):
                sizes.setdefault(len(group), []).append(number)
            parts = list(sizes.values())
            shape_of = [(len(group), *leaves[group[0]].shape) for group in self._groups]
        else:
            parts = [list(range(len(self._groups)))]
            shape_of = [tuple(buffer.shape) for buffer in self.params]
        self.parts = parts
        self._param_parts = [tuple(self.params[g].view(shape_of[g]) for g in part)
                             for part in parts]
        self._grad_parts = [tuple(self._grad_buffers[g].view(shape_of[g]) for g in part)
                            for part in parts]
        init = torch.func.vmap(tx.init) if stacked else tx.init
        states = [_own_memory(init(part)) for part in self._param_parts]
        for part in self._param_parts:
            _check_state_kept(tx, part, stacked)
        self.state = tuple(states) if stacked else states[0]
        self._state_paths = [_leaf_paths(state) for state in states]
        self._tx = tx
        self._backend = backend
        self._compiled_in_call = False
        self._compiled = _apply_step if backend is None else torch.compile(
            _with_own_code(_apply_step), backend=self._timed_backend, fullgraph=True,
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
        states = self.state if self.layout == bb.STACKED else (self.state,)
        with torch.no_grad():
            self._compiled(self._tx, list(zip(self._param_parts, self._grad_parts, states,
                                              strict=True)),
                           self._state_paths, self.layout == bb.STACKED)
        if self._compiled_in_call:
            self.compile_seconds += time.perf_counter() - start

    def leaf_views(self, per_buffer: Sequence[Sequence[torch.Tensor]]) -> list[torch.Tensor]:
        """Each leaf's share of a state field that holds a tensor per buffer.

        Args:
          per_buffer: for each part of :attr:`state` (``"flat"``: the one state; ``"stacked"``:
            the state of each stack size), the field's tuple with one tensor per buffer of the
            part: a 1-D tensor as long as the buffer (``"flat"``) or a stack with the leaves
            along its first axis (``"stacked"``), such as Adam's ``mu``.

        Returns:
          For each leaf, in leaf order, its view of the field (the leaf's shape for a field
          shaped like the buffers).
        """
        if self.layout != bb.STACKED:  # one part, its buffers in order: split as the params
            return _views(tuple(per_buffer[0]), self._groups, self._leaves)
        views: list[torch.Tensor] = list(self._leaves)
        for part, stacks in zip(self.parts, per_buffer, strict=True):
            for number, stack in zip(part, stacks, strict=True):
                for i, piece in zip(self._groups[number], stack.unbind(0), strict=True):
                    views[i] = piece
        return views

    def leaf_shared(self, per_part: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Each leaf's share of a state field shared by all the leaves of a part (a step count).

        Args:
          per_part: the field in each part of :attr:`state`: one tensor (``"flat"``), or one
            per stack size with the stacks' positions along its first axis (``"stacked"``,
            where ``vmap`` gave each position its own).

        Returns:
          For each leaf, in leaf order, the field (``"flat"``) or its view of it.
        """
        if self.layout != bb.STACKED:
            return [per_part[0]] * len(self._leaves)
        views: list[torch.Tensor] = list(self._leaves)
        for part, tensor in zip(self.parts, per_part, strict=True):
            for number in part:
                for position, i in enumerate(self._groups[number]):
                    views[i] = tensor[position]
        return views

    def _gather(self, grads: base.Updates) -> None:
        """Copies into the flat gradient buffers the groups of ``grads`` that are not already
        their views."""
        gs = tm.leaves_like(grads, self._spec, "grads", reference=self.grads)
        for group, views in zip(self._groups, self._grad_views, strict=True):
            sources = [gs[i] for i in group]
            if not all(map(operator.is_, sources, views)):
                tm.copy_(views, sources)

    def zero_grad(self) -> None:
        """Zeroes the gradients, as ``torch.optim``'s ``zero_grad`` does: sets the flat
        gradient buffers (and so every tensor of :attr:`grads`) to zero, and to ``None`` the
        ``.grad`` of each parameter that is not its view of them (autograd's own tensor, which
        the next backward pass would otherwise add to)."""
        for buffer in self._grad_buffers:
            buffer.zero_()
        for leaf, view in zip(self._leaves, self._leaf_grad_views, strict=True):
            if leaf.grad is not None and leaf.grad is not view:
                leaf.grad = None

    def _timed_backend(self, graph: torch.fx.GraphModule,
                       example_inputs: Sequence[torch.Tensor]) -> Any:
        """The chosen backend, noting that this call compiles; Inductor runs with the post-grad
        pass :class:`~optax_compat._runtime.inductor_passes.HoistScalars` and, when a buffer is on
        the CPU, with :func:`~optax_compat._runtime.compilation.compile_options` and, for the
        stacked layout, :data:`STACKED_REALIZE_READS_THRESHOLD` and
        :func:`~optax_compat._runtime.inductor_passes.per_leaf_loops` (settings of, and measured
        with, Inductor's C++ code; a GPU's kernels compile with Inductor's own). Our passes
        fall back to stock Inductor where they do not fit this PyTorch
        (:func:`~optax_compat._runtime.inductor_passes.compile_with_passes`)."""
        self._compiled_in_call = True
        compiler = torch._dynamo.lookup_backend(self._backend)
        if self._backend != "inductor":
            return compiler(graph, example_inputs)
        inductor_passes = _inductor_passes()
        if inductor_passes is None:
            return compiler(graph, example_inputs)
        on_cpu = any(buffer.device.type == "cpu" for buffer in self.params)
        leaf_loops = on_cpu and self.layout == bb.STACKED
        options = dict(compilation.compile_options() or {}) if on_cpu else {}
        if leaf_loops:
            options["realize_reads_threshold"] = STACKED_REALIZE_READS_THRESHOLD
        with torch._inductor.config.patch(options):
            return inductor_passes.compile_with_passes(compiler, graph, example_inputs,
                                                       leaf_loops=leaf_loops)


@functools.cache
def _inductor_passes() -> types.ModuleType | None:
    """:mod:`optax_compat._runtime.inductor_passes`, imported on first use (importing Inductor
    takes seconds), or ``None`` with a one-time warning where it cannot be imported on this
    PyTorch (Inductor's private modules moved): fused steps then compile with stock Inductor,
    with the same numbers."""
    try:
        from optax_compat._runtime import inductor_passes
    except Exception as error:  # any failure of a private import: stock Inductor decides
        warnings.warn(f"optax_compat.fused_step: optax_compat's Inductor passes cannot load on "
                      f"torch {torch.__version__} ({type(error).__name__}: {error}), so fused "
                      "steps compile with stock Inductor (same numbers, maybe slower).",
                      UserWarning, stacklevel=4)
        return None
    return inductor_passes


def fused_step(tx: base.GradientTransformation, params: base.Params, *,
               backend: str | None = "inductor", grads_as_views: bool = False,
               validate: bool = False) -> FusedStep:
    """Runs ``tx`` as a few compiled, in-place passes over packed parameter buffers.

    **The params are re-pointed** (as FSDP's flat parameters are): each leaf of ``params``
    stays the same Python object with the same values, but its ``.data`` becomes a contiguous
    view into a buffer. Each call of the returned step updates those buffers, and so every
    leaf, in place. Leaves must be distinct tensors (no tied weights listed twice).

    The buffers follow what ``tx`` does (see :attr:`FusedStep.layout`):

    * a transformation that acts elementwise or on global reductions runs on one flat buffer
      per (dtype, device);
    * one that acts leaf by leaf (per-leaf norms, shapes, matrix products: Adafactor, LAMB,
      LARS, NovoGrad, SM3, Fromage) runs on one buffer per (dtype, device, shape), its leaves
      stacked along a new first axis, under ``torch.func.vmap``.

    Each call copies the gradients into gradient buffers (one ``_foreach_copy_`` per group)
    unless they already are the views :attr:`FusedStep.grads`. With ``grads_as_views=True``
    every leaf's ``.grad`` is set to its view, so that autograd accumulates into the buffer
    (as DDP's ``gradient_as_bucket_view``) and ``step({name: p.grad ...})`` copies nothing;
    zero them with :meth:`FusedStep.zero_grad` (``zero_grad(set_to_none=True)`` elsewhere
    replaces the views, and the step copies again).

    The step is the transformation's own ``update`` followed by
    :func:`optax_compat.apply_updates`, on the buffers, compiled with
    ``torch.compile(fullgraph=True)`` at the first call: the same numbers as the pure path
    within Optax's own jit-vs-op-by-op rounding (reductions sum in another order).

    Args:
      tx: a transformation declared elementwise, with global reductions, or per leaf (your own
        with :mod:`optax_compat.capabilities`; ``chain``, ``named_chain``,
        ``inject_hyperparams``, ``apply_if_finite``, ... allow what their inner ones do).
      params: a tree (dict, list, tuple, ...) of tensors, re-pointed as described above.
      backend: the ``torch.compile`` backend (``"aot_eager"`` compiles faster, fuses nothing),
        or ``None`` to run eagerly: nothing compiles, and each op runs once per buffer or
        stack instead of once per leaf, allocating its result (as the pure path does).
      grads_as_views: set each leaf's ``.grad`` to its view of the gradient buffer.
      validate: first test what ``tx`` declares, on small copies of the first leaves with
        random gradients (:func:`optax_compat.testing.check_declarations`): a wrong
        declaration raises here instead of giving wrong numbers. Skipped on the meta device.

    Returns:
      A :class:`FusedStep`: ``step(grads)`` applies one step in place and returns ``None``;
      ``step.state`` is the state (of the buffers), ``step.compile_seconds`` the seconds
      spent compiling so far.

    Raises:
      ValueError: if ``tx`` allows neither layout (naming the transformations that do not),
        its update cannot run under ``vmap`` when it needs to, ``params`` has leaves that
        are not distinct floating-point tensors, or (``validate=True``) a check of its
        declarations fails.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0]), "b": torch.tensor([0.5])}
      >>> step = optax.fused_step(optax.sgd(0.1, momentum=0.9), params, backend="aot_eager")
      >>> step({"w": torch.tensor([1.0, 1.0]), "b": torch.tensor([2.0])})
      >>> params["w"], params["b"]
      (tensor([ 0.9000, -2.1000]), tensor([0.3000]))
    """
    return FusedStep(tx, params, backend=backend, grads_as_views=grads_as_views,
                     validate=validate)


# The sample ``validate=True`` checks: the first leaves, each cut to a few elements per axis.
VALIDATION_LEAVES, VALIDATION_EXTENT = 8, 3


def _validate(tx: base.GradientTransformation, leaves: list[torch.Tensor]) -> None:
    """Raises ``ValueError`` unless ``tx`` passes the checks of its declarations on a sample
    of ``leaves`` (see :func:`fused_step`'s ``validate``)."""
    if any(leaf.device.type == "meta" for leaf in leaves):
        return
    from optax_compat import testing  # the checks live with the testing toolkit

    cut = tuple(slice(0, VALIDATION_EXTENT) for _ in range(max(leaf.dim() for leaf in leaves)))
    sample = [leaf.detach()[cut[:leaf.dim()]].clone() for leaf in leaves[:VALIDATION_LEAVES]]
    grads = [testing.seeded_randn(*leaf.shape, dtype=leaf.dtype, seed=number,
                                  device=leaf.device) for number, leaf in enumerate(sample)]
    try:
        testing.check_declarations(tx, sample, grads)
    except AssertionError as error:
        raise ValueError(f"fused_step(validate=True): {error}") from None


def _apply_step(tx: base.GradientTransformation,
                parts: list[tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...], Any]],
                state_paths: list[tuple[tuple[Any, ...], ...]], stacked: bool) -> None:
    """The step that is compiled: update, apply, and write everything back in place.

    Each part is ``(params, grads, state)``: the flat buffers, or the stacks of one size, run
    under ``torch.func.vmap``. The state's leaves are read at ``state_paths``
    (:func:`_leaf_paths`): Dynamo cannot flatten every tree (one holding an empty dict, as
    ``inject_hyperparams`` without schedules does), but it can index one.

    All new values are computed before anything is written, the state before the params, so
    a state leaf that is the old params (or updates aliasing the state) read the values they
    would in the pure step.
    """
    new_values = functools.partial(_new_values, tx)
    if stacked:
        new_values = torch.func.vmap(new_values)
    for (params, grads, state), paths in zip(parts, state_paths, strict=True):
        new_params, new_state = new_values(params, grads, state)
        written = [(old, new) for old, new in ((_at(state, path), _at(new_state, path))
                                               for path in paths) if old is not new]
        tm.copy_([old for old, _ in written], [new for _, new in written])
        tm.copy_(list(params), list(new_params))


def _new_values(tx: base.GradientTransformation, params: tuple[torch.Tensor, ...],
                grads: tuple[torch.Tensor, ...], state: base.OptState,
                ) -> tuple[tuple[torch.Tensor, ...], base.OptState]:
    """The params after one pure step of ``tx``, and its new state."""
    updates, new_state = tx.update(grads, state, params)
    return tuple(tm.leaves(update.apply_updates(params, updates))), new_state


def _own_memory(state: base.OptState) -> base.OptState:
    """``state`` with every tensor leaf in contiguous memory of its own (``vmap`` returns a
    per-leaf scalar, such as a step count, as an expanded view), large ones on huge pages."""
    return tm.tree_map(lambda x: huge_pages.copy_of(x) if isinstance(x, torch.Tensor) else x,
                       state)


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
    """A new contiguous 1-D buffer holding the values of ``leaves`` back to back (on huge pages
    where it spans them)."""
    with torch.no_grad():
        return huge_pages.cat([leaf.detach().reshape(-1) for leaf in leaves])


def _views(buffers: tuple[torch.Tensor, ...], groups: list[list[int]],
           leaves: list[torch.Tensor]) -> list[torch.Tensor]:
    """For each leaf, in leaf order, its view of its group's buffer (with the leaf's shape)."""
    views: list[torch.Tensor] = list(leaves)
    for buffer, group in zip(buffers, groups, strict=True):
        pieces = buffer.split([leaves[i].numel() for i in group])
        for i, piece in zip(group, pieces, strict=True):
            views[i] = piece.view(leaves[i].shape)
    return views


def _check_state_kept(tx: base.GradientTransformation, buffers: tuple[torch.Tensor, ...],
                      stacked: bool) -> None:
    """Raises ``ValueError`` unless an update keeps the state's structure and dtypes, all its
    leaves tensors (the step writes the new state into the old buffers), and, for stacks,
    unless the update runs under ``torch.func.vmap``.

    Checked with one eager step on the first element of each flat buffer (an elementwise
    transformation has the same state structure and dtypes on it) or the first leaf of each
    stack.
    """
    tiny = tuple(buffer[:1].clone() for buffer in buffers)
    init, new_values = tx.init, functools.partial(_new_values, tx)
    if stacked:
        init, new_values = torch.func.vmap(init), torch.func.vmap(new_values)
    try:
        state = init(tiny)
        _, new_state = new_values(tiny, tuple(torch.ones_like(b) for b in tiny), state)
    except (RuntimeError, TypeError, ValueError) as error:
        if not stacked:
            raise
        raise ValueError(f"fused_step: the transformation cannot run leaf by leaf under "
                         f"torch.func.vmap: {error}") from error
    leaves, spec = tm.flatten(state)
    new_leaves, new_spec = tm.flatten(new_state)
    if new_spec != spec or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        raise ValueError("fused_step: the transformation's state must be a tree of tensors "
                         "whose structure its update keeps.")
    for old, new in zip(leaves, new_leaves, strict=True):
        if old.dtype != new.dtype:
            raise ValueError(f"fused_step: the update changes a state leaf's dtype from "
                             f"{old.dtype} to {new.dtype}; it must keep it.")
