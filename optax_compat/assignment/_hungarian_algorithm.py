"""The Hungarian algorithm for the linear assignment problem.

Mirrors ``optax/assignment/_hungarian_algorithm.py``. The problem is combinatorial and its
loops are data-dependent, so both solvers run on the host with NumPy, step for step as Optax's
``lax`` loops do: the same arithmetic in the same floating-point precision and the same
tie-breaking, hence the same assignment. Indices come back as int64 tensors on the device of
the cost matrix.

Given an :math:`n \\times m` cost matrix :math:`C`, an assignment is a set of
:math:`\\min(n, m)` (row, column) pairs using each row and each column at most once; the
solvers return one of minimum total cost :math:`\\sum C_{ij}`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def _host_costs(cost_matrix: Any) -> tuple[np.ndarray, torch.device]:
    """The cost matrix as a NumPy array in the precision the solvers compute in.

    Optax computes in JAX's default float (potentials are ``jnp.zeros``), promoted with the
    cost dtype; here the default float is ``torch.get_default_dtype()``.

    Raises:
      ValueError: for a matrix that is not 2-D or that contains NaN.
    """
    costs = torch.as_tensor(cost_matrix)
    if costs.ndim != 2:
        raise ValueError("The cost matrix must be 2-D, got a tensor of shape "
                         f"{tuple(costs.shape)}; solve batches one matrix at a time.")
    if costs.is_complex():
        raise ValueError("The cost matrix must be real.")
    dtype = torch.promote_types(costs.dtype, torch.get_default_dtype())
    host = costs.detach().to("cpu", dtype).numpy()
    if np.isnan(host).any():
        raise ValueError("The cost matrix contains NaN.")
    return host, costs.device


def _indices(values: np.ndarray, device: torch.device) -> torch.Tensor:
    return torch.as_tensor(np.asarray(values, dtype=np.int64), device=device)


def _empty(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    empty = torch.zeros(0, dtype=torch.int64, device=device)
    return empty, empty.clone()


# With only finite costs each search step reaches a new column. Infinite costs can make a step
# revisit one (its update then turns the infinities into NaN and the search moves on, as in
# Optax); a search that has not ended after this many steps per column never will.
_MAX_SEARCH_STEPS_PER_COLUMN = 4


def _infeasible() -> ValueError:
    return ValueError("The cost matrix admits no assignment of finite cost.")


def base_hungarian_algorithm(cost_matrix: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The Hungarian algorithm for the linear assignment problem (shortest augmenting paths).

    Follows the pseudocode of Crouse (pages 1685-1686), as Optax's implementation does.

    Args:
      cost_matrix: a 2-D tensor (or array-like) of costs; ``inf`` marks forbidden pairs.

    Returns:
      A pair ``(i, j)`` of int64 index tensors of length ``min(n, m)``: row ``i[k]`` is assigned
      to column ``j[k]``, and the cost of the assignment is ``cost_matrix[i, j].sum()``.

    Raises:
      ValueError: for a matrix that is not 2-D, contains NaN or has no finite assignment.

    References:
      David F. Crouse, `On implementing 2D rectangular assignment algorithms
      <https://ieeexplore.ieee.org/document/7738348>`_, 2016
    """
    costs, device = _host_costs(cost_matrix)
    if 0 in costs.shape:
        return _empty(device)
    transpose = costs.shape[1] < costs.shape[0]
    if transpose:
        costs = costs.T
    rows, cols = costs.shape
    dtype = costs.dtype.type
    u = np.zeros(rows, costs.dtype)
    v = np.zeros(cols, costs.dtype)
    path = np.full(cols, -1)
    col4row = np.full(rows, -1)
    row4col = np.full(cols, -1)
    with np.errstate(invalid="ignore"):
        for current_row in range(rows):
            sink, min_value, rows_seen, cols_seen, path_costs = _shortest_augmenting_path(
                costs, u, v, path, row4col, current_row, dtype)
            u[current_row] += min_value
            others_seen = rows_seen & (np.arange(rows) != current_row)
            u = np.where(others_seen, u + min_value - path_costs[col4row], u)
            v = np.where(cols_seen, v + path_costs - min_value, v)
            while True:  # augment along the path back to the current row
                row = path[sink]
                row4col[sink] = row
                col4row[row], sink = sink, col4row[row]
                if row == current_row:
                    break
    if transpose:
        order = np.argsort(col4row, kind="stable")
        return _indices(col4row[order], device), _indices(order, device)
    return _indices(np.arange(rows), device), _indices(col4row, device)


def _shortest_augmenting_path(costs: np.ndarray, u: np.ndarray, v: np.ndarray,
                              path: np.ndarray, row4col: np.ndarray, current_row: int,
                              dtype: type) -> tuple[int, Any, np.ndarray, np.ndarray, np.ndarray]:
    """Dijkstra-like search from ``current_row`` to a free column; updates ``path`` in place.

    Optax scans the remaining columns one by one; the scan is vectorised here with the same
    outcome, including which column wins a tie (the last one that ties with the running
    minimum and is free, else the first minimum).
    """
    rows, cols = costs.shape
    min_value = dtype(0)
    remaining = np.arange(cols)[::-1].copy()
    num_remaining = cols
    rows_seen = np.zeros(rows, bool)
    cols_seen = np.zeros(cols, bool)
    path_costs = np.full(cols, np.inf, costs.dtype)
    row = current_row
    sink = -1
    while sink == -1:
        if num_remaining == 0:
            raise _infeasible()
        rows_seen[row] = True
        scanned = remaining[:num_remaining]
        reduced = min_value + costs[row, scanned] - u[row] - v[scanned]
        shorter = reduced < path_costs[scanned]
        path[scanned[shorter]] = row
        candidate = np.minimum(path_costs[scanned], reduced)
        path_costs[scanned] = candidate
        running_min = np.concatenate([[np.inf], np.minimum.accumulate(candidate)[:-1]])
        wins = (candidate < running_min) | ((candidate == running_min)
                                            & (row4col[scanned] == -1))
        index = int(np.flatnonzero(wins)[-1]) if wins.any() else -1
        min_value = candidate.min()
        if min_value == np.inf:
            raise _infeasible()
        column = remaining[index]
        if row4col[column] == -1:
            sink = column
        else:
            row = row4col[column]
        cols_seen[column] = True
        num_remaining -= 1
        remaining[index] = remaining[num_remaining]
    return sink, min_value, rows_seen, cols_seen, path_costs


def hungarian_algorithm(cost_matrix: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The Hungarian algorithm for the linear assignment problem (Scenic's variant).

    Same problem and result as :func:`base_hungarian_algorithm`, computed with the
    row-by-row potential updates of Scenic's implementation, as Optax does.

    Args:
      cost_matrix: a 2-D tensor (or array-like) of costs; ``inf`` marks forbidden pairs.

    Returns:
      A pair ``(i, j)`` of int64 index tensors of length ``min(n, m)``: row ``i[k]`` is assigned
      to column ``j[k]``, and the cost of the assignment is ``cost_matrix[i, j].sum()``.

    Raises:
      ValueError: for a matrix that is not 2-D, contains NaN or has no finite assignment.

    References:
      Dehghani et al., `Scenic: A JAX Library for Computer Vision Research and Beyond
      <https://arxiv.org/abs/2110.11403>`_, 2022
    """
    costs, device = _host_costs(cost_matrix)
    if 0 in costs.shape:
        return _empty(device)
    transpose = costs.shape[0] > costs.shape[1]
    if transpose:
        costs = costs.T
    rows, cols = costs.shape
    u = np.zeros(rows + 2, costs.dtype)  # row potentials, 1-based; the last slot absorbs no-ops
    v = np.zeros(cols + 1, costs.dtype)  # column potentials, 1-based
    parent = np.zeros(cols + 1, np.int64)  # the 1-based row matched to each column, 0 if none
    with np.errstate(invalid="ignore"):
        for row in range(rows):
            parent[0] = row + 1
            path = np.zeros(cols, np.int64)
            used = np.zeros(cols + 1, bool)
            min_reduced = np.full(cols, np.inf, costs.dtype)
            col = 0
            for _ in range(_MAX_SEARCH_STEPS_PER_COLUMN * (cols + 1)):
                if parent[col] == 0:
                    break
                used[col] = True
                unused = ~used[1:]
                matched_row = parent[col]
                reduced = costs[matched_row - 1, :] - u[matched_row] - v[1:]
                reduced = np.where(unused, reduced, np.inf)
                shorter = reduced < min_reduced
                path = np.where(shorter, col, path)
                min_reduced = np.where(shorter, reduced, min_reduced)
                masked = np.where(unused, min_reduced, np.inf)
                col = int(np.argmin(masked)) + 1
                delta = masked.min()
                np.add.at(u, np.where(used, parent, rows + 1), delta)
                v = np.where(used, v - delta, v)
                min_reduced = np.where(unused, min_reduced - delta, min_reduced)
            else:
                raise _infeasible()
            while col != 0:  # backtrack along the path
                previous = path[col - 1]
                parent[col] = parent[previous]
                col = previous
    columns = parent[1:]
    if rows == cols:
        matched_rows, matched_cols = columns, np.arange(rows)
    else:  # the matched columns, by decreasing row (``lax.top_k``'s order)
        matched_cols = np.argsort(-columns, kind="stable")[:rows]
        matched_rows = columns[matched_cols]
    matched_rows = matched_rows - 1
    if transpose:
        return _indices(matched_cols, device), _indices(matched_rows, device)
    return _indices(matched_rows, device), _indices(matched_cols, device)
