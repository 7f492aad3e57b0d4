"""``Optimizer``: TorchOpt's optimizer class, as a real :class:`torch.optim.Optimizer`."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

import optax_compat
from optax_compat import TorchOptimizer, inplace_step
from optax_compat._runtime import tree_math
from torchopt_fn.base import GradientTransformation
from torchopt_fn.transform.utils import from_optax, to_optax
from torchopt_fn.typing import OptState, Params

__all__ = ["Optimizer"]

StepFn = Callable[[Any, Any, OptState], OptState]


def as_transformation(impl: Any) -> GradientTransformation:
    """``impl`` as a TorchOpt-style transformation (``optax_compat`` ones are adapted).

    Raises:
      TypeError: if ``impl`` is not a gradient transformation.
    """
    if isinstance(impl, GradientTransformation):
        return impl
    if isinstance(impl, optax_compat.GradientTransformation):
        return from_optax(impl)
    raise TypeError(f"{impl} (type: {type(impl).__name__}) is not a GradientTransformation")


class Optimizer(TorchOptimizer):
    """TorchOpt's ``Optimizer``: a :class:`torch.optim.Optimizer` driven by a transformation.

    TorchOpt's own class only resembles ``torch.optim``; its tests use nothing beyond
    construction from parameters, ``zero_grad``, ``step`` and ``add_param_group``, which
    ``torch.optim``'s protocol also has. So this class *is* a ``torch.optim.Optimizer`` (an
    :class:`optax_compat.TorchOptimizer`) and PyTorch's schedulers, ``GradScaler``, gradient
    clipping, ``torch.distributed.checkpoint`` and Lightning take it as they take
    ``torch.optim.Adam``. What changes from TorchOpt 0.7.3, on purpose:

    * ``param_groups`` are torch's dicts (``{'params': [...], 'lr': ...}``), and ``state`` is
      keyed by parameter; ``state_dict()`` is torch's layout (TorchOpt returned a tuple of the
      raw group states) and loads with ``torch.load(..., weights_only=True)``;
    * ``zero_grad()`` sets the gradients to ``None`` by default, as ``torch.optim`` does;
    * ``add_param_group`` takes torch's group dict, or (as TorchOpt) a tree of tensors; a dict
      without ``'params'`` is refused, not taken for a tree of parameters.

    As in TorchOpt, each group is one tree for ``impl`` (global clipping sees the whole group),
    and a step reuses the state buffers (``inplace=True``); unlike TorchOpt's, it only reads the
    ``.grad`` tensors, as ``torch.optim``'s steps do (the in-place paths that would write into
    them get copies). Parameters whose ``.grad`` is ``None`` are skipped as by ``torch.optim``.
    The aliases (:class:`~torchopt_fn.Adam`, :class:`~torchopt_fn.SGD`, ...) keep their
    hyper-parameters in the groups, so schedulers and per-group values work on them.
    """

    def __init__(self, params: Iterable[Any], impl: GradientTransformation, *,
                 fused: bool | None = None) -> None:
        """Builds the optimizer.

        Args:
          params: the tensors to optimize, ``(name, tensor)`` pairs, or parameter-group dicts.
          impl: the transformation, e.g. ``torchopt_fn.adam(...)`` or a ``chain``; an
            ``optax_compat`` transformation is accepted too.
          fused: step on the fused engine where the transformation fuses (ours, not
            TorchOpt's; see :class:`optax_compat.TorchOptimizer`).

        Raises:
          TypeError: if ``impl`` is not a gradient transformation.
        """
        self.impl: GradientTransformation = as_transformation(impl)
        self._inplace_step = inplace_step(self.impl)
        super().__init__(params, to_optax(self.impl), inplace=True, fused=fused)

    def __getstate__(self) -> dict[str, Any]:
        """Pickles ``impl`` with the rest (see :class:`optax_compat.TorchOptimizer`)."""
        return {**super().__getstate__(), "impl": self.impl}

    def add_param_group(self, param_group: dict[str, Any] | Params) -> None:
        """Adds a group: torch's dict with ``'params'``, or (TorchOpt) a tree of tensors.

        Raises:
          ValueError: for a tree holding non-tensors, such as a dict of hyper-parameters
            without ``'params'``.
        """
        if not (isinstance(param_group, dict) and "params" in param_group):
            leaves = tree_math.leaves(param_group)
            if not leaves or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
                raise ValueError(
                    "add_param_group takes a dict with a 'params' entry (and the group's "
                    "hyper-parameters) or a tree of tensors, got "
                    + (f"a dict with keys {sorted(map(str, param_group))}"
                       if isinstance(param_group, dict) else type(param_group).__name__))
            param_group = {"params": leaves}
        super().add_param_group(param_group)

    def _step_functions(self, group: Mapping[str, Any]) -> tuple[
            optax_compat.GradientTransformationExtraArgs, StepFn | None]:
        """The transformation of ``group`` and an in-place step replacing it (or ``None``).

        The step, ``step(params, grads, state, *, keep_grads) -> state``, does the whole update
        in place on the same state: the transformation's own whole step
        (:func:`optax_compat.inplace_step`, the fused Adam kernels), when it has one.
        """
        del group
        return self.tx, self._inplace_step

    def group_transformation(self, group: Mapping[str, Any]
                             ) -> optax_compat.GradientTransformationExtraArgs:
        """The transformation stepping ``group`` (built as ``_step_functions`` says)."""
        return self._step_functions(group)[0]

    def group_whole_step(self, group: Mapping[str, Any]) -> StepFn | None:
        """The whole in-place step of ``group``'s transformation, if it has one."""
        return self._step_functions(group)[1]


def _is_group_entry(value: Any) -> bool:
    """Whether a constructor argument is a hyper-parameter kept in the groups (as torch does)."""
    if isinstance(value, tuple):
        return all(map(_is_group_entry, value))
    return isinstance(value, (numbers.Number, torch.Tensor))


class HyperparameterOptimizer(Optimizer):
    """An :class:`Optimizer` whose groups build their transformation from their own entries.

    The constructor's numeric arguments (``lr``, ``betas``, ``weight_decay``, flags such as
    ``maximize``) become entries of every parameter group, as in ``torch.optim``; the others (a
    schedule given as ``lr``, a ``mask``) are fixed. :meth:`_build` makes the transformation
    (and the in-place step, if any) from them, by default with the subclass's ``_factory``
    (the alias, e.g. :func:`torchopt_fn.sgd`); a group rebuilds it when its entries change (a
    scheduler set ``'lr'``), so each group steps with its own current values, as plain numbers.

    With ``fused=True`` the groups step on the fused engine. There a group's ``'lr'`` is a 0-d
    tensor of the group's own, filled from the entry before each step and read by the
    compiled step as an input (as ``torch.optim``'s compiled steps take a tensor ``lr``), and
    so is every other numeric entry (``'betas'``, ``'momentum'``, ``'weight_decay'``, ...; not
    the flags) once its value changed: the step is compiled once more then, and a
    scheduler's later values need no recompilation. Until an entry changes it is a compiled
    constant. Only a change of sign (an entry set to or from zero, which adds or removes a
    term of the chain) rebuilds the step. As in ``torch.optim``, values set after
    construction are not validated again. The tensors are float32 for float32 parameters, so
    a scalar computed from a moving entry (``1 - alpha``) is computed from its float32 value,
    as in ``torch.optim``'s steps given tensor hyper-parameters: the fused numbers differ from
    the unfused ones by that rounding (more where the algorithm cancels, such as centered
    RMSProp's ``nu - mu ** 2``).

    A group that falls back to the unfused step (DTensors, tied weights) takes its entries as
    plain numbers, as unfused.

    Unfused or fused, an entry set to or from zero changes the chain; the group's state is
    then carried over to the new one (see :meth:`group_structure`).
    """

    _factory: Callable[..., GradientTransformation]

    def __init__(self, params: Iterable[Any], *, fused: bool | None = None,
                 **arguments: Any) -> None:
        """Builds the optimizer; ``arguments`` are those of :meth:`_build`, ``fused`` that of
        :class:`Optimizer`."""
        self._hyperparameters = {k: v for k, v in arguments.items() if _is_group_entry(v)}
        self._options = {k: v for k, v in arguments.items() if k not in self._hyperparameters}
        self._built: dict[int, tuple[tuple[Any, ...], Any, StepFn | None]] = {}
        # Per group: its tensors, and the values they hold.
        self._tensors: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        # Per group: its entries at its first fused step, and those that are tensors since.
        self._moving: dict[int, tuple[dict[str, Any], set[str]]] = {}
        # Per group: the entries, placement and step functions of its last call, returned
        # again while they hold (a step's Python cost is paid once per change).
        self._last: dict[int, tuple[dict[str, Any], tuple[Any, ...], Any]] = {}
        super().__init__(params, self._build(**arguments)[0], fused=fused)

    def initial_defaults(self) -> dict[str, Any]:
        """The constructor's numeric arguments, which every group gets."""
        return dict(self._hyperparameters)

    def _build(self, **arguments: Any) -> tuple[GradientTransformation, StepFn | None]:
        """The transformation ``_factory`` makes of these arguments, and no in-place step."""
        return type(self)._factory(**arguments), None

    def group_structure(self, group: Mapping[str, Any]) -> tuple[Any, ...]:
        """The signs of the group's numeric entries and its flags: a zero entry is no term
        of the chain (``weight_decay=0``) or changes its kind (``momentum=0``)."""
        return tuple(_signs(value) if _is_numeric(value) else
                     value if isinstance(value, bool) else None
                     for value in map(group.__getitem__, self._hyperparameters))

    def _step_functions(self, group: Mapping[str, Any]) -> tuple[
            optax_compat.GradientTransformationExtraArgs, StepFn | None]:
        names = self._hyperparameters
        entries = dict(zip(names, map(group.__getitem__, names)))
        fused = self.group_is_fused(group)
        params = group["params"]
        # A fused step's tensors live on the parameters' device, in their promoted dtype; an
        # unfused step takes plain numbers, wherever the parameters are.
        placement = (fused, *((params[0].device, self.group_number_dtype(group))
                              if fused and params else (None, None)))
        last = self._last.get(id(group))
        if last is not None and last[1] == placement and last[0] == entries:
            return last[2]
        values = dict(entries)
        if fused:
            # The tensors stand in the key by identity (new ones, for parameters moved to
            # another device or dtype, rebuild the transformation around them) and their
            # values by their signs.
            tensors = self._hyperparameter_tensors(group, {
                name: values[name] for name in self._moving_entries(group, values)},
                *placement[1:])
            key = tuple((id(tensors[name]), _signs(value)) if name in tensors else value
                        for name, value in values.items())
            values.update(tensors)
        else:
            key = tuple(values.values())
        built = self._built.get(id(group))
        if built is None or built[0] != key:
            impl, fused_step = self._build(**values, **self._options)
            built = self._built[id(group)] = (key, to_optax(impl), fused_step)
        self._last[id(group)] = (entries, placement, (built[1], built[2]))
        return built[1], built[2]

    def _moving_entries(self, group: Mapping[str, Any], values: Mapping[str, Any]) -> set[str]:
        """The entries of ``group`` that are tensors in its fused step: ``'lr'``, and each one
        whose value changed since the group's first fused step. The others are compiled in as
        constants, which Inductor's loops need not read from memory (9 such reads made Adam
        12% slower at 32M parameters), with the numbers of the unfused step."""
        first, moving = self._moving.setdefault(id(group), (dict(values), {"lr"}))
        moving.update(name for name, value in values.items()
                      if name not in moving and value != first.get(name, value))
        return moving

    def _hyperparameter_tensors(self, group: Mapping[str, Any], values: Mapping[str, Any],
                                device: torch.device | None, dtype: torch.dtype | None
                                ) -> dict[str, Any]:
        """The fused steps' tensors for the numeric ``values`` of ``group`` (a tuple of them
        for a tuple entry such as ``'betas'``), holding them now (those whose value changed
        are filled). Each is 0-d, on ``device`` (the group's parameters', ``None`` for a
        group without any), in ``dtype``: the one eager arithmetic takes a Python number in
        beside the parameters (:meth:`group_number_dtype`)."""
        numeric = {name: value for name, value in values.items() if _is_numeric(value)}
        if device is None or not numeric:
            return {}
        tensors, filled = self._tensors.get(id(group), ({}, {}))
        first = tree_math.leaves(tensors)[0] if tensors else None
        if first is None or (first.device, first.dtype) != (device, dtype) or (
                tensors.keys() != numeric.keys()):
            tensors, filled = {name: _tensors_like(value, dtype, device)
                               for name, value in numeric.items()}, {}
            self._tensors[id(group)] = tensors, filled
        for name, value in numeric.items():
            if filled.get(name) != value:
                _fill(tensors[name], value)
                filled[name] = value
        return tensors

    def __getstate__(self) -> dict[str, Any]:
        """Pickles the constructor's arguments too (the built transformations are rebuilt)."""
        return {**super().__getstate__(), "_hyperparameters": self._hyperparameters,
                "_options": self._options, "_built": {}, "_tensors": {}, "_moving": {},
                "_last": {}}


def _is_numeric(value: Any) -> bool:
    """Whether a group entry is a number (not a flag) or a tuple of numbers."""
    if isinstance(value, tuple):
        return bool(value) and all(map(_is_numeric, value))
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _signs(value: Any) -> Any:
    """The sign of a number, or the signs of a tuple of numbers (plain Python: it runs at
    every step)."""
    if isinstance(value, tuple):
        return tuple(map(_signs, value))
    return (value > 0) - (value < 0)


def _tensors_like(value: Any, dtype: torch.dtype, device: torch.device) -> Any:
    """A 0-d tensor for a number, a tuple of them for a tuple."""
    return tree_math.tree_map(lambda _: torch.zeros([], dtype=dtype, device=device), value)


def _fill(tensors: Any, value: Any) -> None:
    """Fills the tensors made by :func:`_tensors_like` with ``value`` (plain Python: a
    scheduler's new learning rate comes at every step)."""
    if isinstance(tensors, tuple):
        for tensor, item in zip(tensors, value, strict=True):
            tensor.fill_(item)
    else:
        tensors.fill_(value)
