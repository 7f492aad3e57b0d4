"""Any gradient transformation as a real :class:`torch.optim.Optimizer`.

PyTorch's training tools (learning-rate schedulers, ``GradScaler``, ``clip_grad_norm_``,
``torch.distributed.checkpoint``, Lightning) drive optimizers through the ``torch.optim``
protocol: ``param_groups`` dicts holding the hyper-parameters, ``state`` keyed by parameter,
``step(closure)``, ``zero_grad``, step hooks and ``state_dict`` in torch's layout.
:class:`TorchOptimizer` speaks that protocol for any ``optax_compat`` transformation:

* each parameter group is one tree (a tuple of its tensors) with its own transformation state,
  created when the group is added; the transformation sees the whole group at once, so global
  operations (``clip_by_global_norm``, masks) act on the group;
* ``state[p]`` holds ``p``'s share of the group state: each per-parameter buffer under the path
  of its field (``'0.mu'``, ``'inner_state.0.nu'``) and the group-wide tensors (step counts)
  under theirs, shared by every parameter of the group (as torch's per-parameter ``'step'``);
  ``state`` is the optimizer's source of truth, so tools that read or replace ``state[p]``
  (DCP, ZeRO, Lightning's device moves) see and change what the next step uses;
* the numeric hyper-parameters of an :func:`~optax_compat.inject_hyperparams` transformation
  (anywhere in the transformation, not scheduled) are group entries that feed the
  transformation at every step: ``learning_rate`` is the group's ``'lr'``, ``b1`` and ``b2``
  are its ``'betas'`` pair, other names are kept. So ``StepLR``, ``OneCycleLR`` (through
  ``'betas'`` or ``'momentum'``), ``ReduceLROnPlateau`` and per-group values work;
* parameters whose ``.grad`` is ``None`` are skipped as by ``torch.optim``: they and their
  buffers keep their values (a step count shared by the group still advances).
"""

from __future__ import annotations

import functools
import itertools
import operator
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from optax_compat._runtime import checkpoint, group_layout, tree_math
from optax_compat._runtime.adam_engine import inplace_step
from optax_compat._runtime.fused_groups import FusedGroup
from optax_compat._src import base

__all__ = ["TorchOptimizer", "torch_optimizer"]

# Keys torch's optimizers and schedulers use for hyper-parameters: in a group of a
# transformation that has no such hyper-parameter they would be silently ignored.
_TORCH_HYPERPARAMETERS = frozenset({"lr", "betas", "momentum", "weight_decay", "eps"})


class StateDict(defaultdict):
    """``torch.optim``'s ``state`` (a ``defaultdict(dict)`` keyed by parameter) that counts the
    changes of its own entries in :attr:`version`, so that a step may keep the ``state[p]``
    dicts it looked up while no entry was set or removed (a tensor's hash is a Python call)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.version = 0

    def __setitem__(self, key: Any, value: Any) -> None:
        self.version += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self.version += 1
        super().__delitem__(key)

    def pop(self, *args: Any) -> Any:
        self.version += 1
        return super().pop(*args)

    def popitem(self) -> Any:
        self.version += 1
        return super().popitem()

    def clear(self) -> None:
        self.version += 1
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.version += 1
        super().update(*args, **kwargs)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self.version += 1
        return super().setdefault(key, default)

    def __ior__(self, other: Any) -> StateDict:
        self.version += 1
        return super().__ior__(other)


class TorchOptimizer(torch.optim.Optimizer):
    """A :class:`torch.optim.Optimizer` that steps with an ``optax_compat`` transformation.

    .. code-block:: python

        tx = optax_compat.inject_hyperparams(optax_compat.adamw)(
            learning_rate=1e-3, weight_decay=0.01)
        optimizer = optax_compat.TorchOptimizer(model.parameters(), tx)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
        for x, y in data:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
            scheduler.step()

    See the module documentation for how groups, ``state`` and hyper-parameters map onto the
    transformation. Gradients are taken from ``.grad``; the update is added to the parameters in
    place, under ``torch.no_grad``. Sparse gradients are refused (the transformations are dense).
    ``state_dict()`` is torch's layout with tensors only, so it loads with ``torch.load(...,
    weights_only=True)``; :meth:`load_state_dict` checks it against the running state first and
    raises without changing anything if it does not fit.

    ``torch.compile(optimizer.step)`` and a compiled training step work as with
    ``torch.optim``: a step compiles with no graph break, and, as there, a tensor ``'lr'`` in
    the groups lets a scheduler change it without recompiling.

    With ``fused=True`` (as ``torch.optim``'s flag is spelled) each group steps on the fused
    engine (:func:`optax_compat.fused_step`), a few compiled passes over packed buffers, from
    its first step on:

    * the group's parameters become views of the buffers (as FSDP's flat parameters), and so
      do their ``state[p]`` entries: ``state_dict()`` has the unfused optimizer's keys, shapes
      and values, and checkpoints load either way;
    * the injected hyper-parameters are tensors that each step fills from the group's entries,
      so schedulers change them without recompiling;
    * a gradient is copied into the gradient buffer, and the parameter's ``.grad`` becomes its
      view of it (same values), as DDP's ``gradient_as_bucket_view`` does: a backward pass then
      accumulates into the buffer and the next step copies nothing, as long as the gradients
      are zeroed rather than set to ``None`` (``zero_grad(set_to_none=False)``, which gives
      the same numbers where every parameter gets a gradient at every step). After
      ``zero_grad()`` (``set_to_none=True``, torch's default) backward makes new gradients,
      which each step copies (the views are then no longer set as ``.grad``): one more pass
      over the gradients, which makes a step over few large tensors slower than
      ``torch.optim``'s fused one (which reads them where they are; see
      ``benchmarks/bench_all.py --fresh-gradients``). Where the transformation's whole
      in-place step is such a kernel (``sgd`` with momentum and a constant learning rate, on
      ``torch._fused_sgd_``) and the tensors are large (16,384 elements or more on average),
      a step over new gradients runs it over the packed views instead, reading them in place;
    * a replaced state entry (``load_state_dict``, a hand edit, a new ``state[p]`` dict) is
      copied back into the buffers before the step, and a parameter whose storage changed
      (``p.data = ...``, ``module.to(...)``) makes the group pack anew. ``state`` is a
      :class:`StateDict`, torch's ``defaultdict`` counting the changes of its entries, so a
      step looks the ``state[p]`` dicts up again only after one;
    * a group whose transformation cannot fuse (see :func:`~optax_compat.fused_step`), or
      whose parameters cannot be packed (DTensors, tied weights), warns once, saying why, and
      steps unfused.
    """

    def __init__(self, params: Iterable[Any], tx: base.GradientTransformation, *,
                 inplace: bool = False, fused: bool | None = None,
                 fused_backend: str | None = "inductor") -> None:
        """Builds the optimizer.

        Args:
          params: tensors, ``(name, tensor)`` pairs, or parameter-group dicts with a ``'params'``
            entry and hyper-parameter values for that group (as for any ``torch.optim``
            optimizer).
          tx: the transformation, e.g. ``optax_compat.chain(optax_compat.clip_by_global_norm(1.0),
            optax_compat.inject_hyperparams(optax_compat.adam)(learning_rate=1e-3))``.
          inplace: pass ``inplace=True`` to the transformation: it reuses the state buffers
            (faster; nothing else changes). It writes into copies of the ``.grad`` tensors,
            which a step only reads, as ``torch.optim``'s do. (A transformation with a whole
            in-place step, :func:`optax_compat.inplace_step`, steps with it either way.)
          fused: step on the fused engine (see above); ``None`` or ``False`` (the default)
            does not, as in ``torch.optim``.
          fused_backend: the ``torch.compile`` backend of the fused steps, or ``None`` to run
            them eagerly on the packed buffers (see :func:`~optax_compat.fused_step`).

        Raises:
          TypeError: if ``tx`` is not a gradient transformation.
          ValueError: if a group names a torch hyper-parameter (``'lr'``, ``'betas'``, ...) that
            the transformation does not inject.
        """
        if not isinstance(tx, base.GradientTransformation):
            raise TypeError(f"{tx!r} (type: {type(tx).__name__}) is not an optax_compat "
                            "GradientTransformation")
        self.tx = base.with_extra_args_support(tx)
        self.inplace = inplace
        self.fused = bool(fused)
        self.fused_backend = fused_backend
        self._layouts: list[group_layout.Layout] = []
        # Per group: what its layout was planned for (see ``group_structure``).
        self._structures: list[Any] = []
        # Per group: its FusedGroup, the reason it steps unfused, or None before its first step.
        self._fused: list[FusedGroup | str | None] = []
        # What the fused groups packed anew since spent compiling.
        self._retired_compile_seconds = 0.0
        # Per group: the ``state[p]`` dicts of its parameters, while ``state`` keeps them.
        self._group_states: list[tuple[Any, ...] | None] = []
        # While a fused step asks for the transformation: the group and its FusedGroup, whose
        # parameters it just found unchanged.
        self._checked: tuple[Mapping[str, Any], FusedGroup] | None = None
        super().__init__(params, self.initial_defaults())
        self.state = StateDict(dict, self.state)

    # The hook points a subclass overrides (``torchopt_fn.Optimizer`` does): what every group
    # starts with, the transformation that steps a group, and a whole in-place step for it.

    def initial_defaults(self) -> dict[str, Any]:
        """Hyper-parameters every group gets unless it sets them (none here; a hook)."""
        return {}

    def group_transformation(self, group: Mapping[str, Any]
                             ) -> base.GradientTransformationExtraArgs:
        """The transformation that steps ``group`` (``tx`` for every group here; a hook)."""
        del group
        return self.tx

    def group_whole_step(self, group: Mapping[str, Any]) -> Callable[..., Any] | None:
        """A whole in-place step for ``group``, run instead of its transformation: here that of
        ``tx`` (:func:`optax_compat.inplace_step`: Adam's and AdamW's), since the optimizer
        owns its state; a hook.

        It is called ``step(params, grads, state, *, keep_grads=True) -> state``, writes into
        the parameters and the state buffers, and gives the numbers of
        :meth:`group_transformation`'s update (see :func:`optax_compat.inplace_step`).
        """
        del group
        return inplace_step(self.tx)

    def group_structure(self, group: Mapping[str, Any]) -> Any:
        """What decides the structure of ``group``'s state, compared with ``==`` before each
        step (``None`` here, as ``tx`` never changes; a hook).

        A subclass whose group transformation changes with the group's entries returns what
        changes its state's structure (``torchopt_fn``'s optimizers: which entries are zero,
        a zero weight decay being no term of the chain). When it changes, the group's state
        is planned anew: each entry is carried over to the same field in the new chain, in
        order (``'1.trace'`` to ``'0.trace'`` when a term before it goes), and the new
        chain's other entries start from its ``init``.
        """
        del group

    def group_number_dtype(self, group: Mapping[str, Any]) -> torch.dtype:
        """The dtype eager arithmetic gives a Python number beside ``group``'s parameters:
        float64 beside a float64 one, else float32 (beside bfloat16 and float16 ones too).

        For the fused group whose transformation a step is asking for, its parameters just
        checked unchanged, it is read off the few packed buffers, not the parameters (a
        subclass building tensor hyper-parameters calls it at every step).
        """
        checked = self._checked
        tensors = (checked[1].engine.params if checked is not None and checked[0] is group
                   else group["params"])
        return functools.reduce(torch.promote_types, {tensor.dtype for tensor in tensors},
                                torch.float32)

    def __getstate__(self) -> dict[str, Any]:
        """Pickles (and deep-copies) the transformation and layouts with torch's fields."""
        return {**super().__getstate__(), "tx": self.tx, "inplace": self.inplace,
                "_layouts": self._layouts, "_structures": self._structures,
                "fused": self.fused,
                "fused_backend": self.fused_backend,
                "_fused": [None if isinstance(x, FusedGroup) else x for x in self._fused],
                "_group_states": [None] * len(self._group_states), "_checked": None,
                "_retired_compile_seconds": self._retired_compile_seconds}

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Adds a parameter group (a dict with ``'params'``) and creates its state.

        Raises:
          ValueError: if ``param_group`` has no ``'params'`` entry, or names a torch
            hyper-parameter the transformation does not have.
        """
        if not isinstance(param_group, dict) or "params" not in param_group:
            raise ValueError("A parameter group is a dict with a 'params' entry (and "
                             f"hyper-parameters), got {type(param_group).__name__}"
                             + (f" with keys {sorted(param_group)}"
                                if isinstance(param_group, dict) else ""))
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        try:
            layout, state = self._initialize(group)
        except BaseException:
            self.param_groups.pop()
            raise
        self._layouts.append(layout)
        self._structures.append(self.group_structure(group))
        self._fused.append(None)
        self._group_states.append(None)
        self._scatter(group, layout, state, [True] * len(group["params"]))

    def _initialize(self, group: dict[str, Any]) -> tuple[group_layout.Layout, base.OptState]:
        """Creates the state of a new group and fills in its hyper-parameters.

        Raises:
          ValueError: if the group names a torch hyper-parameter the transformation lacks.
        """
        params = tuple(group["params"])
        with torch.no_grad():
            state = self.group_transformation(group).init(params)
        layout = group_layout.plan(state, len(params))
        injected = self._group_values(state, layout, len(params))
        defaults = {**self.defaults, **injected}
        unknown = sorted(set(group) & _TORCH_HYPERPARAMETERS - set(defaults))
        if unknown:
            raise ValueError(
                f"The parameter group sets {unknown}, which the transformation does not have "
                f"(its hyper-parameters: {sorted(defaults)}); build it with "
                "optax_compat.inject_hyperparams, e.g. inject_hyperparams(adam)(learning_rate="
                "1e-3) gives the groups an 'lr'.")
        if len(self.param_groups) == 1:
            self.defaults.update(injected)
        for key, value in injected.items():
            group.setdefault(key, value)
        return layout, state

    @staticmethod
    def _group_values(state: base.OptState, layout: group_layout.Layout,
                      size: int) -> dict[str, Any]:
        """The injected hyper-parameters of ``state`` as group entries (Python numbers)."""
        values: dict[str, Any] = {}
        for entry, node in zip(layout.entries, group_layout.flatten(state, size)[0], strict=True):
            if entry.kind is group_layout.HYPERPARAMETER:
                number = group_layout.python_number(node)
                if entry.component is None:
                    values[entry.key] = number
                else:
                    pair = list(values.get(entry.key, (None, None)))
                    pair[entry.component] = number
                    values[entry.key] = tuple(pair)
        return values

    def _gather(self, group: Mapping[str, Any], layout: group_layout.Layout,
                states: list[dict[str, Any]], copies: list[bool] | None = None) -> list[Any]:
        """The nodes of the group state (``layout.treespec`` unflattens them), assembled from
        ``states`` (``state[p]`` of the group's parameters) and the group's hyper-parameters.

        Per-parameter buffers of the parameters flagged in ``copies`` are cloned (an in-place
        update must leave their stored values untouched).
        """
        # Traced, hyper-parameters are tensors, as the layout's skeleton expects.
        compiling = torch.compiler.is_compiling()
        try:
            nodes = []
            for entry in layout.entries:
                if entry.kind is group_layout.PER_PARAMETER:
                    buffers = (list(map(operator.itemgetter(entry.key), states))
                               if entry.fill is None else
                               [state[entry.key] if fill is None else fill
                                for state, fill in zip(states, entry.fill, strict=True)])
                    if copies:
                        buffers = [b.clone() if copy and isinstance(b, torch.Tensor) else b
                                   for b, copy in zip(buffers, copies, strict=True)]
                    nodes.append(tuple(buffers))
                elif entry.kind is group_layout.SHARED:
                    nodes.append(states[0][entry.key])
                elif entry.kind is group_layout.HYPERPARAMETER:
                    value = group[entry.key]
                    value = value if entry.component is None else value[entry.component]
                    nodes.append(torch.as_tensor(value) if compiling else value)
                else:
                    nodes.append(entry.value)
        except KeyError as error:
            raise RuntimeError(f"The optimizer state of a parameter has no entry {error}: it "
                               "was changed by hand or loaded from another optimizer.") from None
        return nodes

    def _scatter(self, group: Mapping[str, Any], layout: group_layout.Layout, state: base.OptState,
                 stepped: list[bool], states: list[dict[str, Any]] | None = None,
                 gathered: list[Any] | None = None) -> None:
        """Stores ``state`` in ``states`` (``state[p]`` of the group's parameters) for the
        parameters flagged in ``stepped``.

        A node that is still the one :meth:`_gather` read (``gathered``), such as the buffers
        an in-place step advanced, is stored already.
        """
        params = group["params"]
        nodes, treespec = group_layout.flatten(state, len(params))
        # Checked in eager steps: Dynamo cannot compare structures (a graph break at best).
        if not torch.compiler.is_compiling() and treespec != layout.treespec:
            raise RuntimeError(f"The transformation changed the structure of its state, from "
                               f"{layout.treespec} to {treespec}.")
        if states is None:
            states = list(map(self.state.__getitem__, params))
        # (Dynamo cannot compare tuples by identity: a traced step stores every node.)
        unchanged = (map(operator.is_, nodes, gathered)
                     if gathered is not None and not torch.compiler.is_compiling()
                     else itertools.repeat(False))
        for entry, node, same in zip(layout.entries, nodes, unchanged):
            if same:
                continue
            if entry.kind is group_layout.PER_PARAMETER:
                for target, value, new in zip(states, node, stepped, strict=True):
                    if new and isinstance(value, torch.Tensor):
                        target[entry.key] = value
            elif entry.kind is group_layout.SHARED:
                if any(target.get(entry.key) is not node for target in states):
                    for target in states:
                        target[entry.key] = node
            elif entry.kind is group_layout.STATIC:
                entry.value = node

    @staticmethod
    def _name(group: Mapping[str, Any], index: int, position: int) -> str:
        """How errors name the parameter at ``position`` of group ``index``."""
        names = group.get("param_names")
        return repr(names[position] if names else f"parameter {position} of group {index}")

    def _dense_gradient(self, grad: torch.Tensor, name: str) -> torch.Tensor:
        """What the transformation gets for the sparse gradient ``grad``: refused here.

        Raises:
          RuntimeError: naming the optimizer, the parameter and the alternatives.
        """
        raise RuntimeError(
            f"{type(self).__name__} does not support sparse gradients ({name} has one): its "
            "transformation is dense. Please consider torch.optim.SparseAdam instead, or "
            "nn.Embedding(..., sparse=False).")

    def _apply(self, group: Mapping[str, Any], params: tuple[torch.Tensor, ...],
               grads: tuple[torch.Tensor, ...], state: base.OptState, stepped: list[bool],
               extra_args: dict[str, Any], whole_step: Callable[..., Any] | None
               ) -> base.OptState:
        """Runs the transformation, or ``whole_step`` (:meth:`group_whole_step`), and adds the
        updates to the parameters flagged in ``stepped``.

        Returns:
          The new group state.
        """
        if whole_step is not None:
            kept = ([] if all(stepped) else
                    [(p, p.clone()) for p, flag in zip(params, stepped, strict=True) if not flag])
            state = whole_step(params, grads, state, keep_grads=True)
            for p, value in kept:
                p.copy_(value)
            return state
        if self.inplace:
            extra_args = {**extra_args, "inplace": True}
            # The in-place request hands the incoming updates over as scratch: not the user's.
            grads = self._own_gradients(params, grads)
        updates, state = self.group_transformation(group).update(grads, state, params,
                                                                 **extra_args)
        moved = [i for i, flag in enumerate(stepped) if flag]
        targets = [params[i] for i in moved]
        tree_math.add_(targets, [updates[i] if updates[i].dtype == params[i].dtype
                                 else updates[i].to(params[i].dtype) for i in moved])
        return state

    @staticmethod
    def _own_gradients(params: tuple[torch.Tensor, ...],
                       grads: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """``grads`` with copies in place of the parameters' ``.grad`` tensors (the others,
        such as zeros for a missing gradient, are the step's own already)."""
        return tuple(g.clone() if g is user else g for g, user in zip(
            grads, tree_math.attributes("grad", params), strict=True))

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Updates every parameter that has a ``.grad``, like :meth:`torch.optim.Optimizer.step`.

        Args:
          closure: re-evaluates the model and returns the loss (called with grad enabled); the
            loss is passed to the transformation as the extra argument ``value`` (which
            :func:`~optax_compat.polyak_sgd` and the line searches of Optax read).

        Returns:
          The closure's loss, or ``None``.

        Raises:
          RuntimeError: for a sparse gradient.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        extra_args = {} if loss is None else {
            "value": loss.detach() if isinstance(loss, torch.Tensor) else loss}
        with torch.no_grad():
            for index, group in enumerate(self.param_groups):
                params = tuple(group["params"])
                grads = tuple(tree_math.attributes("grad", params))
                if not any(map(operator.is_not, grads, itertools.repeat(None))):
                    continue
                structure = self.group_structure(group)
                if structure != self._structures[index]:
                    self._replan(index, group, structure)
                layout = self._layouts[index]
                if self.fused and self._fused_step(index, group, layout, params, grads):
                    continue
                states = list(map(self.state.__getitem__, params))
                stepped = list(map(operator.is_not, grads, itertools.repeat(None)))
                if not all(stepped):
                    grads = tuple(torch.zeros_like(p) if g is None else g
                                  for p, g in zip(params, grads, strict=True))
                if any(tree_math.attributes("is_sparse", grads)):
                    grads = tuple(self._dense_gradient(grad, self._name(group, index, i))
                                  if grad.is_sparse else grad for i, grad in enumerate(grads))
                whole_step = self.group_whole_step(group)
                # In place, the stored buffers of parameters without a gradient are copied.
                copies = ([not flag for flag in stepped]
                          if (self.inplace or whole_step) and not all(stepped) else None)
                gathered = self._gather(group, layout, states, copies)
                state = self._apply(group, params, grads, layout.structure().unflatten(gathered),
                                    stepped, extra_args, whole_step)
                self._scatter(group, layout, state, stepped, states, gathered)
        return loss

    def _replan(self, index: int, group: Mapping[str, Any], structure: Any) -> None:
        """Plans group ``index``'s state anew for its transformation, whose state changed
        structure (see :meth:`group_structure`), carrying the stored entries over."""
        layout, fresh = self._planned(group)
        carried = group_layout.carried_keys(self._layouts[index], layout)
        for p, new in zip(group["params"], fresh, strict=True):
            old = self.state[p]
            new.update((new_key, old[old_key]) for new_key, old_key in carried if old_key in old)
            old.clear()
            old.update(new)
        self._install(index, layout, structure)

    def _planned(self, group: Mapping[str, Any]) -> tuple[group_layout.Layout,
                                                          list[dict[str, Any]]]:
        """A new layout of ``group``'s state, and each parameter's entries as its
        transformation's ``init`` makes them."""
        params = tuple(group["params"])
        with torch.no_grad():
            state = self.group_transformation(group).init(params)
        layout = group_layout.plan(state, len(params))
        entries: list[dict[str, Any]] = [{} for _ in params]
        self._scatter(group, layout, state, [True] * len(params), entries)
        return layout, entries

    def _install(self, index: int, layout: group_layout.Layout, structure: Any) -> None:
        """Makes ``layout`` (for ``structure``) group ``index``'s."""
        self._layouts[index], self._structures[index] = layout, structure
        self._retire(index)  # packed anew, around the new state

    def _retire(self, index: int) -> None:
        """Drops group ``index``'s fused group, if it has one (it is packed anew), keeping
        its compile seconds."""
        fused = self._fused[index]
        if isinstance(fused, FusedGroup):
            self._retired_compile_seconds += fused.engine.compile_seconds
            self._fused[index] = None

    def group_is_fused(self, group: Mapping[str, Any]) -> bool:
        """Whether ``group`` (one of ``param_groups``) steps on the fused engine: with
        ``fused=True``, unless it fell back to the unfused step (it said why, once)."""
        if not self.fused:
            return False
        for candidate, fused in zip(self.param_groups, self._fused):
            if candidate is group:
                return not isinstance(fused, str)
        return True  # a group being added: it will try

    @property
    def compile_seconds(self) -> float:
        """Seconds the fused groups spent compiling their steps so far, those packed anew
        since included (0.0 unfused)."""
        return self._retired_compile_seconds + sum(
            group.engine.compile_seconds for group in self._fused
            if isinstance(group, FusedGroup))

    @torch.compiler.disable
    def _fused_step(self, index: int, group: Mapping[str, Any], layout: group_layout.Layout,
                    params: tuple[torch.Tensor, ...],
                    grads: tuple[torch.Tensor | None, ...]) -> bool:
        """Steps group ``index`` on the fused engine; ``False`` if it cannot fuse, or if this
        step is better left to the unfused whole step over the packed views
        (:meth:`FusedGroup.leaves_to_the_whole_step`). (Under ``torch.compile`` it runs
        eagerly: the fused step is compiled already.)"""
        fused = self._fused_group(index, group, layout, self._states(index, params))
        if fused is None or fused.leaves_to_the_whole_step(grads):
            return False
        fused.step(group, params, grads, lambda grad, i: self._dense_gradient(
            grad, self._name(group, index, i)))
        return True

    def _states(self, index: int, params: tuple[torch.Tensor, ...]) -> list[dict[str, Any]]:
        """``state[p]`` of group ``index``'s ``params``: the dicts looked up at an earlier step
        while ``state`` has not changed an entry since and the parameters are the same."""
        state = self.state
        version = getattr(state, "version", None)  # None: a plain dict put there by hand
        cached = self._group_states[index]
        if (version is not None and cached is not None and cached[0] is state
                and cached[1] == version and len(cached[2]) == len(params)
                and all(map(operator.is_, cached[2], params))):
            return cached[3]
        states = list(map(state.__getitem__, params))
        # The version after the lookups: one that creates a missing ``state[p]`` counts.
        self._group_states[index] = (state, getattr(state, "version", None), params, states)
        return states

    def _fused_group(self, index: int, group: Mapping[str, Any], layout: group_layout.Layout,
                     states: list[dict[str, Any]]) -> FusedGroup | None:
        """Group ``index`` on the fused engine, packed anew if its parameters' storage or its
        transformation changed, or ``None`` (with a one-time warning) if it cannot fuse."""
        fused = self._fused[index]
        if isinstance(fused, str):
            return None
        params = group["params"]
        unchanged = fused is not None and fused.sync(params, states)
        self._checked = (group, fused) if unchanged else None
        try:
            tx = self.group_transformation(group)
        finally:
            self._checked = None
        if unchanged and fused.tx is tx:
            return fused
        self._retire(index)
        try:
            fused = FusedGroup(tx, params, layout, states, backend=self.fused_backend)
        except (TypeError, ValueError) as error:  # the reason it cannot fuse
            if isinstance(error, TypeError):
                error = f"{type(error).__name__}: {error}"
            self._fused[index] = str(error)
            warnings.warn(f"{type(self).__name__}(fused=True): parameter group {index} steps "
                          f"unfused: {error}.", UserWarning, stacklevel=4)
            return None
        self._fused[index] = fused
        return fused

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Loads a state returned by ``state_dict()`` (copying its tensors).

        Everything is checked before anything changes: the number and sizes of the groups,
        and for each parameter the entries, shapes and dtypes of its state. The saved groups'
        hyper-parameters replace the current ones (their ``'params'`` stay); where they give
        the state another structure (:meth:`group_structure`: a weight decay saved as zero),
        the saved state is checked against, and loaded as, that structure.

        Raises:
          ValueError: naming what does not fit (another optimizer, another model); the
            optimizer is left unchanged.
        """
        for pre_hook in self._optimizer_load_state_dict_pre_hooks.values():
            result = pre_hook(self, state_dict)
            if result is not None:
                state_dict = result
        if not isinstance(state_dict, Mapping) or not {"state", "param_groups"} <= set(state_dict):
            raise ValueError("An optimizer state dict has 'state' and 'param_groups' entries, "
                             f"got {checkpoint.describe(state_dict)}.")
        saved_groups = list(state_dict["param_groups"])
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"The optimizer has {len(self.param_groups)} parameter groups, the "
                             f"state dict has {len(saved_groups)}.")
        saved_state = state_dict["state"]
        new_state = StateDict(dict)
        new_groups = []
        # The groups whose saved entries give their state another structure (a weight decay
        # saved as zero): their new layout and structure.
        plans: dict[int, tuple[group_layout.Layout, Any]] = {}
        for index, (group, saved_group) in enumerate(zip(self.param_groups, saved_groups,
                                                         strict=True)):
            if not isinstance(saved_group, Mapping) or "params" not in saved_group:
                raise ValueError(f"Saved parameter group {index} has no 'params' entry.")
            if len(group["params"]) != len(saved_group["params"]):
                raise ValueError(f"Parameter group {index} has {len(group['params'])} "
                                 f"parameters, the state dict's {len(saved_group['params'])}.")
            missing = sorted(set(self.defaults) - set(saved_group))
            if missing:
                raise ValueError(f"Saved parameter group {index} has no {missing}: the state "
                                 "dict is of another optimizer.")
            new_group = {**saved_group, "params": group["params"]}
            if "param_names" in group:
                new_group["param_names"] = group["param_names"]
            new_groups.append(new_group)
            structure = self.group_structure(new_group)
            if structure == self._structures[index]:
                layout = self._layouts[index]
                expected = [self.state.get(p, {}) for p in group["params"]]
            else:
                layout, expected = self._planned(new_group)
                plans[index] = (layout, structure)
            shared_keys = {entry.key for entry in layout.entries
                           if entry.kind is group_layout.SHARED}
            shared: dict[str, torch.Tensor] = {}
            for saved_id, p, own in zip(saved_group["params"], group["params"], expected,
                                        strict=True):
                saved = saved_state.get(saved_id, {})
                where = f"state[{saved_id!r}]"
                if not isinstance(saved, Mapping) or set(saved) != set(own):
                    raise ValueError(f"{where}: expected entries {sorted(own)}, got "
                                     f"{checkpoint.describe(saved)}.")
                for key, value in own.items():
                    checkpoint.check_tensor_fits(value, saved[key], f"{where}[{key!r}]")
                    if key in shared_keys:
                        shared.setdefault(key, saved[key].to(value.device, copy=True))
                        new_state[p][key] = shared[key]
                    else:
                        new_state[p][key] = saved[key].to(value.device, copy=True)
        self.state = new_state
        self.param_groups = new_groups
        for index, (layout, structure) in plans.items():
            self._install(index, layout, structure)
        for post_hook in self._optimizer_load_state_dict_post_hooks.values():
            post_hook(self)


def torch_optimizer(tx: base.GradientTransformation, params: Iterable[Any], *,
                    inplace: bool = False, fused: bool | None = None) -> TorchOptimizer:
    """``tx`` as a :class:`torch.optim.Optimizer` over ``params`` (see :class:`TorchOptimizer`).

    Args:
      tx: any ``optax_compat`` gradient transformation; wrap it (or its inner optimizer) in
        :func:`~optax_compat.inject_hyperparams` so that schedulers can change its learning
        rate through the groups' ``'lr'``.
      params: tensors, ``(name, tensor)`` pairs, or parameter-group dicts.
      inplace: see :class:`TorchOptimizer`.
      fused: step on the fused engine (see :class:`TorchOptimizer`).

    Returns:
      A :class:`TorchOptimizer`.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
      >>> opt = optax.torch_optimizer(optax.sgd(learning_rate=0.1), [w])
      >>> w.grad = torch.tensor([1.0, -1.0])
      >>> opt.step()
      >>> w.detach()
      tensor([0.9000, 2.1000])
    """
    return TorchOptimizer(params, tx, inplace=inplace, fused=fused)

