"""Backtracking (Armijo) and zoom (strong Wolfe) line searches (``optax/_src/linesearch.py``).

A line search is a data-dependent loop: it evaluates the objective at candidate step sizes
until a criterion holds. Optax runs it in a ``lax.while_loop``; here the loop is a Python
``while`` that reads the criteria on the host, which is the one place where the project allows
a host synchronisation in ``update`` (see the design notes). The candidate step sizes, the
number of objective evaluations and the accepted step are those of Optax.

The objective ``value_fn(params, **extra_args)`` is an ordinary PyTorch function returning a
scalar tensor. Its gradient at a candidate point is computed with ``torch.autograd`` on detached
copies of the parameters, so the line search never builds a graph through the caller's tensors;
the returned updates are ``step_size * updates`` with a detached ``step_size``.
"""

from __future__ import annotations

import functools
import inspect
import math
import operator
from collections.abc import Callable
from typing import Any, NamedTuple, Optional, Union

import torch

from optax_compat import _runtime as bb
from optax_compat import tree_utils
from optax_compat._runtime import tree_math as tm
from optax_compat._src import base

Scalar = Union[float, torch.Tensor]


# ----------------------------------------------------------------------------------------------
# Evaluating the objective.


def _as_scalar(value: Any, what: str = "value_fn") -> torch.Tensor:
    """``value`` as a 0-d tensor, or a clear error if it holds more than one number."""
    value = bb.as_tensor(value)
    if value.numel() != 1:
        raise ValueError(f"{what} must return a scalar, got a tensor of shape "
                         f"{tuple(value.shape)}.")
    return value.reshape(())


def _value_with_graph(value_fn: Callable[..., Any], params: base.Params, *fn_args: Any,
                      **fn_kwargs: Any) -> tuple[torch.Tensor, list[torch.Tensor], Any]:
    """Evaluates ``value_fn`` on detached copies of ``params`` that require grad.

    Returns:
      ``(value, inputs, spec)``: the (graph-carrying) value, the leaves it was computed from
      and the structure of ``params``, ready for :func:`_grad_from_graph`.
    """
    leaves, spec = tm.flatten(params)
    inputs = [leaf.detach().requires_grad_(leaf.is_floating_point() or leaf.is_complex())
              for leaf in leaves]
    with torch.enable_grad():
        value = _as_scalar(value_fn(tm.unflatten(spec, inputs), *fn_args, **fn_kwargs))
    return value, inputs, spec


def _grad_from_graph(value: torch.Tensor, inputs: list[torch.Tensor], spec: Any) -> base.Updates:
    """The gradient of ``value`` with respect to ``inputs``, as a tree (zeros where unused)."""
    differentiable = [x for x in inputs if x.requires_grad]
    grads = iter(())
    if value.requires_grad and differentiable:
        grads = iter(torch.autograd.grad(value, differentiable, allow_unused=True))
    leaves = []
    for x in inputs:
        grad = next(grads, None) if x.requires_grad else None
        leaves.append(torch.zeros_like(x.detach()) if grad is None else grad)
    return tm.unflatten(spec, leaves)


def _value_and_grad(value_fn: Callable[..., Any], params: base.Params, *fn_args: Any,
                    **fn_kwargs: Any) -> tuple[torch.Tensor, base.Updates]:
    """``jax.value_and_grad(value_fn)(params, *fn_args, **fn_kwargs)`` with torch.autograd."""
    value, inputs, spec = _value_with_graph(value_fn, params, *fn_args, **fn_kwargs)
    return value.detach(), _grad_from_graph(value, inputs, spec)


def _value_only(value_fn: Callable[..., Any], params: base.Params,
                **fn_kwargs: Any) -> torch.Tensor:
    with torch.no_grad():
        return _as_scalar(value_fn(params, **fn_kwargs))


def _value_dtype(params: base.Params) -> torch.dtype:
    """The real dtype of the first leaf of ``params``, used for values and step sizes."""
    leaves = tm.leaves(params)
    if not leaves:
        raise ValueError("A line search needs at least one parameter tensor.")
    dtype = leaves[0].dtype
    return leaves[0].real.dtype if dtype.is_complex else dtype


def _detached(tree: Any) -> Any:
    return tm.tree_map(torch.Tensor.detach, tree)


def _slope(grad: base.Updates, direction: base.Updates) -> torch.Tensor:
    """``Re <grad, direction>``: the derivative of the objective along ``direction``.

    Gradients of complex parameters follow PyTorch's convention (the conjugate of JAX's, i.e.
    what Optax users pass after conjugating ``jax.grad``), so this is the derivative for the
    gradients torch.autograd returns at candidate points as well as for the ``grad`` given
    to ``update``.
    """
    return tree_utils.tree_real(tree_utils.tree_vdot(grad, direction))


def _extract_fns_kwargs(
    fns: tuple[Callable[..., Any], ...],
    kwargs: dict[str, Any],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Splits ``kwargs`` among ``fns`` by their parameter names.

    Args:
      fns: the functions to feed.
      kwargs: keyword arguments meant for some of them.

    Returns:
      ``(fns_kwargs, remaining_kwargs)``: for each function the entries of ``kwargs`` whose key
      names one of its parameters, and the entries no function names.
    """
    fns_arg_names = [list(inspect.signature(fn).parameters) for fn in fns]
    fns_kwargs = [{k: v for k, v in kwargs.items() if k in names} for names in fns_arg_names]
    all_names = functools.reduce(operator.add, fns_arg_names)
    remaining_kwargs = {k: v for k, v in kwargs.items() if k not in all_names}
    return fns_kwargs, remaining_kwargs


def _value_fn_kwargs(transform_name: str, params: Any, value: Any, grad: Any, value_fn: Any,
                     extra_args: dict[str, Any]) -> dict[str, Any]:
    """The extra arguments of a line search's ``update`` that ``value_fn`` accepts, after
    checking that ``update`` got ``params``, ``value``, ``grad`` and a callable ``value_fn``.

    Raises:
      ValueError: without ``params``.
      TypeError: naming the missing arguments, a ``value_fn`` that is not callable, or the
        extra arguments ``value_fn`` does not accept.
    """
    if params is None:
        raise ValueError(bb.NO_PARAMS_MSG)
    missing = [name for name, arg in (("value", value), ("grad", grad), ("value_fn", value_fn))
               if arg is None]
    if missing:
        raise TypeError(
            f"`{transform_name}.update` needs the keyword arguments value=, grad= and "
            f"value_fn= (the objective at the current params, its gradient and the objective "
            f"itself); missing: {', '.join(missing)}.")
    if not callable(value_fn):
        raise TypeError(f"`{transform_name}.update`: value_fn must be callable, got "
                        f"{type(value_fn).__name__}.")
    (fn_kwargs,), remaining_kwargs = _extract_fns_kwargs((value_fn,), extra_args)
    if remaining_kwargs:
        raise TypeError(
            f"Unexpected keyword arguments passed to `{transform_name}.update`. These "
            f"arguments were not consumed by `value_fn`: {sorted(remaining_kwargs)}. Ensure "
            "that all extra keyword arguments are accepted by `value_fn`.")
    return fn_kwargs


def _print(message: str, **values: Any) -> None:
    """Prints like ``jax.debug.print``: tensors are shown as numpy arrays."""
    shown = {k: v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v
             for k, v in values.items()}
    print(message.format(**shown))


# ----------------------------------------------------------------------------------------------
# Backtracking line search.


class BacktrackingLinesearchInfo(NamedTuple):
    """Diagnostics of a backtracking line search.

    Attributes:
      num_linesearch_steps: number of objective evaluations of the last search.
      decrease_error: how much the accepted step misses the sufficient decrease criterion
        (``0`` when it is met).
    """

    num_linesearch_steps: torch.Tensor  # 0-d int32
    decrease_error: torch.Tensor


class ScaleByBacktrackingLinesearchState(NamedTuple):
    """State of :func:`scale_by_backtracking_linesearch`.

    Attributes:
      learning_rate: the step size accepted by the last search (scales the updates).
      value: the objective at the accepted step, reusable with
        :func:`value_and_grad_from_state`.
      grad: the gradient at the accepted step if ``store_grad=True``, else ``None``.
      info: :class:`BacktrackingLinesearchInfo`.
    """

    learning_rate: torch.Tensor
    value: torch.Tensor
    grad: Optional[base.Updates]
    info: BacktrackingLinesearchInfo


def scale_by_backtracking_linesearch(
    max_backtracking_steps: int,
    slope_rtol: Scalar = 1e-4,
    decrease_factor: Scalar = 0.8,
    increase_factor: Scalar = 1.5,
    max_learning_rate: Scalar = 1.0,
    atol: Scalar = 0.0,
    rtol: Scalar = 0.0,
    store_grad: bool = False,
    verbose: bool = False,
) -> base.GradientTransformationExtraArgs:
    r"""Backtracking line search ensuring sufficient decrease (Armijo criterion).

    Finds a step size :math:`\eta` with
    :math:`f(w + \eta u) \leq (1 + \delta) f(w) + \eta c \langle u, \nabla f(w)\rangle + \epsilon`
    by starting from ``min(increase_factor * previous_eta, max_learning_rate)`` and multiplying
    by ``decrease_factor`` until the criterion holds or ``max_backtracking_steps`` reductions
    were tried. If no finite value was ever found, the step size is set to ``0``. The updates
    ``u`` should be a descent direction (``<u, grad> < 0``), e.g. the output of :func:`sgd`.

    Args:
      max_backtracking_steps: maximum number of step size reductions.
      slope_rtol: :math:`c`, the fraction of the linear decrease that must be achieved.
      decrease_factor: factor reducing the step size after a failed trial.
      increase_factor: factor applied to the previous step size for the first trial of a
        search (``1`` keeps it, ``math.inf`` starts at ``max_learning_rate``).
      max_learning_rate: upper bound on the first trial.
      atol: :math:`\epsilon`, absolute tolerance of the criterion.
      rtol: :math:`\delta`, relative tolerance of the criterion.
      store_grad: also compute the gradient at the accepted step and store it in the state,
        for :func:`value_and_grad_from_state`.
      verbose: print diagnostics when the search fails.

    Returns:
      A :class:`GradientTransformationExtraArgs` whose ``update`` takes the keyword
      arguments ``value`` (the objective at ``params``), ``grad`` (its gradient),
      ``value_fn`` (the objective, ``params -> scalar tensor``) and any further keyword
      arguments ``value_fn`` accepts (e.g. a batch).

    References:
      Vaswani et al, `Painless Stochastic Gradient <https://arxiv.org/abs/1905.09997>`_, 2019.

      Nocedal & Wright, `Numerical Optimization <https://doi.org/10.1007/978-0-387-40065-5>`_,
      1999.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> def loss(params):
      ...     return ((params["w"] - torch.tensor([3.0, -1.0])) ** 2).sum()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> tx = optax.chain(optax.sgd(learning_rate=1.0),
      ...                  optax.scale_by_backtracking_linesearch(max_backtracking_steps=15))
      >>> state = tx.init(params)
      >>> grads = {"w": 2 * (params["w"] - torch.tensor([3.0, -1.0]))}
      >>> updates, state = tx.update(grads, state, params, value=loss(params),
      ...                            grad=grads, value_fn=loss)
      >>> loss(optax.apply_updates(params, updates)) < loss(params)
      tensor(True)
    """

    def init_fn(params: base.Params) -> ScaleByBacktrackingLinesearchState:
        dtype = _value_dtype(params)
        device = tm.leaves(params)[0].device
        return ScaleByBacktrackingLinesearchState(
            learning_rate=torch.tensor(1.0, dtype=dtype, device=device),
            value=torch.tensor(math.inf, dtype=dtype, device=device),
            grad=tree_utils.tree_zeros_like(params) if store_grad else None,
            info=BacktrackingLinesearchInfo(
                num_linesearch_steps=torch.tensor(0, dtype=torch.int32, device=device),
                decrease_error=torch.tensor(math.inf, dtype=dtype, device=device)))

    def decrease_error_of(stepsize: torch.Tensor, slope: torch.Tensor, value: torch.Tensor,
                          new_value: torch.Tensor) -> torch.Tensor:
        error = new_value - (1.0 + rtol) * value - stepsize * slope_rtol * slope
        error = torch.where(torch.isnan(error), math.inf, error)
        return torch.clamp(error, min=0.0)

    def update_fn(
        updates: base.Updates,
        state: ScaleByBacktrackingLinesearchState,
        params: Optional[base.Params] = None,
        *,
        value: Any = None,
        grad: Optional[base.Updates] = None,
        value_fn: Optional[Callable[..., Any]] = None,
        **extra_args: Any,
    ) -> tuple[base.Updates, ScaleByBacktrackingLinesearchState]:
        fn_kwargs = _value_fn_kwargs("scale_by_backtracking_linesearch", params, value, grad,
                                     value_fn, extra_args)
        dtype, device = state.learning_rate.dtype, state.learning_rate.device
        params, direction, grad = _detached(params), _detached(updates), _detached(grad)
        value = _as_scalar(value, "value").detach().to(dtype=dtype, device=device)
        # Optax's formula on the caller's gradient, conjugated as Optax conjugates it.
        slope = tree_utils.tree_real(
            tree_utils.tree_vdot(direction, tree_utils.tree_conj(grad)))

        learning_rate = torch.minimum(increase_factor * state.learning_rate,
                                      torch.as_tensor(max_learning_rate, dtype=dtype,
                                                      device=device))
        new_value = value
        new_grad = tree_utils.tree_zeros_like(params) if store_grad else None
        decrease_error = torch.tensor(math.inf, dtype=dtype, device=device)
        iter_num = 0
        while not bool(decrease_error <= atol) and iter_num <= max_backtracking_steps:
            if iter_num > 0:
                learning_rate = (decrease_factor * learning_rate).to(dtype)
            candidate = tree_utils.tree_add_scale(params, learning_rate, direction)
            if store_grad:
                graph_value, inputs, spec = _value_with_graph(value_fn, candidate, **fn_kwargs)
                new_value = graph_value.detach().to(dtype)
                decrease_error = decrease_error_of(learning_rate, slope, value, new_value)
                if bool(decrease_error <= atol) or iter_num == max_backtracking_steps:
                    new_grad = _grad_from_graph(graph_value, inputs, spec)
            else:
                new_value = _value_only(value_fn, candidate, **fn_kwargs).to(dtype)
                decrease_error = decrease_error_of(learning_rate, slope, value, new_value)
            iter_num += 1

        failed_to_find_finite_value = bool(torch.isinf(decrease_error))
        new_learning_rate = torch.zeros_like(learning_rate) if failed_to_find_finite_value \
            else learning_rate
        if verbose and bool(decrease_error > atol):
            _print("INFO: optax.scale_by_backtracking_linesearch:\n"
                   "Backtracking linesearch failed to find a stepsize ensuring sufficent "
                   "decrease.\nValue at current params: {value},\n"
                   "Slope along update direction: {slope}\nStepsize: {stepsize}\n"
                   "Decrease Error: {decrease_error}", value=value, slope=slope,
                   stepsize=learning_rate, decrease_error=decrease_error)
        if verbose and failed_to_find_finite_value:
            _print("Using a stepsize of 0 to avoid infinite or nan values.")
        new_state = ScaleByBacktrackingLinesearchState(
            learning_rate=new_learning_rate,
            value=new_value,
            grad=None if new_grad is None else tree_utils.tree_cast_like(new_grad, state.grad),
            info=BacktrackingLinesearchInfo(
                num_linesearch_steps=torch.tensor(iter_num, dtype=torch.int32, device=device),
                decrease_error=decrease_error.to(dtype)))
        return tree_utils.tree_scale(new_learning_rate, updates), new_state

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


# ----------------------------------------------------------------------------------------------
# Zoom line search.

# Diagnostics printed with verbose=True (the same sentences as Optax's).
FLAG_INTERVAL_NOT_FOUND = (
    "No interval satisfying curvature condition. "
    "Consider increasing maximal possible stepsize of the linesearch."
)
FLAG_INTERVAL_TOO_SMALL = "Length of searched interval has been reduced below threshold."
FLAG_CURVATURE_COND_NOT_SATISFIED = (
    "Returning stepsize with sufficient decrease but curvature condition not satisfied."
)
FLAG_NO_STEPSIZE_FOUND = "Linesearch failed, no stepsize satisfying sufficient decrease found."
FLAG_NOT_A_DESCENT_DIRECTION = (
    "The linesearch failed because the provided direction is not a descent direction. "
)


class ZoomLinesearchState(NamedTuple):
    """The running state of one zoom line search (a host-side loop, so flags are Python bools).

    ``low`` and ``high`` bracket a step size satisfying both criteria, with
    ``value(high) >= value(low)`` (``high`` may be smaller than ``low``).
    """

    count: int
    # Fixed during the search.
    params: base.Params
    updates: base.Updates
    stepsize_guess: torch.Tensor
    # The last point tried.
    stepsize: torch.Tensor
    value: torch.Tensor
    grad: base.Updates
    slope: torch.Tensor
    # At step size 0.
    value_init: torch.Tensor
    slope_init: torch.Tensor
    # Criteria at the last point.
    decrease_error: torch.Tensor
    curvature_error: torch.Tensor
    error: torch.Tensor
    # Phase and termination.
    interval_found: bool
    done: bool
    failed: bool
    # The bracketing interval and the reference point of the cubic interpolation.
    low: torch.Tensor
    value_low: torch.Tensor
    slope_low: torch.Tensor
    high: torch.Tensor
    value_high: torch.Tensor
    slope_high: torch.Tensor
    cubic_ref: torch.Tensor
    value_cubic_ref: torch.Tensor
    # The best point found with sufficient decrease, returned if curvature cannot be met.
    safe_stepsize: torch.Tensor
    safe_value: torch.Tensor
    safe_grad: base.Updates


def _cubicmin(a, fa, fpa, b, fb, c, fc):
    """Critical point of the cubic through ``(a, fa)``, ``(b, fb)``, ``(c, fc)`` with slope
    ``fpa`` at ``a`` (NaN when there is none; adapted from scipy.optimize's line search)."""
    slope = fpa
    db = b - a
    dc = c - a
    denom = (db * dc) ** 2 * (db - dc)
    rhs_b = fb - fa - slope * db
    rhs_c = fc - fa - slope * dc
    cubic_coef = (dc ** 2 * rhs_b + (-(db ** 2)) * rhs_c) / denom
    quad_coef = (-(dc ** 3) * rhs_b + db ** 3 * rhs_c) / denom
    radical = quad_coef * quad_coef - 3.0 * cubic_coef * slope
    return a + (-quad_coef + torch.sqrt(radical)) / (3.0 * cubic_coef)


def _quadmin(a, fa, fpa, b, fb):
    """Critical point of the quadratic through ``(a, fa)``, ``(b, fb)`` with slope ``fpa`` at
    ``a`` (adapted from scipy.optimize's line search)."""
    db = b - a
    quad_coef = (fb - fa - fpa * db) / (db ** 2)
    return a - fpa / (2.0 * quad_coef)


def zoom_linesearch(
    max_linesearch_steps: int,
    max_stepsize: Optional[Scalar] = None,
    tol: Scalar = 0.0,
    increase_factor: Scalar = 2.0,
    slope_rtol: Scalar = 1e-4,
    curv_rtol: Scalar = 0.9,
    approx_dec_rtol: Optional[Scalar] = 1e-6,
    interval_threshold: Scalar = 1e-5,
    verbose: bool = False,
) -> tuple[Callable[..., ZoomLinesearchState], Callable[..., ZoomLinesearchState],
           Callable[[ZoomLinesearchState], bool]]:
    """The zoom line search as ``(init_fn, step_fn, cond_fn)``, driven by
    :func:`scale_by_zoom_linesearch` (see there for the criteria and arguments;
    ``max_stepsize`` and ``interval_threshold`` are its ``max_learning_rate`` and
    ``stepsize_precision``).

    Phase 1 (Algorithm 3.5 of Nocedal and Wright) grows the step size until an interval
    containing an acceptable one is bracketed; phase 2 (Algorithm 3.6) shrinks the interval
    with cubic, quadratic or bisection steps.
    """

    def value_and_slope_on_line(value_and_grad_fn, params, stepsize, updates, fn_kwargs):
        step = tree_utils.tree_add_scale(params, stepsize, updates)
        value_step, grad_step = value_and_grad_fn(step, **fn_kwargs)
        value_step = value_step.to(stepsize.dtype)
        return value_step, grad_step, _slope(grad_step, updates)

    def decrease_error_of(stepsize, value_step, slope_step, value_init, slope_init):
        # The Armijo criterion, (3.7a) of Nocedal and Wright ...
        error = value_step - value_init - slope_rtol * stepsize * slope_init
        if approx_dec_rtol is not None:
            # ... or, close to a minimiser where values stop decreasing measurably, the
            # approximate Wolfe criterion (23) of Hager and Zhang, whichever is smaller.
            approx_error = slope_step - (2 * slope_rtol - 1.0) * slope_init
            delta_values = value_step - value_init - approx_dec_rtol * torch.abs(value_init)
            error = torch.minimum(torch.maximum(approx_error, delta_values), error)
        error = torch.clamp(error, min=0.0)
        return torch.where(torch.isnan(error), math.inf, error)

    def curvature_error_of(slope_step, slope_init):
        # The strong Wolfe curvature criterion, (3.7b) of Nocedal and Wright.
        error = torch.clamp(torch.abs(slope_step) - curv_rtol * torch.abs(slope_init), min=0.0)
        return torch.where(torch.isnan(error), math.inf, error)

    def failure_diagnostic(state: ZoomLinesearchState) -> None:
        _print(FLAG_NO_STEPSIZE_FOUND)
        is_descent_dir = bool(state.slope_init < 0.0)
        if not is_descent_dir:
            _print(FLAG_NOT_A_DESCENT_DIRECTION
                   + "The slope (={slope_init}) at stepsize=0 should be negative",
                   slope_init=state.slope_init)
        else:
            _print("Consider augmenting the maximal number of linesearch iterations.")
            eps = torch.finfo(torch.float32).eps
            if bool(state.stepsize < eps):
                _print("Computed stepsize (={stepsize}) is below machine precision (={eps}), "
                       "consider passing to higher precision like float64.",
                       stepsize=state.stepsize, eps=eps)
            abs_slope_init = torch.abs(state.slope_init)
            if bool(abs_slope_init > 1e16):
                _print("Very large absolute slope at stepsize=0. (|slope|={abs_slope_init}). "
                       "The objective is badly conditioned. Consider reparameterizing "
                       "objective (e.g., normalizing parameters) or finding a better guess "
                       "for the initial parameters for the solver.",
                       abs_slope_init=abs_slope_init)
        if bool(torch.isinf(state.decrease_error)):
            _print("Cannot even make a step without getting Inf or Nan. The linesearch won't "
                   "make a step and the optimizer is stuck.")
        else:
            _print("Making an unsafe step, not decreasing enough the objective. Convergence "
                   "of the solver is compromised as it does not reduce values.")

    def try_safe_step(state: ZoomLinesearchState) -> ZoomLinesearchState:
        """Falls back on the best step with sufficient decrease (or on step size 0)."""
        outside_domain = bool(torch.isinf(state.decrease_error))
        has_safe_step = bool(state.safe_stepsize > 0.0)
        if verbose:
            _print("INFO: optax.scale_by_zoom_linesearch:\n"
                   "Value at current params: {value_init}\n"
                   "Slope along update direction: {slope_init}\n"
                   "Stepsize reached: {stepsize}\n"
                   "Decrease Error: {decrease_error}\n"
                   "Curvature Error: {curvature_error}",
                   value_init=state.value_init, slope_init=state.slope_init,
                   stepsize=state.stepsize, decrease_error=state.decrease_error,
                   curvature_error=state.curvature_error)
            interval_length = torch.abs(state.low - state.high)
            if bool(interval_length <= interval_threshold):
                _print(FLAG_INTERVAL_TOO_SMALL + " Interval length: {interval_length}.",
                       interval_length=interval_length)
            if has_safe_step:
                _print(FLAG_CURVATURE_COND_NOT_SATISFIED
                       + " Stepsize ensuring sufficient decrease: {safe_stepsize}.",
                       safe_stepsize=state.safe_stepsize)
            else:
                failure_diagnostic(state)
        if not (has_safe_step or outside_domain):
            return state
        return state._replace(stepsize=state.safe_stepsize, value=state.safe_value,
                              grad=state.safe_grad)

    def search_interval(state: ZoomLinesearchState, value_and_grad_fn,
                        fn_kwargs) -> ZoomLinesearchState:
        """Algorithm 3.5 of Nocedal and Wright: find an interval containing a good step."""
        iter_num = state.count
        prev_stepsize, prev_value, prev_slope = state.stepsize, state.value, state.slope
        new_stepsize = state.stepsize_guess if iter_num == 0 else increase_factor * prev_stepsize
        new_stepsize = new_stepsize.to(prev_stepsize.dtype)
        max_stepsize_reached = False
        if max_stepsize is not None:
            max_stepsize_reached = bool(new_stepsize >= max_stepsize)
            new_stepsize = torch.minimum(new_stepsize, torch.as_tensor(
                max_stepsize, dtype=new_stepsize.dtype, device=new_stepsize.device))

        new_value, new_grad, new_slope = value_and_slope_on_line(
            value_and_grad_fn, state.params, new_stepsize, state.updates, fn_kwargs)
        decrease_error = decrease_error_of(new_stepsize, new_value, new_slope,
                                           state.value_init, state.slope_init)
        curvature_error = curvature_error_of(new_slope, state.slope_init)
        new_error = torch.maximum(decrease_error, curvature_error)

        # Keep a point with sufficient decrease in case curvature cannot be satisfied.
        safe = (new_stepsize, new_value, new_grad) if bool(decrease_error <= tol) else (
            state.safe_stepsize, state.safe_value, state.safe_grad)

        set_high_to_new = bool(decrease_error > 0.0) or (
            bool(new_value >= prev_value) and iter_num > 0)
        set_low_to_new = bool(new_slope >= 0.0) and not set_high_to_new
        if set_low_to_new:
            low, high = (new_stepsize, new_value, new_slope), (prev_stepsize, prev_value,
                                                                prev_slope)
        else:
            low, high = (prev_stepsize, prev_value, prev_slope), (new_stepsize, new_value,
                                                                   new_slope)
        good = bool(new_error <= tol)
        interval_found = set_high_to_new or set_low_to_new or good
        # At the maximal step size without an interval, a larger step (which the curvature
        # criterion would need) is impossible: stop there.
        done = good or (max_stepsize_reached and not interval_found)
        if verbose and max_stepsize_reached and not interval_found:
            _print("INFO: optax.scale_by_zoom_linesearch:\n"
                   "Value at current params: {value_init}\n"
                   "Slope along update direction: {slope_init}\n"
                   "Stepsize reached: {stepsize}\n"
                   "Decrease Error: {decrease_error}\n"
                   "Curvature Error: {curvature_error}"
                   + FLAG_INTERVAL_NOT_FOUND + "\n" + FLAG_CURVATURE_COND_NOT_SATISFIED,
                   value_init=state.value_init, slope_init=state.slope_init,
                   stepsize=new_stepsize, decrease_error=decrease_error,
                   curvature_error=curvature_error)
        return state._replace(
            count=iter_num + 1,
            stepsize=new_stepsize, value=new_value, grad=new_grad, slope=new_slope,
            decrease_error=decrease_error, curvature_error=curvature_error, error=new_error,
            interval_found=interval_found, done=done,
            failed=iter_num + 1 >= max_linesearch_steps and not done,
            low=low[0], value_low=low[1], slope_low=low[2],
            high=high[0], value_high=high[1], slope_high=high[2],
            cubic_ref=low[0], value_cubic_ref=low[1],
            safe_stepsize=safe[0], safe_value=safe[1], safe_grad=safe[2])

    def zoom_into_interval(state: ZoomLinesearchState, value_and_grad_fn,
                           fn_kwargs) -> ZoomLinesearchState:
        """Algorithm 3.6 of Nocedal and Wright: shrink the interval around a good step."""
        low, value_low, slope_low = state.low, state.value_low, state.slope_low
        high, value_high, slope_high = state.high, state.value_high, state.slope_high
        delta = torch.abs(high - low)
        left, right = torch.minimum(high, low), torch.maximum(high, low)
        cubic_chk, quad_chk = 0.2 * delta, 0.1 * delta
        too_small_int = bool(delta <= interval_threshold)

        # Interpolate: cubic if its minimiser is well inside the interval, else quadratic,
        # else bisect.
        middle_cubic = _cubicmin(low, value_low, slope_low, high, value_high, state.cubic_ref,
                                 state.value_cubic_ref)
        middle_quad = _quadmin(low, value_low, slope_low, high, value_high)
        if bool(middle_cubic > left + cubic_chk) and bool(middle_cubic < right - cubic_chk):
            middle = middle_cubic
        elif bool(middle_quad > left + quad_chk) and bool(middle_quad < right - quad_chk):
            middle = middle_quad
        else:
            middle = (low + high) / 2.0

        value_middle, grad_middle, slope_middle = value_and_slope_on_line(
            value_and_grad_fn, state.params, middle, state.updates, fn_kwargs)
        decrease_error = decrease_error_of(middle, value_middle, slope_middle,
                                           state.value_init, state.slope_init)
        curvature_error = curvature_error_of(slope_middle, state.slope_init)
        new_error = torch.maximum(decrease_error, curvature_error)

        # Keep the sufficient-decrease point with the smallest value.
        if bool(decrease_error <= tol) and bool(value_middle < state.safe_value):
            safe = (middle, value_middle, grad_middle)
        else:
            safe = (state.safe_stepsize, state.safe_value, state.safe_grad)
        done = bool(new_error <= tol)

        set_high_to_middle = bool(decrease_error > 0.0) or bool(value_middle >= value_low)
        set_high_to_low = bool(slope_middle * (high - low) >= 0.0) and not set_high_to_middle
        new_high = (high, value_high, slope_high)
        if set_high_to_middle:
            new_high = (middle, value_middle, slope_middle)
        if set_high_to_low:
            new_high = (low, value_low, slope_low)
        new_low = (low, value_low, slope_low) if set_high_to_middle else (
            middle, value_middle, slope_middle)
        # The point that just left the interval becomes the cubic's third point.
        cubic_ref = (high, value_high) if set_high_to_middle or set_high_to_low else (
            low, value_low)

        # Stop when the interval is below the threshold and a sufficient-decrease step is
        # known; without one keep going (very steep functions need tiny steps).
        presumably_failed = (state.count + 1 >= max_linesearch_steps) or (
            too_small_int and bool(safe[0] > 0.0))
        return state._replace(
            count=state.count + 1,
            stepsize=middle, value=value_middle, grad=grad_middle, slope=slope_middle,
            decrease_error=decrease_error, curvature_error=curvature_error, error=new_error,
            done=done, failed=presumably_failed and not done,
            low=new_low[0], value_low=new_low[1], slope_low=new_low[2],
            high=new_high[0], value_high=new_high[1], slope_high=new_high[2],
            cubic_ref=cubic_ref[0], value_cubic_ref=cubic_ref[1],
            safe_stepsize=safe[0], safe_value=safe[1], safe_grad=safe[2])

    def init_fn(updates: base.Updates, params: base.Params, *, value: torch.Tensor,
                grad: base.Updates, prev_stepsize: Scalar = 1.0,
                initial_guess_strategy: str = "one") -> ZoomLinesearchState:
        dtype, device = _value_dtype(params), tm.leaves(params)[0].device
        if initial_guess_strategy == "one":
            stepsize_guess = torch.tensor(1.0, dtype=dtype, device=device)
        elif initial_guess_strategy == "keep":
            stepsize_guess = torch.as_tensor(prev_stepsize, dtype=dtype, device=device)
        else:
            raise ValueError(f"Unknown initial guess strategy: {initial_guess_strategy}")
        value = _as_scalar(value, "value").detach().to(dtype=dtype, device=device)
        slope = _slope(grad, updates).to(dtype)
        zero = torch.tensor(0.0, dtype=dtype, device=device)
        inf = torch.tensor(math.inf, dtype=dtype, device=device)
        return ZoomLinesearchState(
            count=0, params=params, updates=updates, stepsize_guess=stepsize_guess,
            stepsize=zero, value=value, grad=grad, slope=slope,
            value_init=value, slope_init=slope,
            decrease_error=inf, curvature_error=inf, error=inf,
            interval_found=False, done=False, failed=False,
            low=zero, value_low=value, slope_low=slope,
            high=zero, value_high=value, slope_high=slope,
            cubic_ref=zero, value_cubic_ref=value,
            safe_stepsize=zero, safe_value=value, safe_grad=grad)

    def step_fn(state: ZoomLinesearchState, *, value_and_grad_fn, fn_kwargs):
        phase = zoom_into_interval if state.interval_found else search_interval
        new_state = phase(state, value_and_grad_fn, fn_kwargs)
        return try_safe_step(new_state) if new_state.failed else new_state

    def cond_fn(state: ZoomLinesearchState) -> bool:
        return not (state.done or state.failed)

    return init_fn, step_fn, cond_fn


class ZoomLinesearchInfo(NamedTuple):
    """Diagnostics of a zoom line search.

    A positive curvature error is benign (the maximal step size may be too small); a positive
    decrease error means the objective may not decrease. ``verbose=True`` in
    :func:`scale_by_zoom_linesearch` prints why a search failed.

    Attributes:
      num_linesearch_steps: number of objective evaluations of the last search.
      decrease_error: how much the accepted step misses the sufficient decrease criterion.
      curvature_error: how much it misses the small curvature criterion.
    """

    num_linesearch_steps: torch.Tensor  # 0-d int32
    decrease_error: torch.Tensor
    curvature_error: torch.Tensor


class ScaleByZoomLinesearchState(NamedTuple):
    """State of :func:`scale_by_zoom_linesearch`.

    Attributes:
      learning_rate: the step size accepted by the last search (scales the updates).
      value: the objective at the accepted step (see :func:`value_and_grad_from_state`).
      grad: the gradient at the accepted step (see :func:`value_and_grad_from_state`).
      info: :class:`ZoomLinesearchInfo`.
    """

    learning_rate: torch.Tensor
    value: torch.Tensor
    grad: base.Updates
    info: ZoomLinesearchInfo


def scale_by_zoom_linesearch(
    max_linesearch_steps: int,
    max_learning_rate: Optional[Scalar] = None,
    tol: Scalar = 0.0,
    increase_factor: Scalar = 2.0,
    slope_rtol: Scalar = 1e-4,
    curv_rtol: Scalar = 0.9,
    approx_dec_rtol: Optional[Scalar] = 1e-6,
    stepsize_precision: Scalar = 1e-5,
    initial_guess_strategy: str = "keep",
    verbose: bool = False,
) -> base.GradientTransformationExtraArgs:
    r"""Line search ensuring sufficient decrease and small curvature (strong Wolfe).

    Finds a step size :math:`\eta` satisfying the sufficient decrease (Armijo) criterion
    :math:`f(w + \eta u) \leq f(w) + \eta c_1 \langle u, \nabla f(w)\rangle + \epsilon`
    and the small curvature criterion
    :math:`|\langle \nabla f(w + \eta u), u\rangle| \leq c_2 |\langle \nabla f(w), u\rangle|
    + \epsilon`. Close to a minimiser, where values stop decreasing measurably
    (:math:`f(w + \eta u) \leq f(w) + c_3 |f(w)|`), the decrease criterion may be met by the
    approximate one of Hager and Zhang,
    :math:`\langle \nabla f(w + \eta u), u\rangle \leq (2 c_1 - 1) \langle \nabla f(w), u
    \rangle + \epsilon`. Setting ``curv_rtol=math.inf`` reduces the search to an
    interpolating backtracking search.

    Args:
      max_linesearch_steps: maximum number of objective evaluations per search.
      max_learning_rate: upper bound on the step size (``None`` for none); too small a bound
        may make the curvature criterion unreachable.
      tol: :math:`\epsilon`, tolerance of both criteria.
      increase_factor: growth of the step size while looking for a bracketing interval.
      slope_rtol: :math:`c_1`.
      curv_rtol: :math:`c_2`.
      approx_dec_rtol: :math:`c_3`; ``None`` uses only the Armijo criterion.
      stepsize_precision: once the bracketing interval is shorter than this and a step with
        sufficient decrease is known, that step is taken.
      initial_guess_strategy: first step size tried: ``"one"`` (recommended for quasi-Newton
        directions such as L-BFGS) or ``"keep"`` (the previous step size, for SGD).
      verbose: print diagnostics when a search fails.

    Returns:
      A :class:`GradientTransformationExtraArgs` whose ``update`` takes the keyword
      arguments ``value`` (the objective at ``params``), ``grad`` (its gradient),
      ``value_fn`` (the objective, ``params -> scalar tensor``) and any further keyword
      arguments ``value_fn`` accepts (e.g. a batch).

    References:
      Algorithms 3.5 and 3.6 of Nocedal and Wright, `Numerical Optimization
      <https://doi.org/10.1007/978-0-387-40065-5>`_, 1999.

      Hager and Zhang, `Algorithm 851: CG_DESCENT, a Conjugate Gradient Method with
      Guaranteed Descent <https://doi.org/10.1145/1132973.1132979>`_, 2006.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> def loss(params):
      ...     return ((params["w"] - torch.tensor([3.0, -1.0])) ** 2).sum()
      >>> params = {"w": torch.tensor([1.0, -2.0])}
      >>> tx = optax.chain(optax.sgd(learning_rate=1.0),
      ...                  optax.scale_by_zoom_linesearch(max_linesearch_steps=15))
      >>> state = tx.init(params)
      >>> grads = {"w": 2 * (params["w"] - torch.tensor([3.0, -1.0]))}
      >>> updates, state = tx.update(grads, state, params, value=loss(params),
      ...                            grad=grads, value_fn=loss)
      >>> loss(optax.apply_updates(params, updates)) < loss(params)
      tensor(True)
    """
    init_ls, step_ls, cond_step_ls = zoom_linesearch(
        max_linesearch_steps=max_linesearch_steps, max_stepsize=max_learning_rate, tol=tol,
        increase_factor=increase_factor, slope_rtol=slope_rtol, curv_rtol=curv_rtol,
        approx_dec_rtol=approx_dec_rtol, interval_threshold=stepsize_precision,
        verbose=verbose)

    def init_fn(params: base.Params) -> ScaleByZoomLinesearchState:
        dtype = _value_dtype(params)
        device = tm.leaves(params)[0].device
        inf = torch.tensor(math.inf, dtype=dtype, device=device)
        return ScaleByZoomLinesearchState(
            learning_rate=torch.tensor(1.0, dtype=dtype, device=device),
            value=inf,
            grad=tree_utils.tree_zeros_like(params),
            info=ZoomLinesearchInfo(
                num_linesearch_steps=torch.tensor(0, dtype=torch.int32, device=device),
                decrease_error=inf, curvature_error=inf))

    def update_fn(
        updates: base.Updates,
        state: ScaleByZoomLinesearchState,
        params: Optional[base.Params] = None,
        *,
        value: Any = None,
        grad: Optional[base.Updates] = None,
        value_fn: Optional[Callable[..., Any]] = None,
        **extra_args: Any,
    ) -> tuple[base.Updates, ScaleByZoomLinesearchState]:
        fn_kwargs = _value_fn_kwargs("scale_by_zoom_linesearch", params, value, grad, value_fn,
                                     extra_args)

        search = init_ls(_detached(updates), _detached(params), value=value,
                         grad=_detached(grad), prev_stepsize=state.learning_rate,
                         initial_guess_strategy=initial_guess_strategy)
        value_and_grad_fn = functools.partial(_value_and_grad, value_fn)
        while cond_step_ls(search):
            search = step_ls(search, value_and_grad_fn=value_and_grad_fn, fn_kwargs=fn_kwargs)

        dtype = state.learning_rate.dtype
        learning_rate = search.stepsize.to(dtype)
        new_state = ScaleByZoomLinesearchState(
            learning_rate=learning_rate,
            value=search.value.to(dtype),
            grad=tree_utils.tree_cast_like(search.grad, state.grad),
            info=ZoomLinesearchInfo(
                num_linesearch_steps=torch.tensor(search.count, dtype=torch.int32,
                                                  device=learning_rate.device),
                decrease_error=search.decrease_error.to(dtype),
                curvature_error=search.curvature_error.to(dtype)))
        return tree_utils.tree_scale(learning_rate, updates), new_state

    return base.GradientTransformationExtraArgs(init_fn, update_fn)


# ----------------------------------------------------------------------------------------------
# Reusing the value and gradient computed by a line search.


def value_and_grad_from_state(
    value_fn: Callable[..., Any],
) -> Callable[..., tuple[torch.Tensor, base.Updates]]:
    """Like ``value_and_grad(value_fn)``, but reuses the value and gradient a line search stored.

    A line search evaluates the objective and its gradient at the accepted step; for a
    deterministic objective they are those of the next iteration, so the next call can skip
    the evaluation.

    Args:
      value_fn: the objective, ``value_fn(params, *args, **kwargs) -> scalar tensor``,
        differentiable with torch.autograd.

    Returns:
      ``value_and_grad(params, *fn_args, state, **fn_kwargs) -> (value, grad)``: the
      ``value`` and ``grad`` stored in the optimizer state ``state`` when the value is finite,
      else (first iteration) those of ``value_fn`` at ``params`` computed with torch.autograd.
      It raises ``ValueError`` when the state holds no value or gradient (e.g. a backtracking
      line search without ``store_grad=True``) and ``KeyError`` when it holds several.

    Example:
      >>> import torch, optax_compat as optax
      >>> fn = lambda x: torch.sum(x ** 2)
      >>> solver = optax.lbfgs()
      >>> params = torch.tensor([1., 2., 3.])
      >>> state = solver.init(params)
      >>> value_and_grad = optax.value_and_grad_from_state(fn)
      >>> value, grad = value_and_grad(params, state=state)
      >>> updates, state = solver.update(grad, state, params, value=value, grad=grad,
      ...                                value_fn=fn)
    """

    def _value_and_grad_fn(params: base.Params, *fn_args: Any, state: base.OptState,
                           **fn_kwargs: Any) -> tuple[torch.Tensor, base.Updates]:
        value = tree_utils.tree_get(state, "value")
        grad = tree_utils.tree_get(state, "grad")
        if value is None or grad is None:
            raise ValueError("Value or gradient not found in the state. Make sure that these "
                             "values are stored in the state by the optimizer.")
        if bool(torch.isfinite(bb.as_tensor(value))):
            return value, grad
        return _value_and_grad(value_fn, params, *fn_args, **fn_kwargs)

    return _value_and_grad_fn
