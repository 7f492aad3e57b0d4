"""Implicit differentiation of the solution of an inner problem: :func:`custom_root`.

If ``x*(theta)`` solves ``F(x, theta) = 0`` and ``A = dF/dx`` is invertible at the solution, the
implicit function theorem gives ``dx*/dtheta = -A^{-1} B`` with ``B = dF/dtheta``. Reverse mode
therefore needs, for an output cotangent ``v``, one linear solve ``A^T u = -v`` (matrix-free,
``A^T u`` being a vector-Jacobian product of ``F``) and one more vector-Jacobian product
``B^T u``; forward mode solves ``A x_dot = -B theta_dot`` with Jacobian-vector products. The
solver's own iterations are never differentiated.

References:
    Blondel et al., "Efficient and Modular Implicit Differentiation", NeurIPS 2022 (JAXopt).
    Rajeswaran et al., "Meta-Learning with Implicit Gradients", NeurIPS 2019 (iMAML).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch

from torchopt_fn import linear_solve, pytree
from torchopt_fn.diff._custom_vjp import Tensors, attach_vjp
from torchopt_fn.linalg.utils import check_same_shapes
from torchopt_fn.typing import LinearSolver, TensorTree

__all__ = ["custom_root"]


class _FlatArguments:
    """The arguments of a solver call after the first, flattened so tensors can enter autograd.

    Positional arguments ``1..n-1`` and the keyword arguments are flattened (``None`` kept as a
    leaf); the tensors among the leaves become inputs of the autograd function and are put back
    in place, as the saved tensors, when the optimality function is evaluated in backward.
    """

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.leaves, self.treespec = pytree.tree_flatten((args[1:], kwargs), none_is_leaf=True)
        self.tensor_positions = [i for i, leaf in enumerate(self.leaves)
                                 if isinstance(leaf, torch.Tensor)]
        self.arg_treespecs = [pytree.tree_structure(arg, none_is_leaf=True) for arg in args[1:]]

    def tensors(self) -> list[torch.Tensor]:
        return [self.leaves[i] for i in self.tensor_positions]

    def rebuild(self, tensors: Sequence[torch.Tensor]) -> tuple[list[Any], dict[str, Any]]:
        """``(args[1:], kwargs)`` with the tensor leaves replaced by ``tensors``."""
        leaves = list(self.leaves)
        for position, tensor in zip(self.tensor_positions, tensors, strict=True):
            leaves[position] = tensor
        rest, kwargs = pytree.tree_unflatten(self.treespec, leaves)
        return list(rest), kwargs

    def gather(self, argnums: tuple[int, ...], tensors: Sequence[torch.Tensor]) -> tuple[Any, ...]:
        """The trees ``args[argnums[k]]`` rebuilt from one tensor per tensor input."""
        rest, _ = self.rebuild(tensors)
        return tuple(rest[argnum - 1] for argnum in argnums)

    def scatter(self, argnums: tuple[int, ...], grads: Sequence[TensorTree]) -> list[Any]:
        """One gradient per tensor input: ``grads[k]`` for the leaves of ``args[argnums[k]]``."""
        per_leaf: list[Any] = [None] * len(self.leaves)
        offset = 0
        grads_by_argnum = dict(zip(argnums, grads, strict=True))
        for argnum, treespec in enumerate(self.arg_treespecs, start=1):
            if argnum in grads_by_argnum:
                leaf_grads = treespec.flatten_up_to(grads_by_argnum[argnum])
                per_leaf[offset:offset + treespec.num_leaves] = leaf_grads
            offset += treespec.num_leaves
        return [per_leaf[i] for i in self.tensor_positions]


class _ImplicitRule:
    """The derivative rules of one solver call, given the optimality condition ``F(x, theta)``.

    Reverse mode: ``theta_bar = -B^T A^{-T} x_bar``; forward mode: ``x_dot = -A^{-1} B theta_dot``,
    with ``A = dF/dx`` and ``B = dF/dtheta`` applied matrix-free (see the module docstring).
    """

    def __init__(
        self,
        optimality_fn: Callable[..., TensorTree],
        solve: LinearSolver,
        argnums: tuple[int, ...],
        flat_args: _FlatArguments,
        solution_treespec: pytree.PyTreeSpec,
    ) -> None:
        self.optimality_fn = optimality_fn
        self.solve = solve
        self.argnums = argnums
        self.flat_args = flat_args
        self.solution_treespec = solution_treespec

    def _residuals(
        self, outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor],
    ) -> tuple[TensorTree, Callable[[TensorTree], TensorTree], Callable[..., TensorTree],
               tuple[TensorTree, ...]]:
        """The solution, ``F(., theta)``, ``F(x, .)`` of the selected arguments, and those."""
        solution = pytree.tree_unflatten(self.solution_treespec, outputs)
        rest, kwargs = self.flat_args.rebuild(inputs)

        def residual_at(candidate: TensorTree) -> TensorTree:
            return self.optimality_fn(candidate, *rest, **kwargs)

        def residual_of(*selected: TensorTree) -> TensorTree:
            args = list(rest)
            for argnum, value in zip(self.argnums, selected, strict=True):
                args[argnum - 1] = value
            return self.optimality_fn(solution, *args, **kwargs)

        selected = tuple(rest[argnum - 1] for argnum in self.argnums)
        return solution, residual_at, residual_of, selected

    def vjp(self, outputs: Tensors, inputs: Tensors, cotangents: Tensors) -> list[Any]:
        """One gradient per tensor input (``None`` outside the arguments ``argnums``)."""
        solution, residual_at, residual_of, selected = self._residuals(outputs, inputs)
        _, residual_vjp = torch.func.vjp(residual_at, solution)
        cotangent = pytree.tree_unflatten(self.solution_treespec, cotangents)
        adjoint = self.solve(lambda u: residual_vjp(u)[0], pytree.tree_map(torch.neg, cotangent))
        _, args_vjp = torch.func.vjp(residual_of, *selected)
        return self.flat_args.scatter(self.argnums, args_vjp(adjoint))

    def jvp(self, outputs: Tensors, inputs: Tensors, tangents: Tensors) -> list[torch.Tensor]:
        """One tangent per solution leaf, from the tangents of the arguments ``argnums``."""
        solution, residual_at, residual_of, selected = self._residuals(outputs, inputs)
        _, b_tangent = torch.func.jvp(residual_of, selected,
                                      self.flat_args.gather(self.argnums, tangents))

        def matvec(v: TensorTree) -> TensorTree:
            return torch.func.jvp(residual_at, (solution,), (v,))[1]

        solution_tangent = self.solve(matvec, pytree.tree_map(torch.neg, b_tangent))
        return self.solution_treespec.flatten_up_to(solution_tangent)


def _normalize_argnums(argnums: int | Sequence[int]) -> tuple[int, ...]:
    """Validates ``argnums`` independently of the call: positive integers, the solution excluded."""
    normalized = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not normalized or not all(isinstance(i, int) and not isinstance(i, bool)
                                 for i in normalized):
        raise TypeError(f"argnums must be an int or a non-empty tuple of ints, got {argnums!r}.")
    if any(i <= 0 for i in normalized):
        raise ValueError(f"argnums must be positive, got {argnums!r}: argument 0 is the initial "
                         "guess of the solver, whose solution does not depend on it.")
    return tuple(sorted(set(normalized)))


def _check_call(argnums: tuple[int, ...], args: tuple[Any, ...], name: str) -> None:
    """Checks the selected arguments exist and are tensors or trees of tensors."""
    for argnum in argnums:
        if argnum >= len(args):
            raise ValueError(f"custom_root: argnums={argnum} is out of range for {name}, called "
                             f"with {len(args)} positional arguments (valid: 1..{len(args) - 1}).")
        leaves = pytree.tree_leaves(args[argnum], none_is_leaf=True)
        if not leaves or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
            raise TypeError(f"custom_root: argument {argnum} of {name}, selected by argnums, must "
                            f"be a tensor or a tree of tensors, got {type(args[argnum]).__name__}.")


def _check_residual(residual: TensorTree, solution: TensorTree) -> None:
    """Checks the optimality residual has one entry per element of the solution."""
    try:
        check_same_shapes(residual, solution, "the output of optimality_fn", "the solution")
    except ValueError as error:
        raise ValueError(f"custom_root: {error} The optimality function must return one "
                         "residual per element of the solution.") from None


def _check_optimality_signature(
    optimality_fn: Callable[..., TensorTree], args: tuple[Any, ...], kwargs: dict[str, Any],
) -> None:
    """Checks, without calling it, that ``optimality_fn(solution, *args[1:], **kwargs)`` binds."""
    try:
        signature = inspect.signature(optimality_fn)
    except (TypeError, ValueError):  # not introspectable (e.g. a builtin): checked when called
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as error:
        raise TypeError(f"custom_root: optimality_fn cannot be called as "
                        f"optimality_fn(solution, *args[1:], **kwargs) with the solver's "
                        f"arguments ({error}); give it the solver's signature.") from None


def _split_output(output: Any, has_aux: bool, name: str) -> tuple[Any, Any]:
    """``(solution, aux)`` from the solver's output, checking its form."""
    aux = None
    if has_aux:
        if not (isinstance(output, tuple) and len(output) == 2):
            raise TypeError(f"custom_root(has_aux=True): {name} must return a pair "
                            f"(solution, aux), got {type(output).__name__}.")
        output, aux = output
    leaves = pytree.tree_leaves(output, none_is_leaf=True)
    if not leaves or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        raise TypeError(f"custom_root: {name} must return a tensor or a tree of tensors, "
                        f"got {type(output).__name__}.")
    return output, aux


def _custom_root(
    solver_fn: Callable[..., Any],
    optimality_fn: Callable[..., TensorTree],
    solve: LinearSolver,
    argnums: tuple[int, ...],
    has_aux: bool,
) -> Callable[..., Any]:
    """Wraps ``solver_fn`` so that its solution is differentiated implicitly."""
    signature = inspect.signature(solver_fn)
    name = getattr(solver_fn, "__qualname__", "solver_fn")

    @functools.wraps(solver_fn)
    def wrapped_solver_fn(*args: Any, **kwargs: Any) -> Any:
        # Defaults are not applied: the solver's own options (say, a number of iterations)
        # are not passed on to optimality_fn unless the caller gives them.
        bound = signature.bind(*args, **kwargs)
        args, kwargs = bound.args, bound.kwargs
        _check_call(argnums, args, name)
        _check_optimality_signature(optimality_fn, args, kwargs)

        # The solver's iterations are not differentiated: the backward pass is implicit.
        with torch.no_grad():
            solution, aux = _split_output(solver_fn(*args, **kwargs), has_aux, name)
        solution_leaves, solution_treespec = pytree.tree_flatten(solution)
        flat_args = _FlatArguments(args, kwargs)
        if torch.is_grad_enabled() and any(t.requires_grad for t in flat_args.tensors()):
            # One evaluation, so that a residual not shaped like the solution fails here rather
            # than in backward. Only shapes are compared: no host synchronisation. An
            # optimality_fn that raises is left to backward, where TorchOpt first calls it: code
            # that never differentiates the solution must keep running.
            with torch.no_grad():
                try:
                    residual = optimality_fn(solution, *args[1:], **kwargs)
                except Exception:  # raised again by backward, if a gradient is ever asked for
                    residual = None
            if residual is not None:
                _check_residual(residual, solution)

        rule = _ImplicitRule(optimality_fn, solve, argnums, flat_args, solution_treespec)
        outputs = attach_vjp([leaf.detach() for leaf in solution_leaves], flat_args.tensors(),
                             rule.vjp, rule.jvp)
        solution = pytree.tree_unflatten(solution_treespec, outputs)
        return (solution, aux) if has_aux else solution

    return wrapped_solver_fn


def custom_root(
    optimality_fn: Callable[..., TensorTree],
    argnums: int | tuple[int, ...],
    has_aux: bool = False,
    solve: LinearSolver | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Returns a decorator that differentiates a root solver by the implicit function theorem.

    .. code-block:: python

        def optimality_fn(params, meta, data):
            return residual  # zero at the solution, one entry per element of params

        @custom_root(optimality_fn, argnums=1)
        def solver_fn(params, meta, data):
            ...  # any algorithm; it runs without autograd
            return optimal_params

        optimal_params = solver_fn(init_params, meta, data)  # differentiable w.r.t. meta

    The solver is called with gradient recording disabled and its output is detached; gradients
    with respect to the arguments ``argnums`` come from solving the linear system of the implicit
    function theorem with ``solve`` in the backward pass. ``optimality_fn`` is called as
    ``optimality_fn(solution, *args[1:], **kwargs)`` with the solver's bound arguments, so it
    should have the solver's signature. The wrapped solver composes with ``torch.func`` (``grad``,
    ``vmap``, ``jacrev``, ``jvp``, ``jacfwd``, ``hessian``) as long as the solver and the
    optimality function do; forward mode solves ``A x = b`` rather than ``A^T u = b`` with
    ``solve``, so pick a solver valid for both (``solve_normal_cg``, ``solve_inv``, or
    ``solve_cg`` when ``A`` is symmetric, e.g. the Hessian of an objective).

    Errors are raised rather than silently wrong gradients returned: at the call, ``argnums`` out
    of range and an optimality function that cannot take the solver's arguments or whose output
    is not structured like the solution (checked by one evaluation at the solution when a
    gradient may be requested); in backward, a linear solve that does not reach its tolerance.

    Args:
        optimality_fn: ``optimality_fn(params, *args, **kwargs)``, zero at the solution.
        argnums: The positions (in the solver's signature, the initial guess being 0) of the
            arguments to differentiate; each must be a tensor or a tree of tensors.
        has_aux: Whether the solver returns ``(solution, aux)``; ``aux`` is returned as is.
        solve: A linear solver ``solve(matvec, b)``; by default
            :func:`~torchopt_fn.linear_solve.solve_normal_cg`.

    Returns:
        A decorator ``custom_root(optimality_fn, argnums)(solver_fn)``.

    Raises:
        TypeError: If ``argnums`` is not an int or a tuple of ints.
        ValueError: If ``argnums`` selects the initial guess (0) or a negative position.
    """
    return functools.partial(
        _custom_root,
        optimality_fn=optimality_fn,
        solve=linear_solve.solve_normal_cg() if solve is None else solve,
        argnums=_normalize_argnums(argnums),
        has_aux=has_aux,
    )
