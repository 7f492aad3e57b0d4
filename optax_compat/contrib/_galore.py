"""GaLore: gradient low-rank projection (mirrors ``optax/contrib/_galore.py``).

The gradient ``G`` of each matrix-shaped parameter (``m x n``) is projected onto ``rank``
singular vectors of a recent gradient: ``P^T G`` with the left singular vectors when
``m >= n``, ``G P`` with the right ones otherwise. A base optimizer (Adam by default) runs on
these small matrices, and its output is projected back. The projectors are refreshed from an
SVD of the current gradient every ``update_proj_gap`` steps.

Refreshing is a data-dependent branch on the step count (Optax's ``lax.cond``): the SVD is
computed only at refresh steps, which costs one host read of the 0-d count per ``update`` (none
when no leaf is projected). Computing the SVD at every step and selecting with ``torch.where``
would avoid that read but cost an SVD of every matrix at every step, which is what GaLore
exists to avoid.

Singular vectors are defined up to sign, and the SVD runs in float32 as in Optax. PyTorch and
jaxlib call different LAPACK builds (MKL and OpenBLAS here), so a projector column may differ
from Optax's by its sign and by float32 rounding, and the low-rank moments of the base
optimizer by the same signs. The updates do not depend on those signs until a later refresh
meets non-zero moments: moments kept in the old basis then meet gradients in the new one, and
the result depends on the LAPACK build (in Optax as well).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Optional, Union

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics, transform
from optax_compat.contrib import _muon
from optax_compat.transforms import _adding, _combining


class GaLoreDimensionNumbers(NamedTuple):
    """Which axes of a weight form the 2-D matrix that GaLore projects.

    For a logically 2-D map stored with more axes, e.g. attention weights of shape
    ``(embed, heads, head_dim)``, ``GaLoreDimensionNumbers(0, (1, 2))`` projects the
    ``embed x (heads * head_dim)`` matrix. Every axis must be named in one of the fields.
    Like Optax's, this is a pytree node; tree maps over dimension-number trees treat it as a
    leaf.

    Attributes:
      reduction_axis: axis or axes of the input (reduction) dimension.
      output_axis: axis or axes of the output dimension.
    """

    reduction_axis: Union[Sequence[int], int] = 0
    output_axis: Union[Sequence[int], int] = 1


GaLoreDimNumsOrFn = Union[GaLoreDimensionNumbers, base.Params,
                          Callable[[base.Params], Optional[base.Params]]]


class _Projection(NamedTuple):
    """How one leaf is viewed as a matrix, and which side of it is projected."""

    permutation: tuple[int, ...]  # reduction axes, then output axes
    permuted_shape: tuple[int, ...]
    rows: int
    cols: int
    rank: int  # the effective rank, at most min(rows, cols)

    @property
    def left(self) -> bool:
        """Whether the left singular vectors project (``P^T G``), i.e. rows >= cols."""
        return self.rows >= self.cols

    @property
    def projector_shape(self) -> tuple[int, int]:
        return (self.rows if self.left else self.cols, self.rank)

    @property
    def low_rank_shape(self) -> tuple[int, int]:
        return (self.rank, self.cols) if self.left else (self.rows, self.rank)

    def to_matrix(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(self.permutation).reshape(self.rows, self.cols)

    def from_matrix(self, matrix: torch.Tensor) -> torch.Tensor:
        inverse = sorted(range(len(self.permutation)), key=self.permutation.__getitem__)
        return matrix.reshape(self.permuted_shape).permute(inverse)

    def refreshed_projector(self, matrix: torch.Tensor) -> torch.Tensor:
        """``rank`` singular vectors of ``matrix`` (computed in float32, as Optax does).

        A matrix with a NaN or infinite entry gives a NaN projector without raising (JAX's SVD
        returns NaN where ``torch.linalg.svd`` raises), so its updates are NaN, as Optax's are.
        """
        matrix32 = matrix.to(torch.float32)
        finite = matrix32.isfinite().all()
        u, _, vh = torch.linalg.svd(torch.where(finite, matrix32, 0.0), full_matrices=False)
        vectors = u[:, :self.rank] if self.left else vh[:self.rank, :].mT
        return torch.where(finite, vectors, torch.nan).to(matrix.dtype)

    def project(self, matrix: torch.Tensor, projector: torch.Tensor) -> torch.Tensor:
        return _matmul(projector.mT, matrix) if self.left else _matmul(matrix, projector)

    def project_back(self, low_rank: torch.Tensor, projector: torch.Tensor) -> torch.Tensor:
        return _matmul(projector, low_rank) if self.left else _matmul(low_rank, projector.mT)


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` in the dtype JAX promotes the two to (a float32 projector meeting float64
    gradients: float64), where ``torch.matmul`` refuses mixed dtypes."""
    a, b = tm.promoted(a, b)
    return a @ b


def _projection(x: torch.Tensor, dim_nums: GaLoreDimensionNumbers, rank: int) -> _Projection:
    """The matrix view of ``x`` given by ``dim_nums``, with ``rank`` capped by its shape."""
    if x.ndim < 2:
        raise ValueError(f"GaLore requires tensors with rank >= 2, got shape {tuple(x.shape)}")
    reduction_axes, output_axes = _muon.normalize_axes(x.ndim, dim_nums)
    if set(reduction_axes) & set(output_axes):
        raise ValueError(f"Reduction axes {reduction_axes} and output axes {output_axes} must "
                         f"be disjoint. Got dim_nums={dim_nums} for shape {tuple(x.shape)}")
    if len(set(reduction_axes) | set(output_axes)) != x.ndim:
        raise ValueError(f"All axes must be specified. Got reduction={reduction_axes}, "
                         f"output={output_axes} for tensor with {x.ndim} dimensions")
    permutation = reduction_axes + output_axes
    rows = math.prod([x.shape[ax] for ax in reduction_axes])
    cols = math.prod([x.shape[ax] for ax in output_axes])
    return _Projection(permutation=permutation,
                       permuted_shape=tuple(x.shape[ax] for ax in permutation),
                       rows=rows, cols=cols, rank=min(rank, rows, cols))


def _scaled(x: torch.Tensor, scale: Any) -> torch.Tensor:
    """``scale * x``, without a pass over ``x`` for the default ``scale`` of 1 (same numbers)."""
    return x if bb.is_one(scale) else scale * x


class GaLoreState(NamedTuple):
    """State for the GaLore optimizer.

    Attributes:
      count: number of update steps taken (0-d int32).
      base_optimizer_state: state of the base optimizer, on the low-rank gradients of the
        projected parameters and the full gradients of the others.
      projector: the projection matrix of each projected parameter (``(0, 0)`` for others).
    """

    count: torch.Tensor  # 0-d int32
    base_optimizer_state: base.OptState
    projector: base.Updates


def scale_by_galore(
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: float = 1.0,
    base_optimizer: Optional[base.GradientTransformation] = None,
    weight_dimension_numbers: Optional[GaLoreDimNumsOrFn] = None,
) -> base.GradientTransformation:
    """Scales updates with GaLore: a base optimizer on low-rank projections of the gradients.

    The ``base_optimizer`` must not need ``params`` (it sees low-rank shapes): use e.g.
    :func:`optax_compat.scale_by_adam`, ``scale_by_lion``, ``scale_by_rms``, not ``adamw``;
    decoupled weight decay belongs to :func:`galore`'s ``weight_decay``.

    Args:
      rank: target rank of the projections (capped by each matrix's shape).
      update_proj_gap: the projectors are recomputed from the gradient's SVD every this many
        steps (at steps 0, gap, 2 gap, ...).
      scale: factor applied to the projected-back updates.
      base_optimizer: the transformation run in the low-rank space (and on the full
        gradients of non-projected parameters); default :func:`optax_compat.scale_by_adam`.
      weight_dimension_numbers: ``None`` (project exactly the 2-D parameters), one
        :class:`GaLoreDimensionNumbers` for every parameter of rank >= 2, a tree of them
        (``None`` leaves are not projected), or a callable returning such a tree.

    Returns:
      A transformation with a :class:`GaLoreState`.

    Raises:
      TypeError: if ``rank`` is not an int.
      ValueError: if ``rank`` is not positive.

    References:
      Zhao et al., `GaLore: Memory-Efficient LLM Training by Gradient Low-Rank Projection
      <https://arxiv.org/abs/2403.03507>`_, 2024.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.contrib.scale_by_galore(rank=1)
      >>> params = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}
      >>> state = tx.init(params)
      >>> grads = {"w": torch.tensor([[0.5, -1.0], [2.0, 0.0]])}
      >>> updates, state = tx.update(grads, state, params)
      >>> torch.linalg.matrix_rank(updates["w"])
      tensor(1)
    """
    if base_optimizer is None:
        base_optimizer = transform.scale_by_adam()
    if not isinstance(rank, int):
        raise TypeError(f"`rank` must be an int, got {type(rank)}")
    if rank <= 0:
        raise ValueError(f"`rank` must be positive, got {rank}")

    def projections(tree: base.Params, spec: Any) -> list[Optional[_Projection]]:
        """The projection of each leaf of ``tree`` (``None`` for a leaf kept full)."""
        xs = tm.leaves(tree)
        if weight_dimension_numbers is None:
            dim_nums = [GaLoreDimensionNumbers() if x.ndim == 2 else None for x in xs]
        elif isinstance(weight_dimension_numbers, GaLoreDimensionNumbers):
            dim_nums = [weight_dimension_numbers if x.ndim >= 2 else None for x in xs]
        else:
            tree_of_dim_nums = (weight_dimension_numbers(tree)
                                if callable(weight_dimension_numbers)
                                else weight_dimension_numbers)
            try:
                dim_nums = spec.flatten_up_to(tree_of_dim_nums)
            except ValueError as error:
                raise ValueError("The structure of weight_dimension_numbers does not match "
                                 f"the params: {error}") from None
        return [None if d is None else _projection(x, d, rank) for x, d in zip(xs, dim_nums)]

    def init_fn(params: base.Params) -> GaLoreState:
        xs, spec = tm.flatten(params)
        if not xs:
            return GaLoreState(count=bb.zero_count(params),
                               base_optimizer_state=base_optimizer.init(params),
                               projector=params)
        projectors, proxies = [], []
        for x, projection in zip(xs, projections(params, spec)):
            if projection is None:
                projectors.append(x.new_zeros((0, 0)))
                proxies.append(torch.zeros_like(x))
            else:
                projectors.append(x.new_zeros(projection.projector_shape))
                proxies.append(x.new_zeros(projection.low_rank_shape))
        return GaLoreState(count=bb.zero_count(params),
                           base_optimizer_state=base_optimizer.init(tm.unflatten(spec, proxies)),
                           projector=tm.unflatten(spec, projectors))

    def update_fn(updates: base.Updates, state: GaLoreState,
                  params: Optional[base.Params] = None) -> tuple[base.Updates, GaLoreState]:
        del params
        gs, spec = tm.flatten(updates)
        old_projectors = tm.leaves_like(state.projector, spec, "state.projector",
                                        reference=updates)
        leaf_projections = projections(updates, spec)
        # Optax's lax.cond on the count; see the module docstring for why this reads it.
        refresh = (any(p is not None for p in leaf_projections)
                   and bool(state.count % update_proj_gap == 0))
        low_rank, new_projectors = [], []
        for g, projector, projection in zip(gs, old_projectors, leaf_projections):
            if projection is None:
                low_rank.append(g)
                new_projectors.append(projector)
                continue
            matrix = projection.to_matrix(g)
            if refresh:
                projector = projection.refreshed_projector(matrix)
            low_rank.append(projection.project(matrix, projector))
            new_projectors.append(projector)
        low_rank_updates, new_base_state = base_optimizer.update(
            tm.unflatten(spec, low_rank), state.base_optimizer_state, None)
        full_updates = [
            u if projection is None
            else _scaled(projection.from_matrix(projection.project_back(u, projector)),
                         scale).to(g.dtype)
            for u, g, projector, projection in zip(
                tm.leaves_like(low_rank_updates, spec, "the base optimizer's updates"),
                gs, new_projectors, leaf_projections)]
        return tm.unflatten(spec, full_updates), GaLoreState(
            count=numerics.safe_increment(state.count), base_optimizer_state=new_base_state,
            projector=tm.unflatten(spec, new_projectors))

    return base.GradientTransformation(init_fn, update_fn)


def galore(
    learning_rate: base.ScalarOrSchedule,
    rank: int = 128,
    update_proj_gap: int = 200,
    scale: float = 1.0,
    base_optimizer: Optional[base.GradientTransformation] = None,
    weight_decay: Union[float, torch.Tensor] = 0.0,
    mask: Optional[Union[Any, Callable[[base.Params], Any]]] = None,
    weight_dimension_numbers: Optional[GaLoreDimNumsOrFn] = None,
) -> base.GradientTransformation:
    r"""GaLore: memory-efficient training by gradient low-rank projection.

    Chains :func:`scale_by_galore`, decoupled weight decay in the full parameter space and the
    learning rate. Optimizer state of an ``m x n`` matrix shrinks from ``2 m n`` (Adam) to
    ``2 min(r n, m r)`` plus the projector.

    Args:
      learning_rate: a fixed step size or a schedule (set it to 1 if the base optimizer
        already has one).
      rank: target rank of the projections.
      update_proj_gap: steps between refreshes of the projectors.
      scale: factor applied to the projected-back updates.
      base_optimizer: the gradient-only transformation run in the low-rank space (default
        ``scale_by_adam()``); not ``adamw``/``lamb``/``lars``, which need params.
      weight_decay: decoupled weight decay (as in AdamW), times the learning rate.
      mask: a tree of booleans (or a callable returning one) selecting the decayed leaves.
      weight_dimension_numbers: which tensors are projected and how; see
        :func:`scale_by_galore`.

    Returns:
      The optimizer as a gradient transformation.

    References:
      Zhao et al., `GaLore: Memory-Efficient LLM Training by Gradient Low-Rank Projection
      <https://arxiv.org/abs/2403.03507>`_, 2024.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}
      >>> opt = optax.contrib.galore(learning_rate=0.1, rank=1)
      >>> state = opt.init(params)
      >>> updates, state = opt.update({"w": params["w"]}, state, params)
      >>> torch.linalg.matrix_rank(updates["w"])  # a rank-1 step
      tensor(1)
    """
    return _combining.chain(
        scale_by_galore(rank=rank, update_proj_gap=update_proj_gap, scale=scale,
                        base_optimizer=base_optimizer,
                        weight_dimension_numbers=weight_dimension_numbers),
        _adding.add_decayed_weights(weight_decay, mask),
        transform.scale_by_learning_rate(learning_rate),
    )
