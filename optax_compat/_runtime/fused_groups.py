"""The parameter groups of ``TorchOptimizer(..., fused=True)``, stepped by the fused engine.

A :class:`FusedGroup` runs one parameter group's transformation as a
:class:`~optax_compat._runtime.fused.FusedStep`: the group's parameters become views of packed
buffers, and so do their entries in the optimizer's ``state``. Each per-parameter buffer of
``state[p]`` (``'0.mu'``) is ``p``'s view of the packed state field, each shared tensor (a step
count) the field itself or ``p``'s place in it; so ``state_dict()`` is torch's per-parameter
layout with the unfused optimizer's keys, shapes and values. The injected hyper-parameters are
tensors of the packed state that each step fills from the group's entries (``'lr'``,
``'betas'``): a scheduler changes them without a recompilation.

Whatever replaced what the group packed is noticed before the step (:meth:`FusedGroup.sync`):
a state entry that is no longer its view (``load_state_dict``, a hand edit, a device move) is
copied back into the packed buffers; a parameter whose storage changed (``p.data = ...``,
``module.to(...)``, swapped tensors) makes the optimizer pack the group anew.
"""

from __future__ import annotations

import itertools
import operator
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from optax_compat._runtime import capabilities, fused, group_layout, torch_kernels
from optax_compat._runtime.flat_safe import STACKED
from optax_compat._src import base

__all__ = ["FusedGroup", "why_not_packed"]

# The mean elements per parameter from which a kernel pass per tensor (about 5 us each for
# torch's fused SGD on a 2-core EPYC) costs less than copying new gradients into the gradient
# buffer (about 1 ns per element, 13-16 GB/s): there a whole step reading them in place wins.
KERNEL_ELEMENTS_PER_TENSOR = 2 ** 14


def why_not_packed(params: Sequence[torch.Tensor]) -> str | None:
    """``None`` if the parameters may be packed into buffers, else why not.

    They may not be when they are not plain dense floating-point tensors on a real device
    (DTensors, sparse or meta tensors), or when two of them share memory (tied weights, which
    packing would untie).
    """
    for p in params:
        if type(p) not in (torch.Tensor, torch.nn.Parameter):
            return f"a parameter is a {type(p).__name__}, which is not packed"
        if p.layout != torch.strided or p.device.type == "meta":
            return f"a parameter is a {p.layout} tensor on {p.device}, which is not packed"
        if not p.is_floating_point():
            return f"a parameter has dtype {p.dtype}"
    spans = sorted((p.untyped_storage().data_ptr(), *_span(p)) for p in params)
    for (storage, _, end), (next_storage, next_start, _) in itertools.pairwise(spans):
        if storage == next_storage and next_start < end:
            return "two parameters share memory (tied weights), which packing would untie"
    return None


def _span(p: torch.Tensor) -> tuple[int, int]:
    """The first and one-past-last element ``p`` reaches in its storage."""
    start = p.storage_offset()
    extent = 1 + sum((size - 1) * abs(stride) for size, stride in zip(p.shape, p.stride()))
    return start, start + (extent if p.numel() else 0)


class FusedGroup:
    """One parameter group on the fused engine, its state entries views of the packed state.

    Attributes:
      tx: the group's transformation.
      engine: the :class:`~optax_compat._runtime.fused.FusedStep` running it.
    """

    def __init__(self, tx: base.GradientTransformation, params: Sequence[torch.Tensor],
                 layout: group_layout.Layout, states: Sequence[dict[str, Any]], *,
                 backend: str | None) -> None:
        """Packs ``params`` (re-pointing them), and moves the values of ``states`` (their
        ``state[p]``, laid out as ``layout`` says) into the packed state, leaving the views
        there in their place.

        Raises:
          ValueError: if the parameters cannot be packed, the transformation cannot run
            fused, or its state has another structure over packed buffers (the message says
            which).
        """
        reason = why_not_packed(params)
        if reason is not None:
            raise ValueError(reason)
        self.tx = tx
        self.engine = fused.FusedStep(tx, tuple(params), backend=backend)
        stacked = self.engine.layout == STACKED
        part_states = self.engine.state if stacked else (self.engine.state,)
        part_nodes = []
        for state, part in zip(part_states, self.engine.parts, strict=True):
            nodes, treespec = group_layout.flatten(state, len(part))
            if treespec != layout.treespec:
                raise ValueError("the transformation's state has another structure over "
                                 "packed buffers than over the parameters")
            part_nodes.append(nodes)
        self._keys: list[str] = []
        self._views: list[list[torch.Tensor]] = []
        # The per-parameter fields (not the shared ones), which a parameter without gradient
        # keeps.
        self._own_views: list[list[torch.Tensor]] = []
        self._hyperparameters: list[tuple[group_layout.Entry, list[torch.Tensor]]] = []
        for index, entry in enumerate(layout.entries):
            per_part = [nodes[index] for nodes in part_nodes]
            if entry.kind is group_layout.PER_PARAMETER:
                if entry.fill is not None:
                    raise ValueError("the state has masked-out entries, which are not packed")
                self._keys.append(entry.key)
                self._views.append(self.engine.leaf_views(per_part))
                self._own_views.append(self._views[-1])
            elif entry.kind is group_layout.SHARED:
                self._keys.append(entry.key)
                self._views.append(self.engine.leaf_shared(per_part))
            elif entry.kind is group_layout.HYPERPARAMETER:
                self._hyperparameters.append((entry, per_part))
        self._grads = list(self.engine.grads)
        declared = capabilities.capabilities_of(tx)
        # The first gradient of the last step left to the whole step.
        self._whole_step_grad: weakref.ref[torch.Tensor] | None = None
        self._whole_step_reads_new_grads = (
            declared.whole_step is not None and declared.whole_step_reads_grads_in_place
            and sum(map(torch.Tensor.numel, params))
            >= KERNEL_ELEMENTS_PER_TENSOR * len(params))
        # The first gradient the last step that copied gradients copied (see ``step``).
        self._copied: weakref.ref[torch.Tensor] | None = None
        self._pointers = [p.data_ptr() for p in params]
        # What ``sync`` compares the state with: each parameter's entries, in order.
        self._entries = operator.itemgetter(*self._keys) if self._keys else None
        self._flat_views = [views[i] for i in range(len(params)) for views in self._views]
        self._restore(states, range(len(params)))

    def leaves_to_the_whole_step(self, grads: Sequence[torch.Tensor | None]) -> bool:
        """Whether a step over ``grads`` is better run by the transformation's whole in-place
        step over the parameters and their state views than packed: every gradient new (as
        backward makes them after ``zero_grad()``), a whole step that one of torch's fused
        kernels runs reading them where they are, and parameters of
        :data:`KERNEL_ELEMENTS_PER_TENSOR` elements or more on average. Copying the gradients
        into the buffer would cost a pass more than that kernel (SGD at 4M parameters in 100
        tensors: 9.5 against 6.5 ms, torch.optim's fused SGD 6.0)."""
        if not (self._whole_step_reads_new_grads
                and not any(map(operator.is_, grads, itertools.repeat(None)))
                and not any(map(operator.is_, grads, self._grads))
                and torch_kernels.takes(grads, (grads,))):
            return False
        # The gradients of the last step it took again (``zero_grad(set_to_none=False)``):
        # copied once and made the views, they cost no pass from the next step on.
        last, self._whole_step_grad = self._whole_step_grad, weakref.ref(grads[0])
        return last is None or last() is not grads[0]

    def sync(self, params: Sequence[torch.Tensor], states: Sequence[dict[str, Any]]) -> bool:
        """Takes back the state entries replaced since the last step; returns ``False``
        (changing nothing) if a parameter's storage changed, so that the group must be packed
        anew."""
        if list(map(torch.Tensor.data_ptr, params)) != self._pointers:
            return False
        if self._entries is None:
            return True
        try:  # one pass in C when nothing was replaced
            current = map(self._entries, states)
            if len(self._keys) != 1:
                current = itertools.chain.from_iterable(current)
            if all(map(operator.is_, current, self._flat_views)):
                return True
        except KeyError:
            pass
        self._restore(states, range(len(states)))
        return True

    def _restore(self, states: Sequence[dict[str, Any]], indices: Iterable[int]) -> None:
        """Copies the entries of ``states[i]`` (``i`` in ``indices``) that are not their views
        into the packed state, and puts the views in their place."""
        with torch.no_grad():
            for i in indices:
                state = states[i]
                for key, views in zip(self._keys, self._views, strict=True):
                    value, view = state.get(key), views[i]
                    if value is view:
                        continue
                    if not isinstance(value, torch.Tensor) or value.shape != view.shape:
                        raise RuntimeError(
                            f"The optimizer state of a parameter has {key!r} = "
                            f"{getattr(value, 'shape', value)!r} where the fused optimizer "
                            f"keeps a tensor of shape {tuple(view.shape)}: it was changed by "
                            "hand or loaded from another optimizer.")
                    view.copy_(value)
                    state[key] = view

    def step(self, group: Mapping[str, Any], params: Sequence[torch.Tensor],
             grads: Sequence[torch.Tensor | None],
             densify: Callable[[torch.Tensor, int], torch.Tensor]) -> None:
        """One step of the group in place: its hyper-parameters from ``group``, the gradients
        ``grads`` (the parameters whose gradient is ``None`` keep their values and their
        per-parameter state, as in the unfused step; a sparse one is passed to ``densify``
        with its position).

        A gradient that is the parameter's own ``.grad`` but not its view of the gradient
        buffer is copied there, and the view becomes the ``.grad`` (same values), so that the
        next backward pass accumulates into the buffer (``zero_grad(set_to_none=False)``) and
        the next step copies nothing. That is done at the first step that copies, and at a
        step whose gradients are those of the last one that copied; not while backward makes
        new ones after ``zero_grad()`` set them to ``None`` (the views would not stay: setting
        the ``.grad`` of a thousand parameters costs about a millisecond).
        """
        for entry, nodes in self._hyperparameters:
            value = group[entry.key]
            value = value if entry.component is None else value[entry.component]
            for node in nodes:
                if isinstance(value, torch.Tensor):
                    node.copy_(value)
                else:
                    node.fill_(value)
        if all(map(operator.is_, grads, self._grads)):  # what backward into the views leaves
            self.engine(self.engine.grads)
            return
        if any(map(operator.is_, grads, itertools.repeat(None))) or any(
                map(operator.is_, grads, self._grads)):
            skipped = [i for i, grad in enumerate(grads) if grad is None]
            copied = [i for i, (grad, view) in enumerate(zip(grads, self._grads, strict=True))
                      if grad is not None and grad is not view]
            sources, targets = [grads[i] for i in copied], [self._grads[i] for i in copied]
        else:  # every gradient new (backward after ``zero_grad()``): no per-parameter lists
            skipped, copied, sources, targets = [], range(len(grads)), grads, self._grads
        if any(map(operator.attrgetter("is_sparse"), sources)):
            sources = [densify(source, i) if source.is_sparse else source
                       for i, source in zip(copied, sources, strict=True)]
        self._copy(targets, sources)
        if copied:
            previous, self._copied = self._copied, weakref.ref(sources[0])
            if previous is None or previous() is sources[0]:
                for i, source in zip(copied, sources, strict=True):
                    if source is params[i].grad:
                        params[i].grad = self._grads[i]
        own = self._own_views
        kept = [(i, params[i].clone(), [views[i].clone() for views in own]) for i in skipped]
        for i in skipped:
            self._grads[i].zero_()
        self.engine(self.engine.grads)
        for i, value, buffers in kept:
            params[i].copy_(value)
            torch._foreach_copy_([views[i] for views in own], buffers)

    @staticmethod
    def _copy(targets: Sequence[torch.Tensor], sources: Sequence[torch.Tensor]) -> None:
        """Copies ``sources`` into the gradient views ``targets``.

        Raises:
          RuntimeError: naming the shapes, where a gradient's shape is not its parameter's.
        """
        try:
            torch._foreach_copy_(list(targets), list(sources))
        except RuntimeError as error:  # shapes are checked only then: a pass costs ~1 ms per
            # 10,000 parameters, and ``.grad`` takes its parameter's shape anyway
            for target, source in zip(targets, sources, strict=True):
                if source.shape != target.shape:
                    raise RuntimeError(f"A gradient has shape {tuple(source.shape)}, its "
                                       f"parameter {tuple(target.shape)}.") from error
            raise
