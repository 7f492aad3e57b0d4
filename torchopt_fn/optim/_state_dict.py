"""Optimizer states as plain containers, so checkpoints load with ``weights_only=True``.

Optimizer states are trees of NamedTuples (``ScaleByAdamState(count, mu, nu)``), which
``torch.load(..., weights_only=True)`` refuses to unpickle. :func:`to_plain` turns each NamedTuple
into a dict of its fields tagged with its class name; :func:`restore` rebuilds the NamedTuples
by walking the optimizer's own state alongside, checking class names, fields, shapes and dtypes
and naming the first path where the loaded state does not fit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torchopt_fn.base import UninitializedState

__all__ = ["STATE_TYPE_KEY", "to_plain", "restore", "restore_groups", "is_uninitialized"]

STATE_TYPE_KEY = "__state_type__"


def _is_namedtuple(node: Any) -> bool:
    return isinstance(node, tuple) and hasattr(node, "_fields")


def to_plain(state: Any) -> Any:
    """``state`` with NamedTuples turned into tagged dicts; tensors are kept by reference."""
    if _is_namedtuple(state):
        plain = {field: to_plain(value) for field, value in zip(state._fields, state, strict=True)}
        plain[STATE_TYPE_KEY] = type(state).__name__
        return plain
    if isinstance(state, (tuple, list)):
        return type(state)(to_plain(value) for value in state)
    if isinstance(state, dict):
        return {key: to_plain(value) for key, value in state.items()}
    return state


def is_uninitialized(plain: Any) -> bool:
    """Whether ``plain`` is the state of an optimizer that has not stepped yet."""
    return isinstance(plain, UninitializedState) or (
        isinstance(plain, dict) and plain.get(STATE_TYPE_KEY) == UninitializedState.__name__)


def restore(template: Any, plain: Any, convert: Callable[[torch.Tensor, torch.Tensor],
                                                          torch.Tensor], path: str = "") -> Any:
    """Rebuilds a state shaped like ``template`` from its plain form ``plain``.

    Args:
      template: a state of the optimizer (gives the NamedTuple classes and tensor layouts).
      plain: a state produced by :func:`to_plain` (or the state itself).
      convert: ``convert(loaded, template_tensor)`` gives the tensor to keep (a reference or
        a copy on the template's device).
      path: where ``template`` sits in the whole state, for error messages.

    Raises:
      ValueError: naming the first path where ``plain`` does not fit ``template``.
    """
    if _is_namedtuple(template):
        plain = to_plain(plain) if _is_namedtuple(plain) else plain
        name = type(template).__name__
        if not isinstance(plain, dict) or plain.get(STATE_TYPE_KEY) != name:
            got = plain.get(STATE_TYPE_KEY) if isinstance(plain, dict) else type(plain).__name__
            raise ValueError(f"state{path}: expected a {name}, got {got}")
        if set(plain) - {STATE_TYPE_KEY} != set(template._fields):
            raise ValueError(f"state{path}: {name} fields {sorted(template._fields)} expected, "
                             f"got {sorted(set(plain) - {STATE_TYPE_KEY})}")
        return type(template)(*(restore(value, plain[field], convert, f"{path}.{field}")
                                for field, value in zip(template._fields, template, strict=True)))
    if isinstance(template, (tuple, list)):
        if not isinstance(plain, (tuple, list)) or len(plain) != len(template):
            raise ValueError(f"state{path}: expected a sequence of {len(template)} entries, got "
                             f"{_describe(plain)}")
        return type(template)(restore(t, p, convert, f"{path}[{i}]")
                              for i, (t, p) in enumerate(zip(template, plain, strict=True)))
    if isinstance(template, dict):
        if not isinstance(plain, dict) or set(plain) != set(template):
            raise ValueError(f"state{path}: expected keys {sorted(map(str, template))}, got "
                             f"{_describe(plain)}")
        return {key: restore(value, plain[key], convert, f"{path}[{key!r}]")
                for key, value in template.items()}
    if isinstance(template, torch.Tensor):
        if not isinstance(plain, torch.Tensor):
            raise ValueError(f"state{path}: expected a tensor, got {_describe(plain)}")
        if plain.shape != template.shape or plain.dtype != template.dtype:
            raise ValueError(f"state{path}: expected a {template.dtype} tensor of shape "
                             f"{tuple(template.shape)}, got a {plain.dtype} tensor of shape "
                             f"{tuple(plain.shape)}")
        return convert(plain, template)
    if plain != template and not callable(template):
        raise ValueError(f"state{path}: expected {template!r}, got {_describe(plain)}")
    return template


def restore_groups(saved: Any, group_template: Callable[[int], Any], group_count: int,
                   convert: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> list[Any]:
    """Rebuilds the state of every group of an optimizer; nothing is assigned here.

    Args:
      saved: what the optimizer's ``state_dict()`` returned (a sequence, one entry per group).
      group_template: gives a state of group ``i`` (the current one, or a fresh ``init``).
      group_count: the optimizer's number of groups.
      convert: see :func:`restore`.

    Raises:
      ValueError: if ``saved`` does not fit the optimizer, naming the first differing path.
    """
    if not isinstance(saved, (tuple, list)) or len(saved) != group_count:
        found = f"{len(saved)} groups" if isinstance(saved, (tuple, list)) else type(saved).__name__
        raise ValueError(f"The optimizer has {group_count} parameter groups, the state has "
                         f"{found}.")
    return [UninitializedState() if is_uninitialized(group) else
            restore(group_template(index), group, convert, path=f"[{index}]")
            for index, group in enumerate(saved)]


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        return f"keys {sorted(map(str, value))}"
    if isinstance(value, (tuple, list)):
        return f"a sequence of {len(value)} entries"
    return type(value).__name__
