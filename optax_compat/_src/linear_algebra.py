"""Linear algebra helpers (mirrors ``optax/_src/linear_algebra.py``)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import torch

from optax_compat import _runtime as bb
from optax_compat._src import base, utils
from optax_compat.tree_utils import _tree_math


def global_norm(updates: base.PyTree) -> torch.Tensor:
    """The L2 norm of all leaves of ``updates`` taken together (deprecated in Optax too).

    Prefer :func:`optax_compat.tree.norm`.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> optax.global_norm({"a": torch.tensor([3.0]), "b": torch.tensor([4.0])})
      tensor(5.)
    """
    warnings.warn("optax_compat.global_norm is deprecated in favor of optax_compat.tree.norm",
                  DeprecationWarning, stacklevel=2)
    return _tree_math.tree_norm(updates)


def _normalize_tree(tree: base.PyTree) -> base.PyTree:
    """``tree`` divided by its global L2 norm."""
    return _tree_math.tree_scale(1.0 / _tree_math.tree_norm(tree), tree)


def power_iteration(
    matrix: torch.Tensor | Callable[[base.ArrayTree], base.ArrayTree],
    *,
    v0: base.ArrayTree | None = None,
    num_iters: int = 100,
    error_tolerance: float = 1e-6,
    precision: str = "highest",
    key: utils.KeyLike | None = None,
) -> tuple[torch.Tensor, base.ArrayTree]:
    """The dominant eigenvalue and eigenvector of a diagonalizable matrix, by power iteration.

    The loop stops early once the relative residual ``|A v - lambda v| / |lambda|`` is below
    ``error_tolerance``; checking it reads one number from the device per iteration, as
    Optax's ``while_loop`` does on its side.

    Args:
      matrix: a square matrix, or a function computing the matrix-vector product on a tree
        (matrix-free; then ``v0`` is required and fixes the tree structure).
      v0: initial guess of the eigenvector; for a matrix, uniform in ``[-1, 1]`` by default.
      num_iters: largest number of iterations.
      error_tolerance: relative residual at which to stop.
      precision: accepted for Optax compatibility; PyTorch matrix products on CPU always run
        in full precision.
      key: int seed or ``torch.Generator`` for the default ``v0`` (seed 0 when ``None``).

    Returns:
      ``(eigenvalue, eigenvector)``, the eigenvector normalised to unit norm.

    Raises:
      ValueError: if ``matrix`` is a function and ``v0`` is not given.

    References:
      Wikipedia contributors, `Power iteration
      <https://en.wikipedia.org/wiki/Power_iteration>`_.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> matrix = torch.tensor([[3.0, 0.0], [0.0, 1.0]])
      >>> eigenvalue, eigenvector = optax.power_iteration(matrix, v0=torch.tensor([1.0, 1.0]))
      >>> eigenvalue
      tensor(3.)
      >>> eigenvector.round(decimals=4)
      tensor([1., 0.])
    """
    del precision
    if callable(matrix):
        matvec = matrix
        if v0 is None:
            raise ValueError("v0 must be provided when `matrix` is a callable: it gives the "
                             "structure of the vectors.")
    else:
        matvec = lambda vector: matrix @ vector
        if v0 is None:
            generator = utils.generator_from_key(0 if key is None else key)
            v0 = (2 * torch.rand(matrix.shape[-1:], generator=generator, dtype=matrix.dtype,
                                 device=generator.device) - 1).to(matrix.device)
    eigenvector = _normalize_tree(v0)
    product = matvec(eigenvector)
    eigenvalue = torch.zeros((), device=bb.device_of(eigenvector))
    for _ in range(int(num_iters)):
        residual = _tree_math.tree_sub(product,
                                       _tree_math.tree_scale(eigenvalue, eigenvector))
        if bool(torch.abs(_tree_math.tree_norm(residual) / eigenvalue) < error_tolerance):
            break
        eigenvector = _normalize_tree(product)
        product = matvec(eigenvector)
        eigenvalue = _tree_math.tree_vdot(eigenvector, product)
    return eigenvalue, _normalize_tree(product)


def _matrix_power(matrix: torch.Tensor, p: float) -> torch.Tensor:
    """``matrix ** 2 ** k`` for ``k = round(log2(p))`` clipped to ``0..3``, by squaring.

    This is Optax's unrolled power: exact for ``p`` in 1, 2, 4, 8.
    """
    squarings = min(max(round(math.log2(p)), 0), 3)
    for _ in range(squarings):
        matrix = matrix @ matrix
    return matrix


def matrix_inverse_pth_root(
    matrix: torch.Tensor,
    p: int,
    num_iters: int = 100,
    ridge_epsilon: float = 1e-6,
    error_tolerance: float = 1e-6,
    precision: str = "highest",
) -> tuple[torch.Tensor, torch.Tensor | int]:
    """``matrix ** (-1 / p)`` of a symmetric positive semi-definite matrix, by coupled Newton
    iterations (Shampoo's preconditioner).

    As in Optax, ``-1 / p`` is rounded to float32 and the iteration stops when the error
    ``max |M_k - I|`` is below ``error_tolerance`` or grows by more than 20% in a step (the
    previous iterate is then returned). The loop reads the error from the device each step.

    Args:
      matrix: the symmetric PSD matrix, of shape ``(n, n)``.
      p: the root, a positive integer (1, 2, 4 or 8 give exact powers in the iteration).
      num_iters: largest number of iterations.
      ridge_epsilon: relative ridge ``epsilon * max eigenvalue`` added to the diagonal.
      error_tolerance: error at which to stop.
      precision: accepted for Optax compatibility; unused by PyTorch on CPU.

    Returns:
      ``(matrix ** (-1 / p), error)``.

    References:
      Higham, `Functions of Matrices: Theory and Computation
      <https://epubs.siam.org/doi/book/10.1137/1.9780898717778>`_, p. 184, eq. 7.18, 2008.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> matrix = torch.tensor([[4.0, 0.0], [0.0, 1.0]])
      >>> root, error = optax.matrix_inverse_pth_root(matrix, p=2)
      >>> root
      tensor([[0.5000, 0.0000],
              [0.0000, 1.0000]])
    """
    del precision
    p = float(p)
    size = matrix.shape[0]
    alpha = torch.tensor(-1.0 / p, dtype=torch.float32, device=matrix.device)
    work_dtype = torch.promote_types(torch.float32, matrix.dtype)
    identity = torch.eye(size, dtype=work_dtype, device=matrix.device)
    max_eigenvalue, _ = power_iteration(matrix, num_iters=100, error_tolerance=1e-6)
    ridge = ridge_epsilon * torch.clamp_min(max_eigenvalue, 1e-16)
    if size == 1:
        return (matrix + ridge) ** alpha.to(work_dtype), 0

    alpha = alpha.to(work_dtype)
    one_minus_alpha = (1 - alpha.to(torch.float32)).to(work_dtype)
    damped = matrix + ridge * identity
    z = (1 + p) / (2 * torch.linalg.matrix_norm(damped))
    mat_m = damped * z
    mat_h = old_mat_h = identity * z ** (1.0 / p)
    error = torch.max(torch.abs(mat_m - identity))
    improving = True
    iteration = 0
    while iteration < num_iters and improving and bool(error > error_tolerance):
        mat_m_i = one_minus_alpha * identity + alpha * mat_m
        mat_m = _matrix_power(mat_m_i, p) @ mat_m
        mat_h, old_mat_h = mat_h @ mat_m_i, mat_h
        new_error = torch.max(torch.abs(mat_m - identity))
        # The error may rise briefly before converging; 20% is the allowed rise.
        improving = bool(new_error < error * 1.2)
        error = new_error
        iteration += 1
    result = mat_h if improving else old_mat_h
    return result.to(matrix.dtype), torch.max(torch.abs(mat_m - identity))


def _spectral_radius_upper_bound(matrix: torch.Tensor) -> torch.Tensor:
    """``min(|A|_F, |A|_1)``, an upper bound of the spectral radius of ``matrix``."""
    frobenius = torch.linalg.matrix_norm(matrix, ord="fro")
    if matrix.numel() == 0:
        return torch.zeros_like(frobenius)
    return torch.minimum(frobenius, torch.linalg.matrix_norm(matrix, ord=1))


def nnls(
    A: torch.Tensor,
    b: torch.Tensor,
    iters: int,
    unroll: int | bool = 1,
    L: torch.Tensor | float | None = None,
) -> torch.Tensor:
    r"""Solves the non-negative least squares problem ``min |A x - b|_2`` s.t. ``x >= 0``.

    Runs ``iters`` steps of Polyak's fast projected gradient method.

    Args:
      A: matrix of shape ``(M, N)``.
      b: vector of shape ``(M,)`` or matrix of shape ``(M, K)``.
      iters: number of iterations.
      unroll: accepted for Optax compatibility (a ``lax.scan`` option); unused.
      L: an upper bound of the spectral radius of ``A.mT @ A``; estimated when ``None``.

    Returns:
      The solution, of shape ``(N,)`` or ``(N, K)``.

    Raises:
      ValueError: if the shapes of ``A`` and ``b`` do not fit.

    References:
      Polyak, `Projected gradient method for non-negative least square
      <http://www.ams.org/books/conm/636/>`_, 2015

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> A = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
      >>> b = torch.tensor([1.0, -1.0, 0.0])
      >>> optax.nnls(A, b, iters=100)
      tensor([0.5000, 0.0000])
    """
    del unroll
    if A.ndim != 2 or b.ndim not in (1, 2) or b.shape[0] != A.shape[0]:
        raise ValueError(f"nnls expects A of shape (M, N) and b of shape (M,) or (M, K); got "
                         f"{tuple(A.shape)} and {tuple(b.shape)}.")
    gram = A.mT @ A
    target = A.mT @ b
    if L is None:
        L = _spectral_radius_upper_bound(gram)
    L = torch.as_tensor(L, dtype=gram.dtype, device=gram.device)
    L = torch.where(L == 0, torch.ones_like(L), L)
    x = torch.zeros(A.shape[-1:] + b.shape[1:], dtype=b.dtype, device=b.device)
    momentum_point = x
    c = torch.zeros((), dtype=b.dtype, device=b.device)
    for _ in range(iters):
        next_c = (1 + torch.sqrt(1 + 4 * c ** 2)) / 2
        step = (c - 1) / next_c
        next_x = torch.clamp_min(momentum_point - (gram @ momentum_point - target) / L, 0)
        momentum_point = next_x + step * (next_x - x)
        x, c = next_x, next_c
    return x
