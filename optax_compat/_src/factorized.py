"""Factored second-moment estimation, the core of Adafactor (mirrors ``optax/_src/factorized.py``).

A matrix-shaped leaf keeps only the running means of its squared gradient over rows and over
columns; their outer product (normalised) estimates the full second moment. Other leaves keep
the full moment, as RMSProp does. All leaves travel together: only the reductions, whose axes
are leaf-specific, run leaf by leaf; every other operation is one ``torch._foreach_*`` call
over the statistics of the whole tree (in place, of a group of whole leaves at a time, so that
the squared gradient and the products span a block or the largest leaf, not the parameters).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics

Scalar = float | int | torch.Tensor


def _decay_rate_pow(i: Scalar, exponent: Scalar = 0.8) -> torch.Tensor:
    """Adafactor's second-moment decay ``1 - (i + 1) ** -exponent``, in float32 as in Optax."""
    # The float32 power is taken in float64 and rounded once, which reproduces XLA's correctly
    # rounded float32 ``pow`` (torch's float32 ``pow`` can be one ulp off).
    step = bb.as_tensor(i + 1).to(torch.float32).to(torch.float64)
    power = step ** bb.as_tensor(-exponent, torch.float32, step.device).to(torch.float64)
    return 1.0 - power.to(torch.float32)


def _factored_dims(shape: tuple[int, ...], factored: bool,
                   min_dim_size_to_factor: int) -> tuple[int, int] | None:
    """The two largest axes ``(second, largest)`` to factor over, or ``None`` not to factor.

    A leaf is factored when it has at least two axes and its second largest one has at least
    ``min_dim_size_to_factor`` elements.
    """
    if not factored or len(shape) < 2:
        return None
    by_size = sorted(range(len(shape)), key=lambda axis: shape[axis])
    if shape[by_size[-2]] < min_dim_size_to_factor:
        return None
    return by_size[-2], by_size[-1]


class FactoredState(NamedTuple):
    """State of :func:`scale_by_factored_rms`.

    For a factored leaf ``v_row``/``v_col`` hold the row/column statistics and ``v`` a
    placeholder of shape ``(1,)``; for the other leaves ``v`` holds the full statistics and
    ``v_row``/``v_col`` are placeholders.
    """

    count: torch.Tensor  # 0-d int32: number of update steps
    v_row: base.ArrayTree
    v_col: base.ArrayTree
    v: base.ArrayTree


def _squared_plus(grads: list[torch.Tensor], epsilon: Scalar) -> list[torch.Tensor]:
    """``|g| ** 2 + epsilon`` per leaf."""
    if any(g.is_complex() for g in grads):
        # ``|g| ** 2`` of a complex leaf is a strided view: a fresh sum keeps the state compact.
        return tm.add(tm.abs_sq(grads), epsilon)
    return tm.add_(tm.square(grads), epsilon)  # into the squares just allocated


def scale_by_factored_rms(
    factored: bool = True,
    decay_rate: Scalar = 0.8,
    step_offset: Scalar = 0,
    min_dim_size_to_factor: int = 128,
    epsilon: Scalar = 1e-30,
    decay_rate_fn: Callable[[Scalar, Scalar], Scalar] = _decay_rate_pow,
) -> base.GradientTransformationExtraArgs:
    """Scales updates by a factored estimate of the gradient's root mean square (Adafactor).

    A "1 + epsilon" memory algorithm: for a matrix leaf it stores one vector per axis instead
    of a full second moment.

    Args:
      factored: factor the second moment of leaves with at least two axes.
      decay_rate: parameter of ``decay_rate_fn`` controlling the second-moment decay.
      step_offset: subtracted from the step count (to restart the schedule for fine-tuning).
      min_dim_size_to_factor: factor a leaf only if its two largest axes have at least this
        many elements.
      epsilon: added to the squared gradient.
      decay_rate_fn: ``(step, decay_rate) -> decay`` of the second moment; Adafactor's
        ``1 - (step + 1) ** -decay_rate`` by default.

    Returns:
      A transformation that needs ``params`` (their shapes decide factoring); its ``update``
      accepts ``inplace``.

    References:
      Shazeer et al, `Adafactor: Adaptive Learning Rates with Sublinear Memory Cost
      <https://arxiv.org/abs/1804.04235>`_, 2018

      Zhai et al, `Scaling Vision Transformers <https://arxiv.org/abs/2106.04560>`_, 2021

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.scale_by_factored_rms(min_dim_size_to_factor=2)
      >>> params = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}
      >>> state = tx.init(params)
      >>> grads = {"w": torch.tensor([[0.5, -1.0], [2.0, 0.0]])}
      >>> updates, state = tx.update(grads, state, params)
      >>> updates["w"]
      tensor([[ 0.4971, -2.0494],
              [ 1.1114,  0.0000]])
    """

    def factored_dims_of(param: torch.Tensor) -> tuple[int, int] | None:
        return _factored_dims(tuple(param.shape), factored, min_dim_size_to_factor)

    def init_fn(params: base.Params) -> FactoredState:
        param_leaves, spec = tm.flatten(params)
        v_row, v_col, v = [], [], []
        for param in param_leaves:
            placeholder = torch.zeros((1,), dtype=param.dtype, device=param.device)
            dims = factored_dims_of(param)
            if dims is None:
                v_row.append(placeholder)
                v_col.append(placeholder)
                v.append(torch.zeros_like(param))
            else:
                row_axis, col_axis = dims
                v_row.append(torch.zeros_like(param.sum(dim=col_axis)))
                v_col.append(torch.zeros_like(param.sum(dim=row_axis)))
                v.append(placeholder)
        return FactoredState(count=bb.zero_count(params),
                             v_row=tm.unflatten(spec, tm.reduced_for_storage(v_row)),
                             v_col=tm.unflatten(spec, tm.reduced_for_storage(v_col)),
                             v=tm.unflatten(spec, v))

    def formula(grads: tm.Leaves, param_leaves: tm.Leaves, v_row: tm.Leaves, v_col: tm.Leaves,
                v: tm.Leaves, decay: Scalar, inplace: bool) -> tuple[tm.Leaves, ...]:
        """The new updates, the params (read only, returned as they are) and the new state."""
        del inplace
        dims = [factored_dims_of(p) for p in param_leaves]
        full = [i for i, d in enumerate(dims) if d is None]
        split = [i for i, d in enumerate(dims) if d is not None]
        row_axes = [dims[i][0] for i in split]
        col_axes = [dims[i][1] for i in split]
        grad_sqrs = _squared_plus(grads, epsilon)

        # Every statistic (full moments, row means, column means) moves in one foreach call.
        stat_owners = full + split + split
        stats = bb.moving_average(
            [v[i] for i in full] + [v_row[i] for i in split] + [v_col[i] for i in split],
            [grad_sqrs[i] for i in full]
            + [grad_sqrs[i].mean(dim=c) for i, c in zip(split, col_axes, strict=True)]
            + [grad_sqrs[i].mean(dim=r) for i, r in zip(split, row_axes, strict=True)],
            decay)
        stats = [s.to(param_leaves[i].dtype) for s, i in zip(stats, stat_owners, strict=True)]
        moments = stats[:len(full)]
        rows = stats[len(full):len(full) + len(split)]
        cols = stats[len(full) + len(split):]

        # The row statistics are normalised by their mean (over the row axis, which is
        # ``row_axis - 1`` in a row vector when the column axis came before it).
        row_means = [row.mean(dim=r - 1 if r > c else r, keepdim=True)
                     for row, r, c in zip(rows, row_axes, col_axes, strict=True)]
        # ``x ** -0.5`` as in Optax: ``rsqrt`` gives the same bits and is several times faster
        # than torch's ``pow`` on CPU.
        factors = tm.rsqrt(moments + tm.div(rows, row_means) + cols)
        full_factors = factors[:len(full)]
        row_factors = factors[len(full):len(full) + len(split)]
        col_factors = factors[len(full) + len(split):]

        scaled = tm.mul(
            [grads[i] for i in full + split],
            full_factors + [f.unsqueeze(c) for f, c in zip(row_factors, col_axes, strict=True)])
        # Into the products just allocated: autograd saved the factors, not the products.
        tm.mul_(scaled[len(full):],
                [f.unsqueeze(r) for f, r in zip(col_factors, row_axes, strict=True)])

        new_updates, new_v_row, new_v_col, new_v = list(grads), list(v_row), list(v_col), list(v)
        for i, update in zip(full + split, scaled, strict=True):
            new_updates[i] = update
        for i, moment in zip(full, moments, strict=True):
            new_v[i] = moment
        # On DTensor leaves the means over a sharded axis are partial sums until reduced.
        for i, row, col in zip(split, tm.reduced_for_storage(rows), tm.reduced_for_storage(cols),
                               strict=True):
            new_v_row[i], new_v_col[i] = row, col
        return new_updates, param_leaves, new_v_row, new_v_col, new_v

    @bb.supports_inplace
    @bb.per_leaf("factors each matrix by its shape")
    def update_fn(updates: base.Updates, state: FactoredState,
                  params: base.Params | None = None, *, inplace: bool = False,
                  **extra_args: Any):
        del extra_args
        grads, spec = tm.flatten(updates)
        param_leaves = bb.params_leaves(params, spec, updates, "scale_by_factored_rms")
        v_row = tm.leaves_like(state.v_row, spec, "state.v_row", reference=updates)
        v_col = tm.leaves_like(state.v_col, spec, "state.v_col", reference=updates)
        v = tm.leaves_like(state.v, spec, "state.v", reference=updates)
        decay = decay_rate_fn(state.count - step_offset, decay_rate)
        # In place the formula runs on groups of whole leaves (its reductions span a leaf), so
        # its temporaries (the squared gradient, the products) span the largest leaf or a
        # block, whichever is larger.
        new_updates, _, new_v_row, new_v_col, new_v = bb.in_blocks(
            functools.partial(formula, decay=decay), grads, param_leaves, v_row, v_col, v,
            inplace=inplace, split=False)
        return tm.unflatten(spec, new_updates), FactoredState(
            count=numerics.safe_increment(state.count), v_row=tm.unflatten(spec, new_v_row),
            v_col=tm.unflatten(spec, new_v_col), v=tm.unflatten(spec, new_v))

    return base.GradientTransformationExtraArgs(init_fn, update_fn)
