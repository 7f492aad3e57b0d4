"""Optimizer states as plain containers, so checkpoints load with ``weights_only=True``.

An ``optax_compat`` state is a tree of NamedTuples (``ScaleByAdamState(count, mu, nu)``), which
``torch.load(..., weights_only=True)`` refuses to unpickle. :func:`state_to_dict` turns each
NamedTuple into a dict of its fields tagged with its class name; :func:`state_from_dict` rebuilds
the NamedTuples by walking a state of the same optimizer alongside, checking class names,
fields, shapes and dtypes and naming the first path where the saved state does not fit.
:func:`save` and :func:`load` add the file handling: the file also holds a SHA-256 digest of
the state (``torch.save`` checks nothing of the tensor bytes it reads back), so a truncated or
corrupted file gives a clear error instead of wrong numbers.
"""

from __future__ import annotations

import hashlib
import os
from typing import IO, Any, Union

import torch

from optax_compat._src import base

__all__ = ["STATE_TYPE_KEY", "state_to_dict", "state_from_dict", "save", "load"]

STATE_TYPE_KEY = "__state_type__"
_FORMAT = "optax_compat.checkpoint/1"

FileLike = Union[str, os.PathLike, IO[bytes]]


def _is_namedtuple(node: Any) -> bool:
    return isinstance(node, tuple) and hasattr(node, "_fields")


def state_to_dict(state: base.OptState) -> Any:
    """``state`` with every NamedTuple turned into a dict tagged with its class name.

    The result holds only dicts, lists, tuples, numbers, strings and tensors (kept by
    reference, not copied), so ``torch.save`` of it loads with ``torch.load(...,
    weights_only=True)``.

    Args:
      state: an optimizer state (any tree of NamedTuples, containers and tensors).

    Returns:
      The plain form of ``state``.
    """
    if _is_namedtuple(state):
        plain = {field: state_to_dict(value)
                 for field, value in zip(state._fields, state, strict=True)}
        plain[STATE_TYPE_KEY] = type(state).__name__
        return plain
    if isinstance(state, (tuple, list)):
        return type(state)(state_to_dict(value) for value in state)
    if isinstance(state, dict):
        return {key: state_to_dict(value) for key, value in state.items()}
    return state


def state_from_dict(template: base.OptState, saved: Any, *, copy: bool = True) -> base.OptState:
    """Rebuilds a state shaped like ``template`` from its plain form ``saved``.

    Args:
      template: a state of the same optimizer for the same parameters, e.g. ``tx.init(params)``;
        it gives the NamedTuple classes, the tensor shapes, dtypes and devices.
      saved: what :func:`state_to_dict` returned (or a state itself).
      copy: copy the saved tensors (on the template's devices); otherwise they are only moved
        where needed, and the returned state may share them with ``saved``.

    Returns:
      The state, with ``template``'s structure and ``saved``'s values.

    Raises:
      ValueError: naming the first path where ``saved`` does not fit ``template`` (another
        optimizer, another parameter tree, other shapes or dtypes).
    """
    return _restore(template, saved, copy, "")


def _restore(template: Any, plain: Any, copy: bool, path: str) -> Any:
    if _is_namedtuple(template):
        plain = state_to_dict(plain) if _is_namedtuple(plain) else plain
        name = type(template).__name__
        if not isinstance(plain, dict) or plain.get(STATE_TYPE_KEY) != name:
            got = plain.get(STATE_TYPE_KEY) if isinstance(plain, dict) else describe(plain)
            raise ValueError(f"state{path}: expected a {name}, got {got}")
        if set(plain) - {STATE_TYPE_KEY} != set(template._fields):
            raise ValueError(f"state{path}: {name} fields {sorted(template._fields)} expected, "
                             f"got {sorted(set(plain) - {STATE_TYPE_KEY})}")
        return type(template)(*(_restore(value, plain[field], copy, f"{path}.{field}")
                                for field, value in zip(template._fields, template, strict=True)))
    if isinstance(template, (tuple, list)):
        if not isinstance(plain, (tuple, list)) or len(plain) != len(template):
            raise ValueError(f"state{path}: expected a sequence of {len(template)} entries, got "
                             f"{describe(plain)}")
        return type(template)(_restore(t, p, copy, f"{path}[{i}]")
                              for i, (t, p) in enumerate(zip(template, plain, strict=True)))
    if isinstance(template, dict):
        if not isinstance(plain, dict) or set(plain) != set(template):
            raise ValueError(f"state{path}: expected keys {sorted(map(str, template))}, got "
                             f"{describe(plain)}")
        return {key: _restore(value, plain[key], copy, f"{path}[{key!r}]")
                for key, value in template.items()}
    if isinstance(template, torch.Tensor):
        check_tensor_fits(template, plain, f"state{path}")
        return plain.to(template.device, copy=copy)
    if plain != template and not callable(template):
        raise ValueError(f"state{path}: expected {template!r}, got {describe(plain)}")
    return template


def check_tensor_fits(template: torch.Tensor, saved: Any, where: str) -> None:
    """Raises a ValueError naming ``where`` unless ``saved`` is a tensor like ``template``."""
    if not isinstance(saved, torch.Tensor):
        raise ValueError(f"{where}: expected a tensor, got {describe(saved)}")
    if saved.shape != template.shape or saved.dtype != template.dtype:
        raise ValueError(f"{where}: expected a {template.dtype} tensor of shape "
                         f"{tuple(template.shape)}, got a {saved.dtype} tensor of shape "
                         f"{tuple(saved.shape)}")


def describe(value: Any) -> str:
    """A short description of ``value`` for error messages."""
    if isinstance(value, dict):
        return f"keys {sorted(map(str, value))}"
    if isinstance(value, (tuple, list)):
        return f"a sequence of {len(value)} entries"
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return type(value).__name__


def _digest(plain: Any) -> str:
    """SHA-256 of the structure, the non-tensor values and the tensor bytes of ``plain``."""
    digest = hashlib.sha256()

    def visit(node: Any) -> None:
        if isinstance(node, torch.Tensor):
            digest.update(f"tensor {node.dtype} {tuple(node.shape)};".encode())
            raw = node.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
            digest.update(raw.numpy().tobytes())
        elif isinstance(node, dict):
            digest.update(f"dict {len(node)};".encode())
            for key, value in node.items():
                digest.update(f"{key!r}:".encode())
                visit(value)
        elif isinstance(node, (tuple, list)):
            digest.update(f"{type(node).__name__} {len(node)};".encode())
            for value in node:
                visit(value)
        else:
            digest.update(f"{node!r};".encode())

    visit(plain)
    return digest.hexdigest()


def save(state: base.OptState, file: FileLike) -> None:
    """Writes ``state`` to ``file`` with :func:`torch.save`, in its plain form, with a digest.

    Args:
      state: an optimizer state.
      file: a path or a writable binary file object.
    """
    plain = state_to_dict(state)
    torch.save({"format": _FORMAT, "state": plain, "sha256": _digest(plain)}, file)


def load(file: FileLike, template: base.OptState) -> base.OptState:
    """Reads a state written by :func:`save` (with ``weights_only=True``) and rebuilds it.

    The digest written by :func:`save` is checked first; a file holding only
    ``state_to_dict(state)`` (written by ``torch.save`` directly) is accepted unchecked.
    Nothing is modified: the returned state is new, so a failed load leaves the caller's
    running state as it was.

    Args:
      file: a path or a readable binary file object.
      template: a state of the same optimizer for the same parameters (see
        :func:`state_from_dict`).

    Returns:
      The saved state, on the template's devices.

    Raises:
      ValueError: if the file is not a readable checkpoint (truncated, corrupted, not written
        by ``torch.save``) or holds a state of another optimizer or parameter tree.
    """
    try:
        saved = torch.load(file, weights_only=True)
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        raise
    except Exception as error:  # the weights-only unpickler fails in many ways on bad bytes
        raise ValueError(f"{_name(file)} is not a readable optimizer checkpoint (truncated or "
                         f"corrupted?): {type(error).__name__}: {error}") from error
    if isinstance(saved, dict) and saved.get("format") == _FORMAT:
        if set(saved) != {"format", "state", "sha256"} or saved["sha256"] != _digest(
                saved["state"]):
            raise ValueError(f"{_name(file)} is corrupted: its contents do not match the "
                             "digest written with them.")
        saved = saved["state"]
    return state_from_dict(template, saved, copy=False)


def _name(file: FileLike) -> str:
    return repr(os.fspath(file)) if isinstance(file, (str, os.PathLike)) else "the file"
