"""Muon: momentum orthogonalized by Newton-Schulz (mirrors ``optax/contrib/_muon.py``).

The momentum of every matrix-shaped parameter is replaced by an approximately orthogonal matrix
with the same singular vectors, computed by a few steps of a quintic Newton-Schulz iteration.
Optax runs the iteration leaf by leaf under ``jax.vmap``; here every matrix of the tree (the
batch slices of higher-rank parameters included) is brought to a ``(rows <= cols)`` layout and
matrices of equal shape, dtype and device are stacked, so each Newton-Schulz step is three
batched matrix products (``torch.bmm``) per group instead of per matrix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple, Optional, Union

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import tree_math as tm
from optax_compat._src import alias, base, numerics, transform
from optax_compat.transforms import _adding, _combining, _masking

Scalar = Union[float, torch.Tensor]
Preconditioning = Literal["frobenius", "spectral", "aol", "schatten"]
NsCoeffs = Union[tuple[Scalar, Scalar, Scalar], tuple[tuple[Scalar, Scalar, Scalar], ...]]

_PRECONDITIONINGS = ("frobenius", "spectral", "aol", "schatten")
_DEFAULT_NS_COEFFS = (3.4445, -4.7750, 2.0315)
_DION_NS_COEFFS = (
    (4.0848, -6.8946, 2.9270),
    (3.9505, -6.3029, 2.6377),
    (3.7418, -5.5913, 2.3037),
    (2.8769, -3.1427, 1.2046),
    (2.8366, -3.0525, 1.2012),
)
_NS_COEFFS_PRESET_DICT = {"standard": _DEFAULT_NS_COEFFS, "dion": _DION_NS_COEFFS}
# Optax's AOL and Schatten first steps clip with their own default eps, not the user's.
_FIRST_STEP_EPS = 1e-8


class MuonDimensionNumbers(NamedTuple):
    """Which axes of a weight form the matrix that Muon orthogonalizes.

    For ``x @ W = y`` the first matrix axis is the reduction (input) axis and the second the
    output axis, hence the defaults 0 and 1. Every axis named in neither field is a batch
    axis: each of its slices is orthogonalized on its own. Like Optax's, this is a pytree
    node (its fields are leaves); tree maps over dimension-number trees treat it as a leaf.
    """

    reduction_axis: Union[Sequence[int], int] = 0
    output_axis: Union[Sequence[int], int] = 1


WeightDimNumOrFn = Union[MuonDimensionNumbers, base.Params,
                         Callable[[base.Params], Optional[base.Params]]]


def _is_weight_dim_nums(x: Any) -> bool:
    return isinstance(x, MuonDimensionNumbers)


def normalize_axes(ndim: int, dim_nums: MuonDimensionNumbers
                    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The reduction and output axes as tuples of non-negative ints."""

    def as_axes(axes: Union[Sequence[int], int]) -> tuple[int, ...]:
        return tuple(ax % ndim for ax in ((axes,) if isinstance(axes, int) else axes))

    return as_axes(dim_nums.reduction_axis), as_axes(dim_nums.output_axis)


def _fan_in_and_out(x: torch.Tensor, dim_nums: MuonDimensionNumbers) -> tuple[int, int]:
    reduction_axes, output_axes = normalize_axes(x.ndim, dim_nums)
    return (math.prod([x.shape[ax] for ax in reduction_axes]),
            math.prod([x.shape[ax] for ax in output_axes]))


def _resolve_dim_nums(weight_dimension_numbers: Optional[WeightDimNumOrFn],
                      updates: base.Updates) -> list[Any]:
    """One dimension-number entry (a spec or ``None``) per leaf of ``updates``.

    A callable is called on the updates (only shapes matter). ``None`` gives ``None`` for every
    leaf: each must be a matrix (Optax 0.2.8 accepts ``None`` only when the params are a
    single array, with that meaning).
    """
    spec = tm.treespec(updates)
    if weight_dimension_numbers is None:
        return [None] * spec.num_leaves
    dim_nums = (weight_dimension_numbers(updates) if callable(weight_dimension_numbers)
                else weight_dimension_numbers)
    try:
        return spec.flatten_up_to(dim_nums)
    except ValueError as error:
        raise ValueError("The structure of weight_dimension_numbers does not match the "
                         f"updates: {error}") from None


class _MatrixLayout(NamedTuple):
    """How one leaf is viewed as a batch of matrices with no more rows than columns."""

    permutation: tuple[int, ...]  # batch axes, reduction axes, output axes
    permuted_shape: tuple[int, ...]
    batched_shape: tuple[int, int, int]  # (batch, reduction, output) sizes
    transposed: bool  # reduction > output: Newton-Schulz runs on the transpose

    def to_matrices(self, x: torch.Tensor) -> torch.Tensor:
        matrices = x.permute(self.permutation).reshape(self.batched_shape)
        return matrices.mT if self.transposed else matrices

    def from_matrices(self, matrices: torch.Tensor) -> torch.Tensor:
        if self.transposed:
            matrices = matrices.mT
        if self.permutation == tuple(range(len(self.permutation))):
            return matrices.reshape(self.permuted_shape)
        inverse = sorted(range(len(self.permutation)), key=self.permutation.__getitem__)
        return matrices.reshape(self.permuted_shape).permute(inverse)


def _matrix_layout(x: torch.Tensor, dim_nums: Any) -> _MatrixLayout:
    """The batch-of-matrices view of ``x`` given by ``dim_nums`` (ignored for a 2-D ``x``)."""
    if x.ndim != 2 and not _is_weight_dim_nums(dim_nums):
        raise ValueError("Input must have shape (m, n) or weight dimension numbers must be "
                         f"provided. Got shape={tuple(x.shape)} and {dim_nums=}.")
    if x.ndim == 2:
        dim_nums = MuonDimensionNumbers(reduction_axis=0, output_axis=1)
    if x.ndim < 2:
        raise ValueError(f"Muon optimized parameters must have rank >= 2, got {x.ndim=}")
    reduction_axes, output_axes = normalize_axes(x.ndim, dim_nums)
    if set(reduction_axes) & set(output_axes):
        raise ValueError("Normalized reduction axes and output axes must be disjoint, got "
                         f"{reduction_axes} and {output_axes}. Originally {dim_nums=} and "
                         f"{tuple(x.shape)=}")
    batch_axes = tuple(sorted(set(range(x.ndim)) - set(reduction_axes) - set(output_axes)))
    permutation = batch_axes + reduction_axes + output_axes
    sizes = [math.prod([x.shape[ax] for ax in axes])
             for axes in (batch_axes, reduction_axes, output_axes)]
    return _MatrixLayout(permutation=permutation,
                         permuted_shape=tuple(x.shape[ax] for ax in permutation),
                         batched_shape=(sizes[0], sizes[1], sizes[2]),
                         transposed=sizes[1] > sizes[2])


def _add_to_diagonals(matrices: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """``matrices + value I`` for a batch of square matrices, in place on plain tensors.

    A DTensor's diagonal view does not write through to its shards (an in-place add on it is
    silently lost, PyTorch 2.13), so DTensors take the out-of-place ``diagonal_scatter``.
    """
    if tm.is_distributed([matrices]):
        return torch.diagonal_scatter(matrices, matrices.diagonal(dim1=-2, dim2=-1) + value,
                                      dim1=-2, dim2=-1)
    matrices.diagonal(dim1=-2, dim2=-1).add_(value)
    return matrices


class _Products:
    """Where the Newton-Schulz products go: fresh tensors, or buffers made on first use and
    reused by the later steps of one orthogonalization.

    A fresh tensor as large as model (c)'s stack (128 MB) costs its page faults again each time
    glibc maps it, a fifth of a Muon step there; reused buffers pay them once per update. They
    are reused only when nothing is differentiated (a backward pass needs every step's values)
    and outside ``vmap`` and DTensors, which take no ``out=``. The stack being orthogonalized
    is then one of them: it is the orthogonalization's own copy, dead after the first step.
    """

    def __init__(self, x: torch.Tensor) -> None:
        self.reuse = not (tm.is_recording(x) or tm.is_batched([x]) or tm.is_distributed([x]))
        self.buffers: dict[str, torch.Tensor] = {"x1": x} if self.reuse else {}

    def divide(self, x: torch.Tensor, divisor: torch.Tensor) -> torch.Tensor:
        """``x / divisor``, in place if reused."""
        return x.div_(divisor) if self.reuse else x / divisor

    def bmm(self, a: torch.Tensor, b: torch.Tensor, role: str) -> torch.Tensor:
        """``a @ b`` for batches of matrices, into the buffer of ``role`` if reused."""
        if not self.reuse:
            return torch.bmm(a, b)
        return torch.bmm(a, b, out=self._buffer(role, (a.shape[0], a.shape[1], b.shape[2]), a))

    def scale(self, a: torch.Tensor, factor: torch.Tensor, role: str) -> torch.Tensor:
        """``factor * a``, into the buffer of ``role`` if reused."""
        if not self.reuse:
            return factor * a
        return torch.mul(a, factor, out=self._buffer(role, a.shape, a))

    def _buffer(self, role: str, shape: Sequence[int], like: torch.Tensor) -> torch.Tensor:
        if role not in self.buffers:
            self.buffers[role] = like.new_empty(shape)
        return self.buffers[role]


def _quintic_step(x: torch.Tensor, gram: torch.Tensor, coeffs: torch.Tensor,
                  products: _Products, role: str) -> torch.Tensor:
    """``c0 X + (c1 A + c2 A A) X`` for a batch of ``X`` with ``A = X X^H``, into ``role``.

    Computed as ``(c0 I + A (c1 I + c2 A)) X``: the three matrix products and one elementwise
    pass over the small ``A``; the shifts touch diagonals only, and nothing else reads ``X``.
    """
    c0, c1, c2 = coeffs.unbind()
    shifted = _add_to_diagonals(products.scale(gram, c2, "shifted"), c1)
    polynomial = _add_to_diagonals(products.bmm(gram, shifted, "polynomial"), c0)
    return products.bmm(polynomial, x, role)


def _aol_first_step(x: torch.Tensor, coeffs: torch.Tensor, products: _Products) -> torch.Tensor:
    """The first step with 'almost orthogonal layer' row rescaling (Boissin et al., 2025)."""
    gram = torch.bmm(x, x.mH)
    rescaling = torch.clamp(gram.abs().sum(dim=-1), min=_FIRST_STEP_EPS)
    s = torch.rsqrt(rescaling).unsqueeze(-1)
    return _quintic_step(x * s, gram * s * s.mT, coeffs, products, "x0")


def _schatten_first_step(x: torch.Tensor, coeffs: torch.Tensor,
                         products: _Products) -> torch.Tensor:
    """The first step with Schatten-4 norm rescaling (Grishina et al., 2025)."""
    gram = torch.bmm(x, x.mT)  # Optax uses the plain transpose here
    rescaling = torch.clamp(torch.linalg.matrix_norm(gram, keepdim=True), min=_FIRST_STEP_EPS)
    s = torch.rsqrt(rescaling)
    return _quintic_step(x * s, gram * s ** 2, coeffs, products, "x0")


def _newton_schulz(x: torch.Tensor, ns_coeffs: torch.Tensor, ns_steps: int,
                   preconditioning: str, eps: Scalar) -> torch.Tensor:
    """Orthogonalizes a ``(batch, rows, cols)`` stack of matrices with ``rows <= cols``; the
    stack is the caller's own copy, which this may overwrite."""
    products = _Products(x)
    if preconditioning == "frobenius":
        x = products.divide(x, torch.linalg.matrix_norm(x, keepdim=True) + eps)
    elif preconditioning == "spectral":
        x = products.divide(x, torch.linalg.matrix_norm(x, ord=2, keepdim=True) + eps)
    coeffs = ns_coeffs.to(dtype=x.dtype, device=x.device)
    steps = list(coeffs.unbind()) if coeffs.ndim == 2 else [coeffs] * ns_steps
    for index, step_coeffs in enumerate(steps):
        if index == 0 and preconditioning == "aol":
            x = _aol_first_step(x, step_coeffs, products)
        elif index == 0 and preconditioning == "schatten":
            x = _schatten_first_step(x, step_coeffs, products)
        else:  # each step reads the other buffer of the pair it writes
            x = _quintic_step(x, products.bmm(x, x.mH, "gram"), step_coeffs, products,
                              f"x{index % 2}")
    return x


def _check_preconditioning(preconditioning: str) -> None:
    if preconditioning not in _PRECONDITIONINGS:
        raise ValueError(f"Unknown preconditioning {preconditioning}")


def _check_ns_coeffs(ns_coeffs: torch.Tensor) -> None:
    if ns_coeffs.ndim > 2 or ns_coeffs.shape[-1] != 3:
        raise ValueError("Newton-Schulz coefficients must have shape (3,) or (n, 3), got "
                         f"{tuple(ns_coeffs.shape)}")


def _orthogonalize_leaves(xs: tm.Leaves, dim_nums: Sequence[Any], ns_coeffs: torch.Tensor,
                          ns_steps: int, preconditioning: str, eps: Scalar) -> tm.Leaves:
    """Orthogonalizes every leaf, batching the matrices of equal shape, dtype and device."""
    layouts = [_matrix_layout(x, d) for x, d in zip(xs, dim_nums, strict=True)]
    matrices = [layout.to_matrices(x) for layout, x in zip(layouts, xs)]
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, m in enumerate(matrices):
        groups.setdefault((tuple(m.shape[1:]), m.dtype, m.device), []).append(index)
    results: list[Any] = [None] * len(xs)
    for indices in groups.values():
        stacked = torch.cat([matrices[i] for i in indices])  # a copy, which _newton_schulz uses
        orthogonal = _newton_schulz(stacked, ns_coeffs, ns_steps, preconditioning, eps)
        parts = orthogonal.split([matrices[i].shape[0] for i in indices])
        for i, part in zip(indices, parts, strict=True):
            results[i] = layouts[i].from_matrices(part)
    return results


def orthogonalize_via_newton_schulz(
    x: torch.Tensor,
    ns_coeffs: torch.Tensor,
    ns_steps: int = 5,
    preconditioning: Preconditioning = "frobenius",
    eps: Scalar = 1e-8,
    dimension_numbers: Optional[MuonDimensionNumbers] = None,
) -> torch.Tensor:
    r"""Orthogonalizes a matrix (or a batch of them) with a quintic Newton-Schulz iteration.

    The coefficients maximise the slope at zero rather than converge exactly, so the result is
    close to ``U S' V^T`` with ``S'`` roughly uniform in ``[0.5, 1.5]`` (``U S V^T`` being the
    SVD of ``x``), which works as well as ``U V^T`` in practice.

    Args:
      x: a matrix, or a tensor of higher rank with ``dimension_numbers``.
      ns_coeffs: coefficients, shape ``(3,)`` or ``(n, 3)`` (one row per step).
      ns_steps: number of steps; ignored when ``ns_coeffs`` has one row per step.
      preconditioning: ``'frobenius'`` or ``'spectral'`` (normalise by that norm first), or
        ``'aol'``/``'schatten'`` (a rescaled first step).
      eps: added to the normalising norm.
      dimension_numbers: how a tensor that is not 2-D is viewed as a batch of matrices.

    Returns:
      The orthogonalized tensor, shaped like ``x``.
    """
    _check_ns_coeffs(ns_coeffs)
    _check_preconditioning(preconditioning)
    return _orthogonalize_leaves([x], [dimension_numbers], ns_coeffs, int(ns_steps),
                                 preconditioning, eps)[0]


def scale_by_shape(
    weight_dimension_numbers: Optional[WeightDimNumOrFn] = None,
    consistent_rms: Optional[Scalar] = None,
) -> base.GradientTransformationExtraArgs:
    """Scales each update by a factor of its matrix shape ``fan_in x fan_out``.

    Args:
      weight_dimension_numbers: a tree of :class:`MuonDimensionNumbers` with the structure of
        the params, or a callable returning one; ``None`` treats every leaf as a matrix.
      consistent_rms: if given, scale by ``sqrt(max(fan_in, fan_out)) * consistent_rms``
        (Liu et al., 2025); otherwise by ``sqrt(max(1, fan_out / fan_in))`` (width transfer).

    Returns:
      A stateless :class:`GradientTransformationExtraArgs`; its ``update`` accepts
      ``inplace=True`` (the updates scaled in their buffers).
    """

    def factor(x: torch.Tensor, dim_nums: Optional[MuonDimensionNumbers]) -> Any:
        fan_in, fan_out = _fan_in_and_out(x, MuonDimensionNumbers() if dim_nums is None
                                          else dim_nums)
        if consistent_rms is None:
            return math.sqrt(max(1, fan_out / fan_in))
        return math.sqrt(max(fan_in, fan_out)) * consistent_rms

    @bb.supports_inplace
    def update_fn(updates: base.Updates, state: base.EmptyState,
                  params: Optional[base.Params] = None, *, inplace: bool = False,
                  **extra_args: Any) -> tuple[base.Updates, base.EmptyState]:
        del params, extra_args
        xs, spec = tm.flatten(updates)
        dim_nums = _resolve_dim_nums(weight_dimension_numbers, updates)
        factors = [factor(x, d) for x, d in zip(xs, dim_nums)]
        inplace = inplace and not tm.is_recording(xs)
        if consistent_rms is None or isinstance(consistent_rms, (int, float)):
            # One foreach kernel.
            return tm.unflatten(spec, tm.mul_(xs, factors) if inplace else tm.mul(xs, factors)
                                ), state
        return tm.unflatten(spec, [x.mul_(f) if inplace else x * f
                                   for x, f in zip(xs, factors)]), state

    return base.GradientTransformationExtraArgs(base.init_empty_state, update_fn)


class MuonState(NamedTuple):
    """State for the Muon algorithm."""

    count: torch.Tensor  # 0-d int32
    mu: base.Updates
    ns_coeffs: torch.Tensor


def scale_by_muon(
    ns_coeffs: NsCoeffs = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    beta: Scalar = 0.95,
    eps: Scalar = 1e-8,
    mu_dtype: Optional[torch.dtype] = None,
    *,
    nesterov: bool = True,
    adaptive: bool = False,
    preconditioning: Preconditioning = "frobenius",
    weight_dimension_numbers: Optional[WeightDimNumOrFn] = None,
) -> base.GradientTransformationExtraArgs:
    r"""Rescales updates according to the Muon algorithm.

    The bias-corrected momentum (with Nesterov's look-ahead by default) of each matrix is
    orthogonalized by Newton-Schulz iterations: steepest descent under the spectral norm,
    i.e. Shampoo without accumulation.

    Args:
      ns_coeffs: Newton-Schulz coefficients ``(a, b, c)``, or one triple per step.
      ns_steps: number of Newton-Schulz steps (ignored for one triple per step).
      beta: decay of the momentum.
      eps: added to the normalising norm.
      mu_dtype: dtype of the momentum (``None``: that of the params).
      nesterov: use Nesterov momentum.
      adaptive: scale each orthogonalized update by its dual norm ``<mu_hat, update>``
        (Bernstein et al., 2024).
      preconditioning: ``'frobenius'`` (default), ``'spectral'``, ``'aol'`` or ``'schatten'``.
      weight_dimension_numbers: a tree of :class:`MuonDimensionNumbers` (structure of the
        params), or a callable returning one given the updates; ``None``: all leaves are
        matrices.

    Returns:
      A :class:`GradientTransformationExtraArgs` with a :class:`MuonState`. Its ``update``
      accepts ``inplace=True``: a run of leaves at a time (``tree_math.blocks``, whole
      leaves), the directions are written into the incoming updates and the moments into
      their buffers, so that the stacks and products span a run rather than the parameters.

    Raises:
      ValueError: at construction for an unknown ``preconditioning``; at ``init`` for
        coefficients of a wrong shape or fewer steps than coefficient rows.

    References:
      Jordan, `modded-nanogpt: Speedrunning the NanoGPT baseline
      <https://github.com/KellerJordan/modded-nanogpt>`_, 2024.

      Bernstein et al., `Old Optimizer, New Norm: An Anthology
      <https://arxiv.org/abs/2409.20325>`_, 2024.

      Liu et al., `Muon is Scalable for LLM Training <https://arxiv.org/abs/2502.16982>`_, 2025.

      Boissin et al., `Turbo-Muon <https://arxiv.org/abs/2512.04632>`_, 2025.

      Grishina et al., `Accelerating Newton-Schulz Iteration for Orthogonalization via
      Chebyshev-type Polynomials <https://arxiv.org/abs/2506.10935>`_, 2025.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> tx = optax.contrib.scale_by_muon()
      >>> params = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}
      >>> state = tx.init(params)
      >>> grads = {"w": torch.tensor([[0.5, -1.0], [2.0, 0.0]])}
      >>> updates, state = tx.update(grads, state, params)
      >>> torch.linalg.svdvals(updates["w"])  # those of the gradient: 2.08 and 0.96
      tensor([1.1257, 0.6870])
    """
    mu_dtype = bb.canonical_dtype(mu_dtype)
    _check_preconditioning(preconditioning)
    steps = int(ns_steps)

    def init_fn(params: base.Params) -> MuonState:
        xs = tm.leaves(params)
        # JAX builds the coefficients in its default float (float64 in 64-bit mode).
        coeffs = torch.as_tensor(ns_coeffs, dtype=bb.default_float(),
                                 device=xs[0].device if xs else None)
        _check_ns_coeffs(coeffs)
        if coeffs.ndim == 2:
            if not coeffs.shape[0] <= steps:
                raise ValueError(f"Not enough coeffs to perform {steps} steps")
            coeffs = coeffs[-steps:]
        return MuonState(count=bb.zero_count(params),
                         mu=bb.zeros(params, mu_dtype), ns_coeffs=coeffs)

    def directions(gs: tm.Leaves, mus: tm.Leaves, dim_nums: Sequence[Any],
                   count_inc: torch.Tensor, ns_coeffs: torch.Tensor,
                   ) -> tuple[tm.Leaves, tm.Leaves]:
        """The orthogonalized directions of the leaves ``gs`` and their new moments."""
        new_mus = bb.moving_average(mus, gs, beta)
        mu_hats = bb.first_moment(new_mus, gs, beta, count_inc, nesterov)
        orthogonal = _orthogonalize_leaves(mu_hats, dim_nums, ns_coeffs, steps,
                                           preconditioning, eps)
        if adaptive:
            dual_norms = [torch.sum(m.conj() * o) for m, o in zip(mu_hats, orthogonal)]
            orthogonal = [o * n for o, n in zip(orthogonal, dual_norms)]
        return orthogonal, tm.cast(new_mus, mu_dtype)

    @bb.supports_inplace
    def update_fn(updates: base.Updates, state: MuonState,
                  params: Optional[base.Params] = None, *, inplace: bool = False,
                  **extra_args: Any) -> tuple[base.Updates, MuonState]:
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        mus = tm.leaves_like(state.mu, spec, "state.mu", reference=updates)
        dim_nums = _resolve_dim_nums(weight_dimension_numbers, updates)
        count_inc = numerics.safe_increment(state.count)
        new_state = state._replace(count=count_inc)
        if inplace and not tm.is_recording(gs, mus) and not tm.is_distributed(gs):
            # A run of leaves at a time (whole leaves: a matrix is orthogonalized whole), its
            # directions written into its gradients and its moments into their buffers: the
            # stacks and products span a run, not the parameters.
            start = 0
            for (run,) in tm.blocks(gs, split=False):
                stop = start + len(run)
                orthogonal, new_mus = directions(gs[start:stop], mus[start:stop],
                                                 dim_nums[start:stop], count_inc,
                                                 state.ns_coeffs)
                tm.copy_(mus[start:stop], new_mus)
                tm.copy_(gs[start:stop], orthogonal)
                start = stop
            return tm.unflatten(spec, gs), new_state
        orthogonal, new_mus = directions(gs, mus, dim_nums, count_inc, state.ns_coeffs)
        return tm.unflatten(spec, orthogonal), new_state._replace(mu=tm.unflatten(spec, new_mus))

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


def _is_dim_nums_entry(x: Any) -> bool:
    return x is None or _is_weight_dim_nums(x) or isinstance(x, _masking.MaskedNode)


def muon(
    learning_rate: base.ScalarOrSchedule,
    ns_coeffs: Union[NsCoeffs, str] = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    beta: Scalar = 0.95,
    eps: Scalar = 1e-8,
    weight_decay: Scalar = 0.0,
    weight_decay_mask: Optional[Union[Any, Callable[[base.Params], Any]]] = None,
    mu_dtype: Optional[torch.dtype] = None,
    *,
    nesterov: bool = True,
    adaptive: bool = False,
    preconditioning: Preconditioning = "frobenius",
    adam_b1: Scalar = 0.9,
    adam_b2: Scalar = 0.999,
    adam_eps_root: Scalar = 0.0,
    adam_weight_decay: Scalar = 0.0,
    adam_learning_rate: Optional[base.ScalarOrSchedule] = None,
    muon_weight_dimension_numbers: Optional[WeightDimNumOrFn] = None,
    consistent_rms: Optional[Scalar] = None,
) -> base.GradientTransformation:
    r"""Muon: momentum orthogonalized by Newton-Schulz, with AdamW for the other parameters.

    Matrices (or the tensors given :class:`MuonDimensionNumbers`) follow
    :func:`scale_by_muon`, then a shape-dependent scaling, decoupled weight decay and the
    learning rate. The other parameters (vectors, scalars, leaves whose dimension numbers are
    ``None``) are optimized by :func:`optax_compat.adamw`.

    Args:
      learning_rate: a fixed step size or a schedule.
      ns_coeffs: Newton-Schulz coefficients, one triple per step, or a preset name
        (``'standard'`` or ``'dion'``).
      ns_steps: number of Newton-Schulz steps (ignored for one triple per step).
      beta: decay of the momentum.
      eps: added to the normalising norm (and Adam's ``eps``).
      weight_decay: decoupled weight decay of the Muon parameters, times the learning rate.
      weight_decay_mask: a tree of booleans (or a callable returning one) selecting the
        decayed Muon parameters.
      mu_dtype: dtype of the momenta.
      nesterov: use Nesterov momentum (in Muon and in Adam).
      adaptive: scale the orthogonalized updates by their dual norm.
      preconditioning: ``'frobenius'``, ``'spectral'``, ``'aol'`` or ``'schatten'``.
      adam_b1: Adam's first-moment decay.
      adam_b2: Adam's second-moment decay.
      adam_eps_root: Adam's ``eps_root``.
      adam_weight_decay: AdamW's weight decay.
      adam_learning_rate: Adam's learning rate (``None``: ``learning_rate``).
      muon_weight_dimension_numbers: a tree of :class:`MuonDimensionNumbers` (``None`` leaves
        go to Adam; a leaf may cover a subtree), or a callable returning one given the
        params; ``None``: Muon for exactly the 2-D parameters.
      consistent_rms: scale updates by ``sqrt(max(fan_in, fan_out)) * consistent_rms``
        (``0.2`` matches AdamW's RMS); ``None``: ``sqrt(max(1, fan_out / fan_in))``.

    Returns:
      The optimizer as a gradient transformation (a :func:`~optax_compat.partition` into
      ``'muon'`` and ``'adam'``).

    References:
      Jordan, `modded-nanogpt: Speedrunning the NanoGPT baseline
      <https://github.com/KellerJordan/modded-nanogpt>`_, 2024.

      Liu et al., `Muon is Scalable for LLM Training <https://arxiv.org/abs/2502.16982>`_, 2025.

      Ahn et al., `Dion: Distributed Orthonormalized Updates
      <https://arxiv.org/abs/2504.05295>`_, 2025.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]])}
      >>> opt = optax.contrib.muon(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> updates, state = opt.update({"w": params["w"]}, state, params)
      >>> torch.linalg.svdvals(updates["w"])  # those of the gradient: 5.46 and 0.37
      tensor([0.1128, 0.0699])
    """
    if adam_learning_rate is None:
        adam_learning_rate = learning_rate
    if isinstance(ns_coeffs, str):
        if ns_coeffs not in _NS_COEFFS_PRESET_DICT:
            raise ValueError(f"Unknown ns_coeff preset string: {ns_coeffs}")
        ns_coeffs = _NS_COEFFS_PRESET_DICT[ns_coeffs]

    def dim_nums_tree(params: base.Params) -> Any:
        # None at the root means: the default spec, for exactly the 2-D leaves.
        if muon_weight_dimension_numbers is None:
            return MuonDimensionNumbers()
        if callable(muon_weight_dimension_numbers):
            return muon_weight_dimension_numbers(params)
        return muon_weight_dimension_numbers

    def param_labels(params: base.Params) -> Any:
        if muon_weight_dimension_numbers is None:
            return tm.tree_map(lambda x: "muon" if x.ndim == 2 else "adam", params)
        # The dimension numbers come first: they may be a prefix of the params.
        return tm.tree_map(
            lambda dim_num, subtree: tm.tree_map(
                lambda _: "muon" if dim_num is not None else "adam", subtree),
            dim_nums_tree(params), params, is_leaf=_is_dim_nums_entry)

    def muon_dim_nums(params: base.Params) -> Any:
        # The Muon branch sees the params with the Adam leaves masked out; its dimension
        # numbers must have that structure (MaskedNode where Adam's leaves were).
        is_muon = tm.tree_map(lambda label: label == "muon", param_labels(params))
        return tm.tree_map(
            lambda dim_num, submask: tm.tree_map(
                lambda keep: dim_num if keep else _masking.MaskedNode(), submask),
            dim_nums_tree(params), is_muon, is_leaf=_is_dim_nums_entry)

    return _combining.partition(
        transforms={
            "muon": _combining.chain(
                scale_by_muon(ns_coeffs=ns_coeffs, ns_steps=ns_steps, beta=beta, eps=eps,
                              mu_dtype=mu_dtype, nesterov=nesterov, adaptive=adaptive,
                              preconditioning=preconditioning,
                              weight_dimension_numbers=muon_dim_nums),
                scale_by_shape(weight_dimension_numbers=muon_dim_nums,
                               consistent_rms=consistent_rms),
                _adding.add_decayed_weights(weight_decay, weight_decay_mask),
                transform.scale_by_learning_rate(learning_rate),
            ),
            "adam": alias.adamw(learning_rate=adam_learning_rate, b1=adam_b1, b2=adam_b2,
                                eps=eps, eps_root=adam_eps_root, weight_decay=adam_weight_decay,
                                mu_dtype=mu_dtype, nesterov=nesterov),
        },
        param_labels=param_labels,
    )
