"""Sophia, a second-order clipped optimizer (mirrors ``optax/contrib/_sophia.py``).

Sophia divides the momentum by a moving average of an estimate of the Hessian diagonal and
clips the result elementwise. The default estimate is Hutchinson's: ``u * (H u)`` for a random
sign vector ``u``. Optax computes the Hessian-vector product forward over reverse (``jvp`` of
``grad``); here it is reverse over reverse (``torch.func.vjp`` of ``torch.func.grad``, equal
since the Hessian is symmetric), because PyTorch's forward-mode coverage is narrower: e.g. the
double derivative of ``torch._foreach_norm``, which ``optax_compat.tree_utils.tree_norm`` uses,
has no forward-mode formula.

References:
  Liu et al., `Sophia: A Scalable Stochastic Second-order Optimizer for Language Model
  Pre-training <https://arxiv.org/abs/2305.14342>`_, 2023.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any, NamedTuple, Optional, Union

import torch

from optax_compat import _runtime as bb
from optax_compat._runtime import control_flow
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base, numerics, transform, utils
from optax_compat.transforms import _adding, _combining
from optax_compat.tree_utils import _casting, _random, _tree_math

Scalar = transform.Scalar


class HutchinsonState(NamedTuple):
    """State of :func:`hutchinson_estimator_diag_hessian`: the seed of the next draw.

    Attributes:
      key: an ``int64`` 0-d seed tensor.
    """

    key: torch.Tensor


def _rademacher(generator: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype,
                device: torch.device) -> torch.Tensor:
    """Random signs: -1 or +1 with equal probability."""
    bits = torch.randint(0, 2, shape, generator=generator, device=device)
    return (2 * bits - 1).to(dtype)


def _hessian_vector_product(obj_fn: Callable[[base.Params], torch.Tensor], params: base.Params,
                            vectors: base.Params) -> base.Params:
    """``H v`` for the Hessian ``H`` of ``obj_fn`` at ``params``, as ``v^T H`` (reverse mode).

    The leaves are passed to ``torch.func`` as a flat tuple, so any optree structure works.
    """
    primals, spec = tm.flatten(params)
    tangents = tm.leaves_like(vectors, spec, "the random vectors", reference=params)
    if not primals:
        return params

    def objective(*leaves: torch.Tensor) -> torch.Tensor:
        return obj_fn(tm.unflatten(spec, list(leaves)))

    gradient = torch.func.grad(objective, argnums=tuple(range(len(primals))))
    _, vector_jacobian_product = torch.func.vjp(gradient, *primals)
    return tm.unflatten(spec, list(vector_jacobian_product(tuple(tangents))))


def hutchinson_estimator_diag_hessian(
    random_seed: Optional[utils.KeyLike] = None,
) -> base.GradientTransformationExtraArgs:
    """Estimates the diagonal of the Hessian with Hutchinson's estimator.

    ``update(updates, state, params, obj_fn)`` ignores ``updates`` and returns ``u * (H u)``
    for a random sign vector ``u``, where ``H`` is the Hessian of ``obj_fn`` (a function of
    the params returning a scalar loss) at ``params``: unbiased, but of high variance.

    Args:
      random_seed: an int seed or a ``torch.Generator`` (drawn from once, here); 0 when
        ``None``.

    Returns:
      A :class:`~optax_compat.GradientTransformationExtraArgs` with a
      :class:`HutchinsonState`.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> def loss(params):
      ...     return (params["w"] ** 2).sum()  # Hessian 2 * I
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> tx = optax.contrib.hutchinson_estimator_diag_hessian(random_seed=0)
      >>> state = tx.init(params)
      >>> updates, state = tx.update({"w": 2 * params["w"]}, state, params, obj_fn=loss)
      >>> updates["w"]  # the estimated diagonal of the Hessian
      tensor([2., 2.])
    """
    initial_key = utils.canonicalize_key(random_seed if random_seed is not None else 0)

    def init_fn(params: base.Params) -> HutchinsonState:
        device = bb.device_of(params)
        return HutchinsonState(key=initial_key.to(device, copy=True))

    def update_fn(updates: base.Updates, state: HutchinsonState,
                  params: Optional[base.Params] = None,
                  obj_fn: Optional[Callable[[base.Params], torch.Tensor]] = None,
                  **extra_args: Any) -> tuple[base.Updates, HutchinsonState]:
        del updates, extra_args
        if params is None:
            raise ValueError("params must be provided to hutchinson update function.")
        if obj_fn is None:
            raise ValueError("obj_fn must be provided to hutchinson update function.")
        key, sample_key = utils.split_key(state.key)
        signs = _random.tree_random_like(sample_key, params, _rademacher, dtype=torch.float32)
        signs = _casting.tree_cast(signs, _casting.tree_dtype(params, "lowest"))
        products = _hessian_vector_product(obj_fn, params, signs)
        return _tree_math.tree_mul(products, signs), HutchinsonState(
            key=key.to(state.key.device))

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


class SophiaState(NamedTuple):
    """State of :func:`sophia`.

    Attributes:
      count: the number of updates so far (0-d ``int32``).
      mu: the momentum.
      nu: the moving average of the Hessian diagonal estimates.
      hessian_fn_state: the state of the Hessian diagonal estimator.
    """

    count: torch.Tensor
    mu: base.Updates
    nu: base.Updates
    hessian_fn_state: Any


# One worker, so the reports print in step order.
_REPORTS = concurrent.futures.ThreadPoolExecutor(max_workers=1,
                                                 thread_name_prefix="sophia-win-rate")


def _report_win_rate(updates: tm.Leaves, clip_threshold: Scalar, count: torch.Tensor,
                     every_n_steps: int) -> None:
    """Prints the fraction of unclipped coordinates at the steps that are multiples of
    ``every_n_steps`` (every step for 0). Both are computed on the device and read on a worker
    thread, as ``jax.debug.print`` prints from a host callback: ``update`` never waits on them.
    """
    not_clipped = tm.sum_scalars([torch.sum(torch.abs(u) < clip_threshold) for u in updates])
    rate = not_clipped / sum(u.numel() for u in updates)
    due = count % every_n_steps == 0 if every_n_steps != 0 else None
    _REPORTS.submit(_print_win_rate, rate, due)


def _print_win_rate(rate: torch.Tensor, due: Optional[torch.Tensor]) -> None:
    if due is None or bool(due):
        print(f"Sophia optimizer win rate: {float(rate)}")


def scale_by_sophia(
    b1: Scalar = 0.965,
    b2: Scalar = 0.99,
    eps: Scalar = 1e-8,
    gamma: Scalar = 0.01,
    clip_threshold: Optional[Scalar] = 1.0,
    update_interval: Scalar = 10,
    hessian_diagonal_fn: Union[base.GradientTransformation,
                               base.GradientTransformationExtraArgs] = (
                                   hutchinson_estimator_diag_hessian()),
    mu_dtype: Optional[torch.dtype] = None,
    verbose: bool = False,
    print_win_rate_every_n_steps: Scalar = 0,
) -> base.GradientTransformationExtraArgs:
    """Sophia's scaling: clipped momentum divided by the Hessian diagonal (see :func:`sophia`).

    Args:
      b1: decay of the momentum.
      b2: decay of the moving average of the Hessian diagonal (updated every
        ``update_interval`` steps).
      eps: lower bound of the denominator.
      gamma: scales the Hessian diagonal.
      clip_threshold: bound of the elementwise clipping; none when ``None``.
      update_interval: steps between Hessian diagonal estimates.
      hessian_diagonal_fn: the estimator of the Hessian diagonal; extra arguments of
        ``update`` (``obj_fn``) are passed to it.
      mu_dtype: dtype of the momentum; that of the params when ``None``.
      verbose: print the fraction of unclipped coordinates (reads the device).
      print_win_rate_every_n_steps: print it every that many steps (every step for 0).

    Returns:
      A :class:`~optax_compat.GradientTransformationExtraArgs` with a :class:`SophiaState`.

    Note:
      Optax estimates the Hessian diagonal under ``lax.cond`` on the step count. Here the
      choice is made on the device, without reading the count on the host, so the estimator
      runs at every step and its result (and its state) is only kept every
      ``update_interval`` steps: the numbers are Optax's, the cost is one Hessian-vector
      product per step.
    """
    mu_dtype = bb.canonical_dtype(mu_dtype)
    hessian_diagonal_fn = base.with_extra_args_support(hessian_diagonal_fn)

    def init_fn(params: base.Params) -> SophiaState:
        return SophiaState(count=bb.zero_count(params),
                           mu=_tree_math.tree_zeros_like(params, dtype=mu_dtype),
                           nu=_tree_math.tree_zeros_like(params),
                           hessian_fn_state=hessian_diagonal_fn.init(params))

    def update_fn(updates: base.Updates, state: SophiaState,
                  params: Optional[base.Params] = None,
                  **hess_fn_kwargs: Any) -> tuple[base.Updates, SophiaState]:
        if params is None:
            raise ValueError("params must be provided to sophia's update function.")
        count_inc = numerics.safe_increment(state.count)
        gs, spec = tm.float_leaves(updates)
        mus = tm.leaves_like(state.mu, spec, "state.mu", reference=updates)
        nus = tm.leaves_like(state.nu, spec, "state.nu", reference=updates)

        mu = bb.moving_average(mus, gs, b1)
        mu_hat = bb.debias(mu, bb.bias_correction(b1, count_inc, mu))
        curvature = tm.maximum(tm.mul(nus, tm.scalar_like(gamma, nus)), tm.scalar_like(eps, nus))
        scaled = tm.div(mu_hat, curvature)
        if clip_threshold is not None:
            if verbose:
                _report_win_rate(scaled, clip_threshold, count_inc,
                                 print_win_rate_every_n_steps)
            bound = tm.scalar_like(clip_threshold, scaled)
            scaled = tm.minimum(tm.maximum(scaled, tm.neg(bound) if isinstance(bound, list)
                                           else -bound), bound)

        def estimate_hessian_diagonal() -> tuple[Any, tm.Leaves]:
            # Off the update interval the old estimator state is kept: it must stay intact.
            diagonal, hessian_fn_state = hessian_diagonal_fn.update(
                updates, state.hessian_fn_state, params=params,
                **hess_fn_kwargs)
            estimates = tm.leaves_like(diagonal, spec, "the Hessian diagonal",
                                       reference=updates)
            return hessian_fn_state, bb.moving_average(nus, estimates, b2)

        hessian_fn_state, nu = control_flow.cond(
            torch.remainder(state.count, update_interval) == 0, estimate_hessian_diagonal,
            lambda: (state.hessian_fn_state, nus))
        return tm.unflatten(spec, scaled), SophiaState(
            count=count_inc, mu=tm.unflatten(spec, tm.cast(mu, mu_dtype)),
            nu=tm.unflatten(spec, nu), hessian_fn_state=hessian_fn_state)

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


def sophia(
    learning_rate: base.ScalarOrSchedule,
    b1: Scalar = 0.965,
    b2: Scalar = 0.99,
    eps: Scalar = 1e-8,
    weight_decay: Scalar = 1e-4,
    weight_decay_mask: Optional[Union[Any, Callable[[base.Params], Any]]] = None,
    gamma: Scalar = 0.01,
    clip_threshold: Optional[Scalar] = 1.0,
    update_interval: Scalar = 10,
    hessian_diagonal_fn: Union[base.GradientTransformation,
                               base.GradientTransformationExtraArgs] = (
                                   hutchinson_estimator_diag_hessian()),
    mu_dtype: Optional[torch.dtype] = None,
    verbose: bool = False,
    print_win_rate_every_n_steps: Scalar = 0,
) -> base.GradientTransformationExtraArgs:
    """The Sophia optimizer.

    Extra keyword arguments of ``update`` go to ``hessian_diagonal_fn``. The default one,
    Hutchinson's estimator, needs ``obj_fn``: a function of the params alone returning the
    scalar loss of the current batch, e.g. ``obj_fn = lambda p: loss_fn(p, batch)``::

      updates, state = opt.update(grads, state, params, obj_fn=obj_fn)

    Args:
      learning_rate: the step size or its schedule.
      b1: decay of the momentum.
      b2: decay of the moving average of the Hessian diagonal; with the default
        ``update_interval`` of 10 the effective decay of 0.99 is 0.999.
      eps: lower bound of the denominator.
      weight_decay: decoupled weight decay.
      weight_decay_mask: a tree of booleans (or a function of the params returning one)
        selecting the leaves to decay.
      gamma: scales the Hessian diagonal.
      clip_threshold: bound of the elementwise clipping; none when ``None``.
      update_interval: steps between Hessian diagonal estimates.
      hessian_diagonal_fn: the estimator of the Hessian diagonal (Hutchinson's by default,
        with Rademacher vectors where the paper uses Gaussian ones).
      mu_dtype: dtype of the momentum.
      verbose: print the fraction of unclipped coordinates, which the authors advise to keep
        between 0.1 and 0.5 (increase ``gamma`` if it is too low).
      print_win_rate_every_n_steps: print it every that many steps (every step for 0).

    Returns:
      A :class:`~optax_compat.GradientTransformationExtraArgs`.

    References:
      Liu et al., `Sophia: A Scalable Stochastic Second-order Optimizer for Language Model
      Pre-training <https://arxiv.org/abs/2305.14342>`_, 2023.

      `Levanter <https://www.github.com/stanford-crfm/levanter>`_

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> def loss(params):
      ...     return (params["w"] ** 2).sum()
      >>> opt = optax.contrib.sophia(learning_rate=0.1)
      >>> state = opt.init(params)
      >>> grads = {"w": 2 * params["w"]}
      >>> updates, state = opt.update(grads, state, params, obj_fn=loss)
      >>> updates["w"]
      tensor([-0.1000,  0.1000])
    """
    return _combining.chain(
        scale_by_sophia(b1=b1, b2=b2, eps=eps, gamma=gamma, clip_threshold=clip_threshold,
                        update_interval=update_interval,
                        hessian_diagonal_fn=hessian_diagonal_fn, mu_dtype=mu_dtype,
                        verbose=verbose,
                        print_win_rate_every_n_steps=print_win_rate_every_n_steps),
        _adding.add_decayed_weights(weight_decay, mask=weight_decay_mask),
        transform.scale_by_learning_rate(learning_rate),
    )
