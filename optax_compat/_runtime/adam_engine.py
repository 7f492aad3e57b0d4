"""The Adam engine: one place that plans how an Adam step runs, and one step function.

Every Adam in the project runs here: :func:`optax_compat.scale_by_adam`, the
:func:`optax_compat.adam`/:func:`optax_compat.adamw` aliases (pure, ``inplace=True`` and the
whole in-place step returned by :func:`inplace_step`), and ``torchopt_fn``'s ``adam``/``adamw``
aliases, ``Adam``/``AdamW``/``MetaAdam`` and accelerated op. :func:`plan` picks one of three
paths from the hyper-parameters, the leaves and the mode; :func:`step` runs it.

``"formula"``
  Optax's expression operation by operation (building blocks only): every dtype, complex
  leaves, ``mu_dtype``, Nesterov, tensor hyper-parameters, grads shaped unlike the moments
  (broadcast as in Optax), anything autograd records, and leaves under ``torch.func.vmap``.
``"foreach"``
  The same numbers with the fewest passes and allocations, when nothing is recorded:
  ``(m / c1) / (sqrt(v / c2 + eps_root) + eps)`` is evaluated as
  ``(k * m) / (sqrt(v + eps_root * c2) + eps * sqrt(c2))`` with ``k = sqrt(c2) / c1``. With
  ``inplace`` nothing is allocated (the moments advance in their buffers, the direction is
  built in the incoming updates'). This is the path ``torch.compile`` traces and the one for
  ``meta`` tensors.
``"kernel"``
  PyTorch's fused kernel (``torch._fused_adam_``/``_fused_adamw_``): one pass per tensor for a
  whole ``adam``/``adamw`` step, either pure (the kernel writes into fresh copies of the
  moments and into a zeroed buffer that becomes the updates) or the whole step in place
  (params and moments written). It reads its inputs as packed memory, so grads are made
  contiguous (a copy only when they are not), buffers it writes in place must be contiguous,
  and each grad must have its moments' shape (it checks sizes, not shapes; other shapes take
  the formula path, which broadcasts as Optax does or raises); all on the CPU or all on CUDA,
  float32 or float64, one dtype, eager mode, ``eps_root == 0``.

A whole step (``"apply"`` mode: an alias's update added to the params) runs here on the
``"kernel"`` path or, where the kernel does not fit, on the ``"foreach"`` path, which then adds
``m / (d / s)`` to the params in one pass (``d`` the denominator above, ``s = -lr * k``; AdamW
first scales the params by ``1 - lr * wd``, as the kernel does). ``"formula"`` leaves such a
step to the alias's transformations, one after another.

Moments follow Optax's update ``(1 - b) * g + b * m`` on every path (not ``lerp``, which turns
an infinite moment into NaN at the next finite gradient). The fused kernel's first moment is a
``lerp``: for ``b1 <= 0.5`` it gives NaN at an infinite gradient, so such steps never take
the kernel; for larger ``b1`` it keeps an infinite gradient's moment infinite but turns an
infinite moment into NaN at the next finite gradient, so on the CPU a step whose moments
hold a non-finite value (read off ``nu``'s
maximum: one pass over ``nu``) takes the ``"foreach"`` path instead, and the state stays
Optax's. On CUDA, where that read would stall the stream, the kernel runs on such moments as
torch.optim's fused Adam does: from the first finite gradient after an infinite one its ``mu``
holds NaN where Optax's holds inf, and only the state differs (the infinite gradient also made
``nu`` infinite, so Optax's updates are ``inf / inf``, NaN, from that step on, as the kernel's).

Nothing reads a tensor on the host except that CPU check (where a host read waits on nothing):
the step count stays a tensor. The kernel forms its bias corrections ``c = 1 - b ** t`` in
float64 where Optax uses the leaves' dtype (``1 - 0.999 ** t`` in float32 is ~1e-5 off for
small ``t``), so the learning rate handed to it (a tensor computed
on the device) is ``lr * c1_kernel * sqrt(c2_optax) / (c1_optax * sqrt(c2_kernel))``: the
kernel then evaluates Optax's ``m / c1 / (sqrt(v / c2) + eps')`` with
``eps' = eps * sqrt(c2_kernel / c2_optax)``, a relative difference of at most
``|1 - sqrt(c2_kernel / c2_optax)|`` (~7e-6 at step 1 in float32) in the ``eps`` term alone,
visible only where ``|g| ~ eps``. AdamW's decoupled decay is scaled by that same learning rate,
off from Optax's by the same ratio (``wd * |p|`` times ~7e-6 at step 1, 0 in float64).

References:
  Kingma et al, `Adam: A Method for Stochastic Optimization
  <https://arxiv.org/abs/1412.6980>`_, 2014.

  Loshchilov et al, `Decoupled Weight Decay Regularization
  <https://arxiv.org/abs/1711.05101>`_, 2019.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Literal, NamedTuple, Optional

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import torch_kernels
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics

Path = Literal["formula", "foreach", "kernel"]
Mode = Literal["pure", "inplace", "apply"]
StepFn = Callable[[base.Params, base.Updates, base.OptState], base.OptState]



class AdamHyperParams(NamedTuple):
    """What defines one Adam step.

    Attributes:
      b1: decay of the first moment.
      b2: decay of the second moment.
      eps: added to the denominator outside the square root.
      eps_root: added to the second moment inside the square root.
      nesterov: Nesterov's look-ahead first moment (NAdam).
      mu_dtype: dtype of the first moment (``None``: that of the params).
      zero_where_mu_zero: TorchOpt's accelerated op: the direction (and its gradient) is 0
        where the new first moment is 0, which keeps meta-gradients finite at ``eps_root=0``.
    """

    b1: Any = 0.9
    b2: Any = 0.999
    eps: Any = 1e-8
    eps_root: Any = 0.0
    nesterov: bool = False
    mu_dtype: Optional[torch.dtype] = None
    zero_where_mu_zero: bool = False


class AliasTerms(NamedTuple):
    """The terms a whole ``adam``/``adamw`` alias adds around Adam's direction.

    The update is ``-lr * (direction + weight_decay * params)``; ``l2`` is TorchOpt's coupled
    decay (``g + l2 * params`` before the moments) and ``maximize`` its sign flip of ``g``.
    A ``weight_decay`` the kernel cannot express (a masked one, a schedule) is given as is or
    as ``None``: such steps run through the chain. ``fused_kernel=False`` keeps the step off
    PyTorch's fused kernel (whose first moment is a ``lerp``): TorchOpt's ``adam`` without
    ``use_accelerated_op`` runs on the multi-tensor paths only.
    """

    learning_rate: base.ScalarOrSchedule
    weight_decay: Any = 0.0
    l2: Any = 0.0
    maximize: bool = False
    fused_kernel: bool = True


def plan(hp: AdamHyperParams, gs: tm.Leaves, mus: tm.Leaves, nus: tm.Leaves, mode: Mode,
         terms: Optional[AliasTerms] = None, params: Optional[tm.Leaves] = None) -> Path:
    """The path of one step.

    Args:
      hp: the hyper-parameters.
      gs: the incoming updates' leaves.
      mus: the first-moment buffers.
      nus: the second-moment buffers.
      mode: ``"pure"`` (new tensors), ``"inplace"`` (``update(..., inplace=True)``: state
        buffers and incoming updates reused) or ``"apply"`` (the whole step written into the
        params and the state).
      terms: the alias's learning rate and decay, when the step is a whole alias's; the
        kernel runs only for those.
      params: the params' leaves (read for a decay, written in ``"apply"`` mode).

    Returns:
      ``"formula"``, ``"foreach"`` or ``"kernel"`` (see the module's docstring).
    """
    hypers = (hp.b1, hp.b2, hp.eps, hp.eps_root)
    lr = None if terms is None else terms.learning_rate
    if (hp.nesterov or not all(map(bb.is_number, hypers)) or tm.is_batched(gs)
            or tm.is_recording(gs, mus, nus, lr if isinstance(lr, torch.Tensor) else [])):
        return "formula"
    dtypes = set(tm.attributes("dtype", gs))
    if any(dtype.is_complex for dtype in dtypes) or not all(
            _same_dtypes(gs, dtypes, buffers) for buffers in (mus, nus)):
        return "formula"
    if not tm.same_shapes(gs, mus):
        return "formula"  # grads that broadcast against the moments, as Optax's do
    if (terms is not None and mode != "inplace" and len(dtypes) == 1
            and _kernel_fits(hp, gs, mus, nus, mode, terms, params)):
        return "kernel"
    if mode == "apply" and terms is not None and not _foreach_applies(gs, dtypes, terms, params):
        return "formula"
    return "foreach"


# The checks below run on every step of every leaf: C-level passes (``tm.attributes``, ``map``
# over method descriptors) keep them to one Python call per check rather than one per leaf.


def _same_dtypes(gs: tm.Leaves, dtypes: set[torch.dtype], others: tm.Leaves) -> bool:
    """Whether ``others`` have the dtypes of ``gs`` (whose set of dtypes is ``dtypes``),
    leaf by leaf (one set comparison when the leaves have one dtype)."""
    if len(dtypes) == 1:
        return set(tm.attributes("dtype", others)) == dtypes
    return tm.same_dtypes(gs, others)


def _foreach_applies(gs: tm.Leaves, dtypes: set[torch.dtype], terms: AliasTerms,
                     params: Optional[tm.Leaves]) -> bool:
    """Whether the ``"foreach"`` path applies this alias's whole step: decay terms that are
    numbers, and params shaped and typed as the grads."""
    return (bb.is_number(terms.weight_decay) and bb.is_number(terms.l2) and params is not None
            and _same_dtypes(gs, dtypes, params) and tm.same_shapes(gs, params)
            and not tm.is_recording(params))


def _kernel_fits(hp: AdamHyperParams, gs: tm.Leaves, mus: tm.Leaves, nus: tm.Leaves,
                 mode: Mode, terms: AliasTerms, params: Optional[tm.Leaves]) -> bool:
    """Whether the fused kernel computes this step, whose leaves have one dtype (see the
    module's docstring)."""
    if (not terms.fused_kernel
            # On CUDA the kernel reads a tensor learning rate as float32: float64 leaves
            # would lose their precision in it (on the CPU it reads a float64 one).
            or (gs[0].is_cuda and gs[0].dtype == torch.float64)
            or not bb.is_zero(hp.eps_root)
            # The kernel's ``lerp(m, g, 1 - b1)`` computes ``g - (g - m) * b1`` for weights of
            # at least 0.5: NaN at an infinite gradient, where Optax's moment is infinite.
            or not hp.b1 > 0.5
            or not all(map(bb.is_number, (terms.weight_decay, terms.l2)))
            or (mode == "pure" and not bb.is_zero(terms.l2))):
        return False
    reads_params = mode == "apply" or not bb.is_zero(terms.weight_decay)
    if reads_params and (params is None or not _same_dtypes(gs, {gs[0].dtype}, params)
                         or tm.is_recording(params)):
        return False
    # Buffers written in place are read by the kernel as packed memory.
    written = (mus, nus, params) if mode == "apply" and params is not None else ()
    return torch_kernels.takes(gs, written) and not (
        gs[0].is_cpu and _may_hold_infinite_moments(nus))


def _may_hold_infinite_moments(nus: tm.Leaves) -> bool:
    """Whether a first moment may be infinite or NaN, read off the second moments (CPU).

    The kernel's first moment is a ``lerp``, which turns an infinite moment into NaN at the
    next finite gradient where Optax's stays infinite, so such a step takes the multi-tensor
    path. Where a first moment is infinite or NaN, so is the second (the same gradient,
    squared), and a second moment is never negative: one ``max`` per tensor finds them. A
    squared gradient that overflows also answers yes, and merely costs that step the kernel.
    On the CPU the host read is free; on CUDA it would stall the stream, so there the kernel
    runs on such moments as torch.optim's fused Adam does.
    """
    filled = list(filter(torch.Tensor.numel, nus))  # the max of no elements is undefined
    return bool(filled) and not bool(torch.stack(torch._foreach_max(filled)).isfinite().all())


def step(path: Path, hp: AdamHyperParams, count_inc: torch.Tensor, gs: tm.Leaves, mus: tm.Leaves,
         nus: tm.Leaves, mode: Mode, terms: Optional[AliasTerms] = None,
         params: Optional[tm.Leaves] = None,
         lr: Optional[Any] = None) -> tuple[Optional[tm.Leaves], tm.Leaves, tm.Leaves]:
    """Runs one Adam step on the path :func:`plan` chose.

    Args:
      path: from :func:`plan`.
      hp: the hyper-parameters.
      count_inc: the step count of this step, from 1 (a 0-d int32 tensor; never read on the
        host).
      gs: the incoming updates' leaves.
      mus: the first-moment buffers.
      nus: the second-moment buffers.
      mode: as for :func:`plan`.
      terms: the alias's terms, on the ``"kernel"`` path and in ``"apply"`` mode.
      params: the params' leaves, on the ``"kernel"`` path when it decays, in ``"apply"`` mode.
      lr: the learning rate's value at this step, on the ``"kernel"`` path and in ``"apply"``
        mode.

    Returns:
      ``(out, new_mus, new_nus)``: ``out`` is Adam's direction on the ``"formula"`` and
      ``"foreach"`` paths, the alias's updates on the pure ``"kernel"`` path, ``None`` when
      the step was applied to ``params``.
    """
    inplace = mode != "pure"
    if path == "kernel":
        assert terms is not None
        return _kernel(hp, count_inc, gs, mus, nus, mode == "apply", terms, params, lr)
    if path == "foreach" and mode == "apply":
        assert terms is not None and params is not None
        return _foreach_apply(hp, count_inc, gs, mus, nus, terms, params, lr)
    if path == "foreach":
        return _foreach(hp, count_inc, gs, mus, nus, inplace)
    if not inplace:
        return _formula(hp, count_inc, gs, mus, nus, inplace)
    # In place, block by block: the formula's temporaries span one block, not the params.
    return tuple(bb.in_blocks(functools.partial(_formula, hp, count_inc), gs, mus, nus,
                              inplace=True))


def _formula(hp: AdamHyperParams, count_inc: torch.Tensor, gs: tm.Leaves, mus: tm.Leaves,
             nus: tm.Leaves, inplace: bool) -> tuple[tm.Leaves, tm.Leaves, tm.Leaves]:
    """Optax's expression, operation by operation (differentiable).

    Its bias corrections depend on the leaves' dtypes only, so blocks of leaves of one dtype
    (:func:`bb.in_blocks`) give the numbers of the whole lists.
    """
    moments = bb.moving_average(mus, gs, hp.b1)
    seconds = bb.moving_average(nus, tm.abs_sq(gs), hp.b2)
    mu_hats = bb.first_moment(moments, gs, hp.b1, count_inc, hp.nesterov)
    nu_hats = bb.debias(seconds, bb.bias_correction(hp.b2, count_inc, seconds))
    if hp.zero_where_mu_zero:
        dead = [m == 0 for m in moments]
        nu_hats = [torch.where(d, torch.ones_like(n), n) for d, n in zip(dead, nu_hats)]
        scaled = bb.adam_ratio(mu_hats, nu_hats, hp.eps, hp.eps_root)
        scaled = [torch.where(d, torch.zeros_like(s), s) for d, s in zip(dead, scaled)]
    else:
        _watch_meta_gradients(nu_hats)
        scaled = bb.adam_ratio(mu_hats, nu_hats, hp.eps, hp.eps_root)
    new_mus = bb.store(mus, tm.cast(moments, hp.mu_dtype), inplace)
    new_nus = bb.store(nus, [v.to(n.dtype) for v, n in zip(seconds, nus)], inplace)
    return bb.emit(gs, scaled, inplace), new_mus, new_nus


def _foreach(hp: AdamHyperParams, count_inc: torch.Tensor, gs: tm.Leaves, mus: tm.Leaves,
             nus: tm.Leaves, inplace: bool) -> tuple[tm.Leaves, tm.Leaves, tm.Leaves]:
    """The same numbers with the fewest passes and allocations (nothing is recorded)."""
    denominators, new_mus, new_nus, first, root_second = _moments_and_denominators(
        hp, count_inc, gs, mus, nus, inplace)
    # The direction is built in the denominator's buffer: 1 / d, then * m, then * k.
    directions = tm.mul_(tm.reciprocal_(denominators), new_mus)
    return tm.mul_(directions, tm.scalar_like(root_second / first, gs)), new_mus, new_nus


def _foreach_apply(hp: AdamHyperParams, count_inc: torch.Tensor, gs: tm.Leaves,
                   mus: tm.Leaves, nus: tm.Leaves, terms: AliasTerms, params: tm.Leaves,
                   lr: Any) -> tuple[None, tm.Leaves, tm.Leaves]:
    """A whole ``adam``/``adamw`` step on the ``"foreach"`` path, written into ``params`` and
    the moments' buffers; the grads' buffers hold the denominators."""
    if terms.maximize:
        tm.neg_(gs)
    if not bb.is_zero(terms.l2):
        tm.add_scaled_(gs, terms.l2, params)
    denominators, new_mus, new_nus, first, root_second = _moments_and_denominators(
        hp, count_inc, gs, mus, nus, inplace=True)
    if not bb.is_zero(terms.weight_decay):
        # The learning rate in each param's dtype first, as the chain multiplies by it.
        lrs = tm.scalar_like(lr, params)
        tm.mul_(params, [1 - x * terms.weight_decay for x in lrs] if isinstance(lrs, list)
                else 1 - lrs * terms.weight_decay)
    tm.div_(denominators, tm.scalar_like(-lr * root_second / first, gs))
    tm.addcdiv_(params, new_mus, denominators)
    return None, new_mus, new_nus


def _moments_and_denominators(
        hp: AdamHyperParams, count_inc: torch.Tensor, gs: tm.Leaves, mus: tm.Leaves,
        nus: tm.Leaves, inplace: bool,
) -> tuple[tm.Leaves, tm.Leaves, tm.Leaves, torch.Tensor, torch.Tensor]:
    """Advances the moments and forms ``d = sqrt(v + eps_root * c2) + eps * sqrt(c2)`` (in the
    updates' buffers when ``inplace``).

    Returns:
      ``(d, new_mus, new_nus, c1, sqrt(c2))``; Adam's direction is ``k * m / d`` with
      ``k = sqrt(c2) / c1``.
    """
    b1, b2, eps, eps_root = hp.b1, hp.b2, hp.eps, hp.eps_root
    new_mus = bb.moving_average(mus, gs, b1, inplace=inplace, convention="torch")
    new_nus = bb.moving_average(nus, gs, b2, order=2, inplace=inplace, convention="torch")
    first = bb.bias_correction(b1, count_inc, gs)
    second = bb.bias_correction(b2, count_inc, gs)
    root_second = torch.sqrt(second)
    # In place, the updates' own buffers (no longer needed) receive the result; compiled,
    # Inductor keeps it in registers, and writing it to the updates would cost a pass.
    in_updates = inplace and not torch.compiler.is_compiling()
    denominators = tm.copy_(gs, new_nus) if in_updates else None
    if bb.is_zero(eps_root):
        denominators = tm.sqrt_(denominators) if in_updates else tm.sqrt(new_nus)
    else:
        shift = tm.scalar_like(eps_root * second, gs)
        denominators = tm.sqrt_(tm.add_(denominators, shift) if in_updates
                                else tm.add(new_nus, shift))
    tm.add_(denominators, tm.scalar_like(eps * root_second, gs))
    return denominators, new_mus, new_nus, first, root_second


def _kernel(hp: AdamHyperParams, count_inc: torch.Tensor, gs: tm.Leaves, mus: tm.Leaves,
            nus: tm.Leaves, apply: bool, terms: AliasTerms, params: Optional[tm.Leaves],
            lr: Any) -> tuple[Optional[tm.Leaves], tm.Leaves, tm.Leaves]:
    """A whole ``adam``/``adamw`` step on the fused kernel (see the module's docstring)."""
    b1, b2 = hp.b1, hp.b2
    dtype = gs[0].dtype
    grads = (gs if all(map(torch.Tensor.is_contiguous, gs))
             and not any(map(torch.Tensor.is_neg, gs))
             else [g.resolve_neg().contiguous() for g in gs])
    if apply:
        assert params is not None
        targets, new_mus, new_nus = params, mus, nus
    else:
        targets = list(map(torch.zeros_like, grads))  # packed, as the grads now are
        new_mus, new_nus = _packed_copies(mus), _packed_copies(nus)
    # Optax's corrections (both at once), in the leaves' (one) dtype, against the kernel's
    # float64 ones: ratios = [c1_kernel / c1_optax, c2_kernel / c2_optax].
    betas = torch.tensor((b1, b2), dtype=torch.float64, device=count_inc.device)
    c_optax = bb.bias_correction(betas.to(dtype), count_inc, gs[:1])
    ratios = (1 - betas ** count_inc.double()) / c_optax.double()
    lr_leaves = torch.as_tensor(lr, dtype=dtype, device=count_inc.device).double()
    kernel_lr = lr_leaves * ratios[0] / torch.sqrt(ratios[1])
    decays = not bb.is_zero(terms.weight_decay) and apply
    kernel = torch._fused_adamw_ if decays else torch._fused_adam_
    steps = count_inc.float()  # the kernels' (and torch.optim's) type for step counts
    for device, group in _by_device(targets, grads, new_mus, new_nus):
        kernel(*group, [], [steps.to(device)] * len(group[0]),
               lr=kernel_lr.to(device, torch.float32 if device.type == "cuda" else None),
               beta1=b1, beta2=b2, weight_decay=float(terms.weight_decay if decays else terms.l2),
               eps=hp.eps, amsgrad=False, maximize=terms.maximize)
    if not apply and not bb.is_zero(terms.weight_decay):
        assert params is not None
        tm.add_scaled_(targets, tm.scalar_like(-lr_leaves * terms.weight_decay, targets)
                       if isinstance(lr, torch.Tensor) else -lr * terms.weight_decay, params)
    return (None if apply else targets), new_mus, new_nus


def _packed_copies(xs: tm.Leaves) -> tm.Leaves:
    """Copies of ``xs`` in packed (contiguous) memory."""
    if all(map(torch.Tensor.is_contiguous, xs)):
        return list(map(torch.clone, xs))
    return [x.clone(memory_format=torch.contiguous_format) for x in xs]


def _by_device(*lists: tm.Leaves) -> Iterator[tuple[torch.device, tuple[tm.Leaves, ...]]]:
    """``lists`` (aligned lists of leaves, all on the CPU or all on CUDA devices, as
    :func:`plan` requires for the kernel) split by the device of their first list's leaves:
    one kernel launch per device, the lists as they are on the CPU."""
    first = lists[0]
    if first[0].is_cpu:
        yield first[0].device, lists
        return
    groups: dict[torch.device, list[int]] = {}
    for i, x in enumerate(first):
        groups.setdefault(x.device, []).append(i)
    for device, members in groups.items():
        yield device, tuple([xs[i] for i in members] for xs in lists)


_warned_non_finite = False


def _watch_meta_gradients(nu_hats: tm.Leaves) -> None:
    """Warns once when a gradient flowing back into ``sqrt(nu_hat)`` is not finite.

    At ``eps_root=0`` a zero second moment (a unit whose gradient is always 0) has an infinite
    ``d sqrt(v) / dv``, and the meta-gradient through it becomes NaN, as in Optax. The check is
    a tensor hook, so it runs (and reads a value on the host) only during a backward pass
    through this step; the forward path never synchronises.
    """
    if _warned_non_finite:
        return
    for nu_hat in nu_hats:
        if nu_hat.requires_grad:
            nu_hat.register_hook(_check_finite)


def _check_finite(grad: Optional[torch.Tensor]) -> None:
    global _warned_non_finite
    if grad is not None and not _warned_non_finite and not bool(torch.isfinite(grad).all()):
        _warned_non_finite = True
        warnings.warn(
            "A gradient through Adam's second moment is not finite: at eps_root=0, "
            "sqrt(nu) has an infinite derivative where nu is 0 (e.g. a dead unit). Pass "
            "eps_root > 0 (e.g. 1e-8) to keep meta-gradients finite.", RuntimeWarning,
            stacklevel=2)


def scale_by_adam(hp: AdamHyperParams,
                  state_type: Callable[..., Any]) -> base.GradientTransformationExtraArgs:
    """Adam's rescaling ``m_hat / (sqrt(v_hat + eps_root) + eps)`` with hyper-parameters ``hp``.

    See :func:`optax_compat.scale_by_adam`; ``update`` accepts ``inplace``. ``state_type``
    builds the state from ``count``, ``mu`` and ``nu``
    (:class:`optax_compat.ScaleByAdamState`, defined where Optax defines it).
    """

    def init_fn(params: base.Params) -> Any:
        return state_type(count=bb.zero_count(params), mu=bb.zeros(params, hp.mu_dtype),
                          nu=bb.zeros(params))

    @bb.elementwise
    @bb.supports_inplace
    def update_fn(updates: base.Updates, state: Any, params: Optional[base.Params] = None, *,
                  inplace: bool = False, **extra_args: Any) -> tuple[base.Updates, Any]:
        del params, extra_args
        gs, spec = tm.float_leaves(updates)
        mus = bb.state_leaves(state.mu, spec, updates, "state.mu")
        nus = bb.state_leaves(state.nu, spec, updates, "state.nu")
        mode: Mode = "inplace" if inplace else "pure"
        count_inc = numerics.safe_increment(state.count)
        scaled, new_mus, new_nus = step(plan(hp, gs, mus, nus, mode), hp, count_inc, gs, mus,
                                        nus, mode)
        return tm.unflatten(spec, scaled), type(state)(
            count=count_inc, mu=tm.unflatten(spec, new_mus), nu=tm.unflatten(spec, new_nus))

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


def inplace_step(tx: Any) -> Optional[StepFn]:
    """The whole in-place step of a transformation, if it has one.

    ``step(params, grads, state) -> state`` applies one step by writing into ``params`` and
    the buffers of ``state`` (same state as ``tx.init``, same numbers as ``update`` then
    ``apply_updates``); ``grads`` are read and may be overwritten, unless the step is called
    with ``keep_grads=True`` (then the paths that would write them get copies: the fused
    kernel only reads them, and copies nothing). The ``adam``/``adamw``
    aliases (of ``optax_compat`` and ``torchopt_fn``) have one; wrapping a transformation
    (``chain``, ``inject_hyperparams``, ...) gives one without.

    Args:
      tx: a gradient transformation.

    Returns:
      The step function, or ``None``.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> tx = optax.adam(learning_rate=0.1)
      >>> state, step = tx.init(params), optax.inplace_step(tx)
      >>> for _ in range(3):
      ...     state = step(params, {"w": 2 * params["w"]}, state)  # writes into params
      >>> params["w"]
      tensor([ 0.7016, -1.7006])
      >>> optax.inplace_step(optax.chain(optax.adam(0.1))) is None
      True
    """
    return bb.capabilities_of(tx).whole_step


def adam_alias(hp: AdamHyperParams, terms: AliasTerms,
               chain: base.GradientTransformationExtraArgs,
               adam_index: int) -> base.GradientTransformationExtraArgs:
    """An ``adam``/``adamw`` alias: ``chain``, with the engine running whole steps when it can.

    ``optax_compat``'s and ``torchopt_fn``'s aliases both end here, each with the chain it
    builds: Adam's direction, the decay terms around it, and last the learning rate.

    Args:
      hp: the hyper-parameters of the chain's ``scale_by_adam``.
      terms: the alias's learning rate and decay.
      chain: the alias as a chain (``optax_compat``'s ``update`` convention, accepting
        ``inplace``), run on every step the engine does not run whole (see :func:`plan`). Its
        state is a tuple: the ``ScaleByAdamState`` at ``adam_index``, the learning rate's
        state last.
      adam_index: the position of the ``ScaleByAdamState`` in the chain's state.

    Returns:
      The alias, with ``chain``'s ``init`` and state; its ``update`` is declared in-place
      capable, in the layouts ``chain`` allows, and with the whole in-place step. Without a
      learning rate (``None``: Optax's aliases then stop at the direction) it is ``chain``.
    """
    if terms.learning_rate is None:
        return chain

    def chain_update(updates: Any, state: Any, params: Any, inplace: bool) -> Any:
        return chain.update(updates, state, params, inplace=inplace)

    def run(updates: Any, state: Any, params: Any, mode: Mode,
            fallback: Callable[[Any], Any], keep_updates: bool = False) -> Any:
        adam_state, lr_state = state[adam_index], state[-1]
        gs, spec = tm.flatten(updates)
        mus = bb.state_leaves(adam_state.mu, spec, updates, "state.mu")
        nus = bb.state_leaves(adam_state.nu, spec, updates, "state.nu")
        param_leaves = (None if params is None
                        else bb.params_leaves(params, spec, updates, "adam"))
        path = plan(hp, gs, mus, nus, mode, terms, param_leaves)
        if keep_updates and path != "kernel":  # every other in-place path writes into them
            gs = tm.clone(gs)
            updates = tm.unflatten(spec, gs)
        if path == "formula" or (path == "foreach" and mode != "apply"):
            return fallback(updates)
        lr = terms.learning_rate
        if callable(lr):
            lr = lr(lr_state.count)
            new_lr_state = type(lr_state)(count=numerics.safe_increment(lr_state.count))
            if mode == "apply":
                lr_state.count.copy_(new_lr_state.count)
                new_lr_state = lr_state
        else:
            new_lr_state = lr_state
        new_count = numerics.safe_increment(adam_state.count)
        out, new_mus, new_nus = step(path, hp, new_count, gs, mus, nus, mode, terms,
                                     param_leaves, lr)
        if mode == "apply":
            adam_state.count.copy_(new_count)
            new_adam_state = adam_state
        else:
            new_adam_state = type(adam_state)(count=new_count, mu=tm.unflatten(spec, new_mus),
                                              nu=tm.unflatten(spec, new_nus))
        new_state = (*state[:adam_index], new_adam_state, *state[adam_index + 1:-1],
                     new_lr_state)
        return new_state if out is None else (tm.unflatten(spec, out), new_state)

    @bb.elementwise_if(chain)
    @bb.supports_inplace
    def update(updates: base.Updates, state: base.OptState,
               params: Optional[base.Params] = None, *, inplace: bool = False,
               **extra_args: Any) -> tuple[base.Updates, base.OptState]:
        del extra_args
        if inplace or not terms.fused_kernel:  # the engine runs these as whole steps only
            return chain_update(updates, state, params, inplace)
        return run(updates, state, params, "pure",
                   lambda incoming: chain_update(incoming, state, params, False))

    def apply_step(params: base.Params, grads: base.Updates, state: base.OptState, *,
                   keep_grads: bool = False) -> base.OptState:
        def fallback(incoming: Any) -> Any:
            updates, new_state = chain_update(incoming, state, params, True)
            tm.add_(tm.leaves(params), tm.leaves_like(updates, tm.treespec(params), "updates",
                                                      params))
            return new_state

        with torch.no_grad():
            return run(grads, state, params, "apply", fallback, keep_grads)

    bb.declare(update, whole_step=bb.tolerates_none_step(apply_step))
    return base.GradientTransformationExtraArgs(chain.init, update)
