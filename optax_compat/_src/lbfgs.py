"""L-BFGS preconditioning: ``scale_by_lbfgs`` and the two-loop recursion.

Optax keeps these in ``optax/_src/transform.py``; they live in their own module here because
our ``transform.py`` is already large. The memory of past differences is stored as in Optax:
each leaf ``x`` has a stacked buffer of shape ``(memory_size, *x.shape)`` written as a ring
buffer at index ``count % memory_size``, so states match Optax's leaf for leaf. Every step is
pure tensor code (no host synchronisation): the ring index stays a tensor.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

import optree
import torch

from optax_compat._src import base, numerics
from optax_compat._src import building_blocks as bb
from optax_compat._src.building_blocks import tree_math as tm


class ScaleByLBFGSState(NamedTuple):
    """State of :func:`scale_by_lbfgs`.

    Attributes:
      count: number of updates so far (0-d ``int32``).
      params: the parameters at the last update.
      updates: the incoming updates (gradients) at the last update.
      diff_params_memory: the last ``memory_size`` parameter differences, stacked per leaf.
      diff_updates_memory: the last ``memory_size`` update differences, stacked per leaf.
      weights_memory: the weights ``1 / <diff_updates, diff_params>`` of the rank-one terms.
    """

    count: torch.Tensor
    params: base.Params
    updates: base.Params
    diff_params_memory: base.ArrayTree
    diff_updates_memory: base.ArrayTree
    weights_memory: torch.Tensor


def _vdot(xs: tm.Leaves, ys: tm.Leaves) -> torch.Tensor:
    """``Re sum(conj(x) * y)`` over all leaves, as a 0-d tensor."""
    return tm.vdot(xs, ys).real


def _precondition_by_lbfgs(
    updates: tm.Leaves,
    diff_params_memory: tm.Leaves,
    diff_updates_memory: tm.Leaves,
    weights_memory: torch.Tensor,
    identity_scale: torch.Tensor | float,
    memory_idx: torch.Tensor,
) -> tm.Leaves:
    r"""Multiplies ``updates`` by the L-BFGS approximation of the inverse Hessian.

    Args:
      updates: the leaves to precondition.
      diff_params_memory: stacked parameter differences, one ``(memory_size, *shape)`` tensor
        per leaf.
      diff_updates_memory: stacked update differences, likewise.
      weights_memory: the weights :math:`\rho_i` of the rank-one terms, shape
        ``(memory_size,)``.
      identity_scale: :math:`\gamma`, the scale of the initial (identity) preconditioner.
      memory_idx: the ring-buffer index of the oldest entry (``count % memory_size``).

    Returns:
      The preconditioned leaves.

    References:
      Algorithm 7.4 of Nocedal and Wright, `Numerical Optimization
      <https://doi.org/10.1007/978-0-387-40065-5>`_, 1999.
    """
    memory_size = weights_memory.shape[0]
    # Oldest to newest, read once so that the loops below index with Python ints.
    order = torch.remainder(memory_idx.long() + torch.arange(memory_size, device=memory_idx.device),
                            memory_size)
    rhos = weights_memory.index_select(0, order)
    if not _concatenated(updates):
        diff_params = [buffer.index_select(0, _index_for(buffer, order))
                       for buffer in diff_params_memory]
        diff_updates = [buffer.index_select(0, _index_for(buffer, order))
                        for buffer in diff_updates_memory]
        return _two_loop(list(updates), _rows(diff_params, range(memory_size)),
                         _rows(diff_updates, range(memory_size)), rhos, identity_scale)
    # Many small leaves of one dtype and device are concatenated into one vector (one copy of
    # the memory, which reordering copies anyway), so each inner product and update is one
    # kernel rather than one per leaf.
    (flat,) = _two_loop([tm.ravel(updates)],
                        _rows([_ordered_rows(diff_params_memory, order)], range(memory_size)),
                        _rows([_ordered_rows(diff_updates_memory, order)], range(memory_size)),
                        rhos, identity_scale)
    return tm.unravel(flat, updates)


def _rows(memory: tm.Leaves, slots: Iterable[int]) -> list[tm.Leaves]:
    """For each slot, the leaves of ``memory`` (stacked ``(memory_size, ...)`` tensors) at it:
    views, not copies."""
    return [[buffer[slot] for buffer in memory] for slot in slots]


def _index_for(buffer: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``index`` as the indexing operators of ``buffer`` take it: a DTensor memory (FSDP2
    params) needs the index as a DTensor too, the same on every rank."""
    if not tm.is_distributed([buffer]):
        return index
    from torch.distributed.tensor import DTensor, Replicate

    return DTensor.from_local(index, buffer.device_mesh,
                              [Replicate()] * buffer.device_mesh.ndim)


# Below this many elements per leaf on average, the two-loop recursion concatenates the
# leaves: a thousand small leaves cost a thousand kernels per inner product otherwise (1.5 s
# against 6.1 s per update at 1M parameters in 10,000 leaves). Large leaves run one by one,
# which copies nothing (0.36 s against 0.73 s at 4M in 100 leaves).
CONCATENATE_BELOW = 16384


def _concatenated(leaves: tm.Leaves) -> bool:
    """Whether the two-loop recursion runs on the leaves concatenated into one vector: several
    small leaves (:data:`CONCATENATE_BELOW`) of one dtype and device.

    DTensor shards stay apart: concatenating them would gather every leaf.
    """
    return (len(leaves) > 1 and sum(x.numel() for x in leaves) < CONCATENATE_BELOW * len(leaves)
            and len({(x.dtype, x.device) for x in leaves}) == 1
            and not tm.is_distributed(leaves))


def _ordered_rows(buffers: tm.Leaves, order: torch.Tensor) -> torch.Tensor:
    """The stacked memory of all leaves as one ``(memory_size, total size)`` matrix, its rows
    in ``order``.

    Each leaf's rows are selected straight into their columns: one new matrix, where a
    concatenation then a selection would make two (a fresh 160 MB tensor costs more in page
    faults than its copy). Autograd and ``vmap`` take no ``out=``, and ``torch.compile`` breaks
    its graph at an ``out=`` view: there, the two copies (which Inductor fuses into one).
    """
    matrices = [buffer.reshape(buffer.shape[0], -1) for buffer in buffers]
    if tm.is_recording(matrices) or tm.is_batched(matrices) or torch.compiler.is_compiling():
        return torch.cat(matrices, dim=1).index_select(0, order)
    rows = matrices[0].new_empty(len(order), sum(matrix.shape[1] for matrix in matrices))
    for matrix, columns in zip(matrices, rows.split([m.shape[1] for m in matrices], dim=1),
                               strict=True):
        torch.index_select(matrix, 0, order, out=columns)
    return rows


def _two_loop(vec: tm.Leaves, diff_params: list[tm.Leaves], diff_updates: list[tm.Leaves],
              rhos: torch.Tensor, identity_scale: torch.Tensor | float, *,
              inplace: bool = False) -> tm.Leaves:
    """The two-loop recursion over memories given row by row, oldest to newest.

    With ``inplace``, ``vec`` is overwritten block by block (:func:`tree_math.blocks`) with the
    kernels the pure recursion runs, so that the temporaries span a block.
    """

    def add_scaled(vec: tm.Leaves, scale: torch.Tensor, rows: tm.Leaves) -> tm.Leaves:
        if not inplace:
            return tm.add_scaled(vec, tm.scalar_like(scale, vec), rows)
        for vec_block, rows_block in tm.blocks(vec, rows):
            tm.add_scaled_(vec_block, tm.scalar_like(scale, vec_block), rows_block)
        return vec

    memory_size = rhos.shape[0]
    alphas = [None] * memory_size
    for i in reversed(range(memory_size)):
        alphas[i] = rhos[i] * _vdot(diff_params[i], vec)
        vec = add_scaled(vec, -alphas[i], diff_updates[i])
    scale = tm.scalar_like(identity_scale, vec)
    vec = tm.mul_(vec, scale) if inplace else tm.mul(vec, scale)
    for i in range(memory_size):
        beta = rhos[i] * _vdot(diff_updates[i], vec)
        vec = add_scaled(vec, alphas[i] - beta, diff_params[i])
    return vec


def _check_shapes_kept(updates: Any, us: tm.Leaves, ws: tm.Leaves, prev_ws: tm.Leaves) -> None:
    """Raises ``ValueError`` if a leaf of the updates or params changed shape since ``init``.

    The memory holds one row per leaf shape given at ``init``; Optax fails the same way
    ("Cannot broadcast to shape with fewer dimensions") when, say, a 0-d parameter became a
    vector.
    """
    for index, (u, w, prev) in enumerate(zip(us, ws, prev_ws, strict=True)):
        if u.shape == w.shape == prev.shape:
            continue
        path = optree.tree_paths(updates, none_is_leaf=tm.NONE_IS_LEAF,
                                 namespace=tm.NAMESPACE)[index]
        where = "".join(f"[{key!r}]" for key in path) or "<root>"
        raise ValueError(
            f"scale_by_lbfgs: the leaf at {where} has shape {tuple(u.shape)} in the updates and "
            f"{tuple(w.shape)} in the params, but {tuple(prev.shape)} at init; L-BFGS keeps its "
            "memory per parameter shape, so shapes cannot change between steps.")


def scale_by_lbfgs(
    memory_size: int = 10,
    scale_init_precond: bool = True,
) -> base.GradientTransformationExtraArgs:
    r"""Scales updates by the L-BFGS approximation of the inverse Hessian.

    The approximation :math:`P_k` is built from the last ``memory_size`` differences of
    parameters :math:`\delta w_j = w_{j+1} - w_j` and of updates (gradients)
    :math:`\delta u_j = u_{j+1} - u_j`:
    :math:`P_{k, j+1} = V_j^\top P_{k, j} V_j + \rho_j \delta w_j \delta w_j^\top` with
    :math:`V_j = I - \rho_j \delta u_j \delta w_j^\top`, :math:`\rho_j = 1 / \langle \delta u_j,
    \delta w_j\rangle` and :math:`P_{k, k-m} = \gamma_k I`, where
    :math:`\gamma_k = \langle \delta w_{k-1}, \delta u_{k-1}\rangle / \|\delta u_{k-1}\|^2` if
    ``scale_init_precond`` else ``1``. The output is :math:`P_k u_k`; chain it with a line
    search (see :func:`lbfgs`). The memory is updated *before* preconditioning, so that a
    line search chained after it sees the preconditioner of the accepted step.

    At the first step :math:`\gamma_0 = \min(1, 1 / \|u_0\|)`, so that the first step stays in
    a ball of radius one (a heuristic of Optax, not from the references).

    Args:
      memory_size: number of past differences kept.
      scale_init_precond: scale the initial identity preconditioner by :math:`\gamma_k`.

    Returns:
      A :class:`GradientTransformationExtraArgs` with a :class:`ScaleByLBFGSState`; ``update``
      needs ``params`` and accepts ``inplace=True``: the new differences are written into
      their rows of the memory and the result into the incoming updates, and the recursion reads
      the rows where they lie, so that nothing the size of the memory is copied (run eagerly,
      it reads the step count on the host; many small leaves take the pure update's kernels and
      copy its results into the buffers).

    Raises:
      ValueError: if ``memory_size < 1``.

    References:
      Algorithms 7.4 and 7.5 of Nocedal and Wright, `Numerical Optimization
      <https://doi.org/10.1007/978-0-387-40065-5>`_, 1999.

      Liu and Nocedal, `On the limited memory BFGS method for large scale optimization
      <https://doi.org/10.1007/BF01589116>`_, 1989.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_lbfgs()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": torch.tensor([0.5, -1.0])}, state, params)
      >>> updates["w"]
      tensor([ 0.4472, -0.8944])
    """
    if memory_size < 1:
        raise ValueError("memory_size must be >= 1")

    def init_fn(params: base.Params) -> ScaleByLBFGSState:
        leaves, spec = tm.flatten(params)
        device = leaves[0].device if leaves else None
        # Stacking keeps a DTensor leaf's sharding (its dimension 0 becomes dimension 1).
        stacked_zeros = tm.unflatten(
            spec, [torch.stack([torch.zeros_like(x)] * memory_size) for x in leaves])
        return ScaleByLBFGSState(
            count=torch.zeros([], dtype=torch.int32, device=device),
            params=tm.unflatten(spec, tm.zeros_like(leaves)),
            updates=tm.unflatten(spec, tm.zeros_like(leaves)),
            diff_params_memory=stacked_zeros,
            diff_updates_memory=tm.tree_map(torch.zeros_like, stacked_zeros),
            weights_memory=torch.zeros(memory_size, dtype=tm.widest_real_dtype(leaves),
                                       device=device))

    @bb.supports_inplace
    def update_fn(updates: base.Updates, state: ScaleByLBFGSState,
                  params: base.Params | None = None, *, inplace: bool = False,
                  **extra_args: Any) -> tuple[base.Updates, ScaleByLBFGSState]:
        del extra_args
        if params is None:
            raise ValueError(bb.NO_PARAMS_MSG)
        us, spec = tm.float_leaves(updates)
        ws = tm.leaves_like(params, spec, "params", reference=updates)
        prev_ws = tm.leaves_like(state.params, spec, "state.params", reference=updates)
        prev_us = tm.leaves_like(state.updates, spec, "state.updates", reference=updates)
        _check_shapes_kept(updates, us, ws, prev_ws)
        diff_params_memory = tm.leaves_like(state.diff_params_memory, spec,
                                            "state.diff_params_memory", reference=updates)
        diff_updates_memory = tm.leaves_like(state.diff_updates_memory, spec,
                                             "state.diff_updates_memory", reference=updates)
        inplace = (inplace and not torch.compiler.is_compiling() and not tm.is_distributed(us)
                   and not tm.is_recording(us, ws, diff_params_memory, diff_updates_memory))
        if inplace and not _concatenated(us):
            _update_inplace(us, ws, prev_ws, prev_us, diff_params_memory, diff_updates_memory,
                            state)
            return tm.unflatten(spec, us), state._replace(
                count=numerics.safe_increment(state.count))
        old_buffers = [*prev_ws, *prev_us, *diff_params_memory, *diff_updates_memory,
                       state.weights_memory]
        count = state.count
        memory_idx = torch.remainder(count, memory_size)
        prev_memory_idx = torch.remainder(count - 1, memory_size).reshape(1).long()
        started = count > 0

        # 1. Store the newest differences (undefined, hence zero, at the first step).
        diff_params = tm.where(started, tm.sub(ws, prev_ws), tm.zeros_like(ws))
        diff_updates = tm.where(started, tm.sub(us, prev_us), tm.zeros_like(us))
        curvature = _vdot(diff_updates, diff_params)
        weight = torch.where(curvature == 0.0, 0.0, 1.0 / curvature)
        diff_params_memory = [buffer.index_copy(0, _index_for(buffer, prev_memory_idx),
                                                d.unsqueeze(0))
                              for buffer, d in zip(diff_params_memory, diff_params)]
        diff_updates_memory = [buffer.index_copy(0, _index_for(buffer, prev_memory_idx),
                                                 d.unsqueeze(0))
                               for buffer, d in zip(diff_updates_memory, diff_updates)]
        # The memory of weights is a plain tensor, the same on every rank.
        weights_memory = state.weights_memory.index_copy(
            0, prev_memory_idx, tm.gathered(weight).reshape(1).to(state.weights_memory.dtype))

        # 2. The scale gamma_k of the initial preconditioner.
        if scale_init_precond:
            sq_norm = tm.sum_of_squares(diff_updates)
            secant_scale = torch.where(sq_norm > 0.0, curvature / sq_norm, 1.0)
            update_norm = torch.sqrt(tm.sum_of_squares([u.detach() for u in us]))
            capped_inv_norm = torch.clamp(1.0 / update_norm, max=1.0)
            identity_scale = torch.where(started, secant_scale, capped_inv_norm)
        else:
            identity_scale = 1.0

        # 3. The two-loop recursion computes P_k u_k.
        precond_updates = _precondition_by_lbfgs(us, diff_params_memory, diff_updates_memory,
                                                 weights_memory, identity_scale, memory_idx)
        if inplace:  # many small leaves, concatenated: the pure update copied into the buffers
            tm.copy_(old_buffers, [*ws, *us, *diff_params_memory, *diff_updates_memory,
                                   weights_memory])
            tm.copy_(us, precond_updates)
            return tm.unflatten(spec, us), state._replace(count=numerics.safe_increment(count))
        # Copies: later in-place edits of the caller's tensors must not change the memory.
        return tm.unflatten(spec, precond_updates), ScaleByLBFGSState(
            count=numerics.safe_increment(count),
            params=tm.unflatten(spec, tm.clone(ws)),
            updates=tm.unflatten(spec, tm.clone(us)),
            diff_params_memory=tm.unflatten(spec, diff_params_memory),
            diff_updates_memory=tm.unflatten(spec, diff_updates_memory),
            weights_memory=weights_memory)

    def _update_inplace(us: tm.Leaves, ws: tm.Leaves, prev_ws: tm.Leaves, prev_us: tm.Leaves,
                        diff_params_memory: tm.Leaves, diff_updates_memory: tm.Leaves,
                        state: ScaleByLBFGSState) -> None:
        """The update written into the state's buffers and ``us``, leaf by leaf, with the
        kernels of the pure update: only the memory's rows are read, none is copied.

        The ring index is read on the host (the rows are then views), which is why this runs
        eagerly only.
        """
        count = int(state.count)
        newest = (count - 1) % memory_size
        # 1. The newest differences, straight into their rows (zero at the first step).
        diff_params = [buffer[newest] for buffer in diff_params_memory]
        diff_updates = [buffer[newest] for buffer in diff_updates_memory]
        for rows, new, old in ((diff_params, ws, prev_ws), (diff_updates, us, prev_us)):
            for rows_block, new_block, old_block in tm.blocks(rows, new, old):
                tm.copy_(rows_block, tm.sub(new_block, old_block) if count
                         else tm.zeros_like(new_block))
        curvature = _vdot(diff_updates, diff_params)
        weight = torch.where(curvature == 0.0, 0.0, 1.0 / curvature)
        state.weights_memory[newest] = weight.to(state.weights_memory.dtype)
        # 2. The scale gamma_k of the initial preconditioner.
        if not scale_init_precond:
            identity_scale = 1.0
        elif count:
            sq_norm = tm.sum_of_squares(diff_updates)
            identity_scale = torch.where(sq_norm > 0.0, curvature / sq_norm, 1.0)
        else:
            identity_scale = torch.clamp(1.0 / torch.sqrt(tm.sum_of_squares(us)), max=1.0)
        tm.copy_(prev_ws, ws)
        tm.copy_(prev_us, us)
        # 3. The two-loop recursion, oldest row first, into ``us``.
        order = [(count + k) % memory_size for k in range(memory_size)]
        rhos = state.weights_memory[order]
        _two_loop(us, _rows(diff_params_memory, order), _rows(diff_updates_memory, order),
                  rhos, identity_scale, inplace=True)

    return base.GradientTransformationExtraArgs(init_fn, update_fn)
