"""Calling a function on RPC workers: partition the inputs, call remotely, reduce the results.

A *partitioner* maps a call's ``(*args, **kwargs)`` to a list of ``(worker_rank, args, kwargs)``
calls; a *reducer* maps the list of their results to one value. :func:`parallelize` turns a
function into one that runs this way.
"""

from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, cast

import torch
import torch.distributed.rpc as rpc

from torchopt_fn import pytree
from torchopt_fn.distributed.world import get_worker_id, get_world_rank, get_world_size
from torchopt_fn.typing import Future

__all__ = [
    "TensorDimensionPartitioner",
    "dim_partitioner",
    "batch_partitioner",
    "mean_reducer",
    "sum_reducer",
    "remote_async_call",
    "remote_sync_call",
    "parallelize",
    "parallelize_async",
    "parallelize_sync",
]

# RPC's "use the agent's default timeout" marker.
UNSET_RPC_TIMEOUT = rpc.api.UNSET_RPC_TIMEOUT if rpc.is_available() else -1.0

T = TypeVar("T")
U = TypeVar("U")
Args = tuple[Any, ...]
KwArgs = dict[str, Any]
PartitionFunction = Callable[..., Sequence[tuple[int, Args | None, KwArgs | None]]]
Partitioner = int | str | PartitionFunction


class TensorDimensionPartitioner:
    """Splits every tensor of a call's arguments along one dimension, one part per RPC call.

    Non-tensor arguments (modules, RRefs, numbers, ...) are passed unchanged to every part.
    All tensor arguments must have the same size along ``dim``. Parts go to the workers
    round-robin.

    Args:
      dim: the dimension to split (negative counts from the end).
      exclusive: if ``True``, one part per sample (index along ``dim``). If ``False``,
        ``min(batch_size, num_workers)`` parts: one sample each when the batch is not larger
        than the number of workers, otherwise contiguous chunks of ``batch_size //
        num_workers`` samples with the remainder added to the last chunk.
      keepdim: whether parts keep the split dimension (slicing) or drop it (indexing); dropping
        it needs ``exclusive=True``.
      workers: the ranks or names of the workers to use; ``None`` uses every worker of the world.

    Raises:
      ValueError: if ``keepdim=False`` without ``exclusive=True``.
    """

    def __init__(
        self,
        dim: int,
        *,
        exclusive: bool = False,
        keepdim: bool = False,
        workers: Sequence[int | str] | None = None,
    ) -> None:
        if not keepdim and not exclusive:
            raise ValueError("keepdim=False should be used with exclusive=True.")
        self.dim = dim
        self.exclusive = exclusive
        self.keepdim = keepdim
        self.workers = workers

    def __call__(self, *args: Any, **kwargs: Any) -> list[tuple[int, Args | None, KwArgs | None]]:
        """Splits ``(args, kwargs)`` into ``(worker_rank, args, kwargs)`` calls.

        Returns:
          The calls; a single call on the current worker with the arguments unchanged when
          there is no tensor among them.

        Raises:
          ValueError: if two tensors differ in size along ``dim``.
        """
        if self.workers is None:
            workers = list(range(get_world_size()))
        else:
            workers = [get_worker_id(worker) for worker in self.workers]

        leaves, treespec = pytree.tree_flatten((args, kwargs))
        batch_size = self._batch_size(leaves)
        if batch_size is None:
            return [(get_world_rank(), args, kwargs.copy())]

        calls = []
        for i, index in enumerate(self._indices(batch_size, len(workers))):
            part = [leaf[index] if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
            part_args, part_kwargs = pytree.tree_unflatten(treespec, part)
            calls.append((workers[i % len(workers)], part_args, part_kwargs))
        return calls

    def _batch_size(self, leaves: list[Any]) -> int | None:
        """The common size of the tensors along ``dim`` (``None`` without tensors)."""
        batch_size = None
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor):
                continue
            if batch_size is None:
                batch_size = leaf.shape[self.dim]
            elif leaf.shape[self.dim] != batch_size:
                raise ValueError(
                    f"Batch size mismatch on dim={self.dim}. Expected {batch_size}, got "
                    f"{leaf.shape[self.dim]} (shape: {leaf.shape}).")
        return batch_size

    def _indices(self, batch_size: int, num_workers: int) -> list[tuple[Any, ...]]:
        """The tensor index of each part: its position along ``dim``, full slices elsewhere."""
        if self.exclusive:
            positions: list[int | slice] = [
                slice(i, i + 1) if self.keepdim else i for i in range(batch_size)]
        elif batch_size <= num_workers:
            positions = [slice(i, i + 1) for i in range(batch_size)]
        else:
            chunk = batch_size // num_workers
            bounds = [i * chunk for i in range(num_workers)] + [batch_size]
            positions = [slice(start, stop) for start, stop in itertools.pairwise(bounds)]

        if self.dim >= 0:
            return [(slice(None),) * self.dim + (position,) for position in positions]
        return [(..., position) + (slice(None),) * (-self.dim - 1) for position in positions]


def dim_partitioner(
    dim: int = 0,
    *,
    exclusive: bool = False,
    keepdim: bool = True,
    workers: Sequence[int | str] | None = None,
) -> PartitionFunction:
    """A partitioner splitting every tensor argument along ``dim``.

    Args:
      dim: the dimension to split (negative counts from the end).
      exclusive: one part per sample if ``True``; otherwise ``min(batch_size, num_workers)``
        parts (see :class:`TensorDimensionPartitioner`).
      keepdim: whether parts keep the split dimension; ``False`` needs ``exclusive=True``.
      workers: the ranks or names of the workers to use; ``None`` uses every worker.

    Returns:
      A :class:`TensorDimensionPartitioner`.
    """
    return TensorDimensionPartitioner(dim, exclusive=exclusive, keepdim=keepdim, workers=workers)


batch_partitioner: PartitionFunction = dim_partitioner(dim=0, keepdim=True, exclusive=False)
"""Splits the tensor arguments along their first dimension into ``min(batch_size, num_workers)``
parts, one per worker; other arguments go to every part unchanged."""

exclusive_batch_partitioner: PartitionFunction = dim_partitioner(
    dim=0, keepdim=True, exclusive=True)
"""Splits the tensor arguments along their first dimension into one part per sample (each a
batch of one), sent to the workers round-robin; other arguments go to every part unchanged."""


def mean_reducer(results: Iterable[torch.Tensor]) -> torch.Tensor:
    """The element-wise mean of the results."""
    return torch.mean(torch.stack(tuple(results), dim=0), dim=0)


def sum_reducer(results: Iterable[torch.Tensor]) -> torch.Tensor:
    """The element-wise sum of the results."""
    return torch.sum(torch.stack(tuple(results), dim=0), dim=0)


def remote_async_call(
    func: Callable[..., T],
    *,
    args: Args | None = None,
    kwargs: KwArgs | None = None,
    partitioner: Partitioner | None = None,
    reducer: Callable[[Iterable[T]], U] | None = None,
    timeout: float | None = UNSET_RPC_TIMEOUT,
) -> Future[list[T]] | Future[U]:
    """Calls ``func`` on RPC workers without waiting, as the partitioner decides.

    Args:
      func: the function to call; it is pickled by reference, so it must be importable on the
        workers.
      args: the positional arguments of the call.
      kwargs: the keyword arguments of the call.
      partitioner: a worker rank or name (one call there with the arguments unchanged), or a
        function mapping the arguments to ``(worker_rank, args, kwargs)`` calls;
        ``None`` is :data:`batch_partitioner`.
      reducer: combines the list of results into one; ``None`` keeps the list.
      timeout: the timeout of each RPC in seconds; the default uses the RPC agent's.

    Returns:
      A :class:`torch.futures.Future` of the results (in the partitioner's order) or of their
      reduction, on the current worker.

    Raises:
      ValueError: if ``partitioner`` is neither a rank, a name nor callable.
    """
    args = () if args is None else args
    kwargs = {} if kwargs is None else kwargs
    partitioner = batch_partitioner if partitioner is None else partitioner
    if isinstance(partitioner, (int, str)):
        calls = [(get_worker_id(id=partitioner), args, kwargs)]
    elif callable(partitioner):
        calls = partitioner(*args, **kwargs)
    else:
        raise ValueError(f"Invalid partitioner: {partitioner!r}.")

    futures = [
        rpc.rpc_async(rank, func, args=call_args, kwargs=call_kwargs, timeout=timeout)
        for rank, call_args, call_kwargs in calls
    ]
    results = cast(
        Future[list[T]],
        torch.futures.collect_all(futures).then(
            lambda done: [future.wait() for future in done.wait()]),
    )
    if reducer is None:
        return results
    return cast(Future[U], results.then(lambda done: reducer(done.wait())))


def remote_sync_call(
    func: Callable[..., T],
    *,
    args: Args | None = None,
    kwargs: KwArgs | None = None,
    partitioner: Partitioner | None = None,
    reducer: Callable[[Iterable[T]], U] | None = None,
    timeout: float | None = UNSET_RPC_TIMEOUT,
) -> list[T] | U:
    """Calls ``func`` on RPC workers as the partitioner decides and waits for the results.

    Args:
      func: the function to call; it must be importable on the workers.
      args: the positional arguments of the call.
      kwargs: the keyword arguments of the call.
      partitioner: a worker rank or name, or a partition function; ``None`` is
        :data:`batch_partitioner`.
      reducer: combines the list of results into one; ``None`` keeps the list.
      timeout: the timeout of each RPC in seconds; the default uses the RPC agent's.

    Returns:
      The list of results, or their reduction, on the current worker.
    """
    return remote_async_call(
        func, args=args, kwargs=kwargs, partitioner=partitioner, reducer=reducer,
        timeout=timeout).wait()


def _keep_importable(func: Callable[..., Any], suffix: str) -> None:
    """Publishes ``func`` in its module as ``<qualname><suffix>`` and renames it accordingly.

    RPC pickles functions by module and qualified name. Once decorated, the original name in
    the module is the parallel wrapper, so without this the workers would run the wrapper
    (and call themselves) instead of ``func``.
    """
    name = getattr(func, "__qualname__", func.__name__)
    if hasattr(func, "__qualname__"):
        func.__qualname__ = f"{func.__qualname__}{suffix}"
    func.__name__ = f"{func.__name__}{suffix}"
    __import__(func.__module__, level=0)
    setattr(sys.modules[func.__module__], f"{name}{suffix}", func)


def _parallelizer(
    remote_call: Callable[..., Any],
    suffix: str,
    partitioner: Partitioner | None,
    reducer: Callable[[Iterable[Any]], Any] | None,
    timeout: float | None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The decorator of :func:`parallelize` and :func:`parallelize_async`."""
    if partitioner is None:
        partitioner = batch_partitioner
        if reducer is None:
            reducer = mean_reducer

    def decorator(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def parallel(*args: Any, **kwargs: Any) -> Any:
            return remote_call(
                func, args=args, kwargs=kwargs, partitioner=partitioner, reducer=reducer,
                timeout=timeout)

        _keep_importable(func, suffix)
        return parallel

    return decorator


def parallelize_async(
    partitioner: Partitioner | None = None,
    reducer: Callable[[Iterable[T]], U] | None = None,
    timeout: float | None = UNSET_RPC_TIMEOUT,
) -> Callable[[Callable[..., T]], Callable[..., Future[list[T]] | Future[U]]]:
    """A decorator making a function run on RPC workers and return a future of the result.

    A call of the decorated function is :func:`remote_async_call` of the original function
    with the call's arguments. The original function stays importable under its name
    suffixed with ``__parallelize_async_unwrapped__``, which is what the workers run; so the
    function must be defined at the top level of a module the workers can import.

    Args:
      partitioner: a worker rank or name, or a partition function; ``None`` is
        :data:`batch_partitioner`, and then a ``None`` reducer is :func:`mean_reducer`.
      reducer: combines the list of results into one; ``None`` keeps the list (unless the
        partitioner is ``None`` too).
      timeout: the timeout of each RPC in seconds; the default uses the RPC agent's.

    Returns:
      The decorator.
    """
    return _parallelizer(
        remote_async_call, "__parallelize_async_unwrapped__", partitioner, reducer, timeout)


def parallelize(
    partitioner: Partitioner | None = None,
    reducer: Callable[[Iterable[T]], U] | None = None,
    timeout: float | None = UNSET_RPC_TIMEOUT,
) -> Callable[[Callable[..., T]], Callable[..., list[T] | U]]:
    """A decorator making a function run on RPC workers and return the (reduced) result.

    A call of the decorated function is :func:`remote_sync_call` of the original function
    with the call's arguments. The original function stays importable under its name
    suffixed with ``__parallelize_unwrapped__``, which is what the workers run; so the
    function must be defined at the top level of a module the workers can import. Inside a
    :class:`~torch.distributed.autograd.context`, gradients flow back through the calls.

    Args:
      partitioner: a worker rank or name, or a partition function; ``None`` is
        :data:`batch_partitioner`, and then a ``None`` reducer is :func:`mean_reducer`.
      reducer: combines the list of results into one; ``None`` keeps the list (unless the
        partitioner is ``None`` too).
      timeout: the timeout of each RPC in seconds; the default uses the RPC agent's.

    Returns:
      The decorator.
    """
    return _parallelizer(
        remote_sync_call, "__parallelize_unwrapped__", partitioner, reducer, timeout)


parallelize_sync = parallelize
