"""Who this process is in a ``torchrun`` world: ranks, sizes, worker names and rank filters.

The world is read once from the environment variables ``torchrun`` sets (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``); a process started without them is the
only worker of a world of size one.
"""

from __future__ import annotations

import atexit
import functools
import os
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, TypeVar

import torch.distributed.rpc as rpc
from torch.distributed.elastic.multiprocessing.errors import record

__all__ = [
    "get_world_info",
    "get_world_rank",
    "get_rank",
    "get_world_size",
    "get_local_rank",
    "get_local_world_size",
    "get_worker_id",
    "barrier",
    "auto_init_rpc",
    "on_rank",
    "not_on_rank",
    "rank_zero_only",
    "rank_non_zero_only",
]

F = TypeVar("F", bound=Callable[..., Any])


def default_worker_name_format(
    world_rank: int,
    world_size: int,
    local_rank: int,
    local_world_size: int,
) -> str:
    """The RPC name of a worker: ``worker`` and its rank, zero-padded to the width of the size.

    Args:
      world_rank: the global rank of the worker.
      world_size: the number of workers in the world.
      local_rank: the rank of the worker on its node (not used by this format).
      local_world_size: the number of workers on the node (not used by this format).

    Returns:
      For example ``'worker03'`` for rank 3 in a world of 12 workers.
    """
    del local_rank, local_world_size
    return f"worker{world_rank:0{len(str(world_size))}d}"


# Set by `auto_init_rpc`, read by `WorldInfo.worker_name`.
_WORKER_NAME_FORMAT: Callable[..., str] = default_worker_name_format


class WorldInfo(NamedTuple):
    """The ranks and sizes of the current worker's world."""

    world_rank: int
    world_size: int
    local_rank: int
    local_world_size: int

    @property
    def rank(self) -> int:
        """The global rank of the current worker (same as ``world_rank``)."""
        return self.world_rank

    @property
    def worker_name(self) -> str:
        """The RPC name of the current worker, from the format given to :func:`auto_init_rpc`."""
        return _WORKER_NAME_FORMAT(
            world_rank=self.world_rank,
            world_size=self.world_size,
            local_rank=self.local_rank,
            local_world_size=self.local_world_size,
        )


def get_world_info() -> WorldInfo:
    """The world of the current worker, read from the environment on the first call.

    The result is cached, as are its fields, as attributes of this function (``world_info``,
    ``world_rank``, ``rank``, ``world_size``, ``local_rank``, ``local_world_size`` and their
    upper-case spellings), so that ``get_world_info.rank`` works after the module is imported.

    Returns:
      A :class:`WorldInfo` from ``RANK`` (default 0), ``WORLD_SIZE`` (default 1),
      ``LOCAL_RANK`` (default 0) and ``LOCAL_WORLD_SIZE`` (default 1).
    """
    world_info = getattr(get_world_info, "world_info", None)
    if world_info is None:
        world_info = WorldInfo(
            world_rank=int(os.getenv("RANK", "0")),
            world_size=int(os.getenv("WORLD_SIZE", "1")),
            local_rank=int(os.getenv("LOCAL_RANK", "0")),
            local_world_size=int(os.getenv("LOCAL_WORLD_SIZE", "1")),
        )
        cached = {"world_info": world_info, "rank": world_info.rank, **world_info._asdict()}
        for name, value in cached.items():
            setattr(get_world_info, name, value)
            setattr(get_world_info, name.upper(), value)
    return world_info


def get_world_rank() -> int:
    """The global rank of the current worker."""
    return get_world_info().world_rank


get_rank = get_world_rank


def get_world_size() -> int:
    """The number of workers in the world."""
    return get_world_info().world_size


def get_local_rank() -> int:
    """The rank of the current worker on its node."""
    return get_world_info().local_rank


def get_local_world_size() -> int:
    """The number of workers on the current node."""
    return get_world_info().local_world_size


get_world_info()


def get_worker_id(id: str | int | None = None) -> int:
    """The RPC id (global rank) of a worker.

    Args:
      id: a rank, returned as is, or a worker name; ``None`` is the current worker (needs RPC
        to be initialized, as does a name).

    Returns:
      The worker's rank.
    """
    if isinstance(id, int):
        return id
    return rpc.get_worker_info(worker_name=id).id


def barrier(worker_names: Iterable[str] | None = None) -> None:
    """Blocks until every given RPC worker reaches this call and its outstanding work is done.

    Args:
      worker_names: the names of the workers to wait for; ``None`` waits for all workers.
    """
    rpc.api._barrier(set() if worker_names is None else set(worker_names))


def auto_init_rpc(
    worker_init_fn: Callable[[], None] | None = None,
    worker_name_format: Callable[..., str] = default_worker_name_format,
    *,
    backend: rpc.BackendType | None = None,
    rpc_backend_options: rpc.RpcBackendOptions | None = None,
) -> Callable[[F], F]:
    """A decorator that initializes RPC for this worker before running the decorated function.

    The worker joins the RPC world under the name ``worker_name_format`` gives for its
    :func:`get_world_info`, registers a graceful :func:`torch.distributed.rpc.shutdown` to run
    at exit, runs ``worker_init_fn`` after all workers have joined, and waits for every worker
    before calling the function. Errors are recorded for ``torchrun`` (see
    :func:`torch.distributed.elastic.multiprocessing.errors.record`).

    Args:
      worker_init_fn: run once on every worker after RPC is up, before the function.
      worker_name_format: maps ``(world_rank, world_size, local_rank, local_world_size)``
        keywords to the worker's RPC name; it becomes the format of
        ``WorldInfo.worker_name`` as soon as this factory is called.
      backend: the RPC backend, passed to :func:`torch.distributed.rpc.init_rpc`.
      rpc_backend_options: the backend's options, passed to
        :func:`torch.distributed.rpc.init_rpc`.

    Returns:
      The decorator.
    """
    global _WORKER_NAME_FORMAT
    _WORKER_NAME_FORMAT = worker_name_format

    def decorator(func: F) -> F:
        world_info = get_world_info()

        @record
        @functools.wraps(func)
        def run_with_rpc(*args: Any, **kwargs: Any) -> Any:
            rpc.init_rpc(
                name=world_info.worker_name,
                rank=world_info.rank,
                world_size=world_info.world_size,
                backend=backend,
                rpc_backend_options=rpc_backend_options,
            )
            atexit.register(rpc.shutdown, graceful=True)
            if worker_init_fn is not None:
                barrier()
                worker_init_fn()
            barrier()
            return func(*args, **kwargs)

        return run_with_rpc  # type: ignore[return-value]

    return decorator


def _rank_filter(ranks: Iterable[int], *, run_on_given_ranks: bool) -> Callable[[F], F]:
    """A decorator running a function on the given ranks only (or on all but them).

    Elsewhere the decorated function does nothing and returns ``None``. The rank is read when
    the decorator is applied.
    """
    ranks = frozenset(ranks)

    def decorator(func: F) -> F:
        runs_here = (get_world_info().world_rank in ranks) == run_on_given_ranks

        @functools.wraps(func)
        def filtered(*args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs) if runs_here else None

        return filtered  # type: ignore[return-value]

    return decorator


def on_rank(*ranks: int) -> Callable[[F], F]:
    """A decorator running a function only on the given ranks (returning ``None`` elsewhere)."""
    return _rank_filter(ranks, run_on_given_ranks=True)


def not_on_rank(*ranks: int) -> Callable[[F], F]:
    """A decorator running a function only on ranks other than the given ones."""
    return _rank_filter(ranks, run_on_given_ranks=False)


def rank_all(func: F) -> F:
    """A decorator running a function on all ranks: returns ``func`` itself."""
    return func


def rank_zero_only(func: F) -> F:
    """A decorator running a function only on rank zero (returning ``None`` elsewhere)."""
    return on_rank(0)(func)


def rank_non_zero_only(func: F) -> F:
    """A decorator running a function on every rank but zero (returning ``None`` on it)."""
    return not_on_rank(0)(func)
