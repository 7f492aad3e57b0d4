"""A module whose ``solve`` method is differentiated implicitly w.r.t. its meta-parameters."""

from __future__ import annotations

import abc
import functools
import inspect
import itertools
from collections.abc import Callable, Iterable
from typing import Any

import torch

from torchopt_fn.diff.implicit.decorator import custom_root
from torchopt_fn.nn.module import MetaGradientModule
from torchopt_fn.nn.stateless import reparametrize, swap_state
from torchopt_fn.typing import LinearSolver, TupleOfTensors

__all__ = ["ImplicitMetaGradientModule"]


def _stateless_call(
    method: Callable[..., Any],
    flat_params: TupleOfTensors,
    flat_meta_params: TupleOfTensors,
    params_names: Iterable[str],
    meta_params_names: Iterable[str],
    self: ImplicitMetaGradientModule,
    /,
    *input: Any,
    **kwargs: Any,
) -> Any:
    """Calls ``method(self, *input, **kwargs)`` with the module's tensors replaced."""
    named_tensors = itertools.chain(zip(params_names, flat_params, strict=True),
                                    zip(meta_params_names, flat_meta_params, strict=True))
    with reparametrize(self, named_tensors):
        return method(self, *input, **kwargs)


def _stateless_optimality_fn(
    flat_params: TupleOfTensors,
    flat_meta_params: TupleOfTensors,
    params_names: Iterable[str],
    meta_params_names: Iterable[str],
    self: ImplicitMetaGradientModule,
    /,
    *input: Any,
    **kwargs: Any,
) -> TupleOfTensors:
    """The optimality residual as a function of the module's tensors."""
    return _stateless_call(type(self).optimality, flat_params, flat_meta_params, params_names,
                           meta_params_names, self, *input, **kwargs)


def _named_tensors(
    module: ImplicitMetaGradientModule,
) -> tuple[tuple[str, ...], TupleOfTensors, tuple[str, ...], TupleOfTensors]:
    """Names and values of the parameters and of the meta-parameters of the module."""
    named_params = tuple(module.named_parameters())
    named_meta_params = tuple(module.named_meta_parameters())
    if not named_params:
        raise RuntimeError("The module has no parameters.")
    if not named_meta_params:
        raise RuntimeError("The module has no meta-parameters.")
    params_names, flat_params = zip(*named_params, strict=True)
    meta_params_names, flat_meta_params = zip(*named_meta_params, strict=True)
    return params_names, flat_params, meta_params_names, flat_meta_params


def make_optimality_from_objective(
    cls: type[ImplicitMetaGradientModule],
) -> type[ImplicitMetaGradientModule]:
    """Defines ``cls.optimality`` as the gradient of ``cls.objective`` w.r.t. the parameters."""
    if inspect.getattr_static(cls, "objective") is inspect.getattr_static(
            ImplicitMetaGradientModule, "objective"):
        raise TypeError("The objective function is not defined.")
    objective = cls.objective

    def optimality(self: ImplicitMetaGradientModule, *input: Any, **kwargs: Any) -> TupleOfTensors:
        params_names, flat_params, meta_params_names, flat_meta_params = _named_tensors(self)
        objective_grad = torch.func.grad(functools.partial(_stateless_call, objective), argnums=0)
        return objective_grad(flat_params, flat_meta_params, params_names, meta_params_names,
                              self, *input, **kwargs)

    cls.optimality = optimality  # type: ignore[method-assign]
    return cls


def enable_implicit_gradients(
    cls: type[ImplicitMetaGradientModule],
) -> type[ImplicitMetaGradientModule]:
    """Wraps ``cls.solve`` so that the solved parameters are differentiable implicitly."""
    cls_solve = cls.solve
    if getattr(cls_solve, "__implicit_gradients_enabled__", False):
        raise TypeError("Implicit gradients are already enabled for the `solve` method.")
    solve_kwargs = {"solve": cls.linear_solve} if cls.linear_solve is not None else {}

    @custom_root(_stateless_optimality_fn, argnums=1, has_aux=True, **solve_kwargs)
    def stateless_solver_fn(
        flat_params: TupleOfTensors,
        flat_meta_params: TupleOfTensors,
        params_names: Iterable[str],
        meta_params_names: Iterable[str],
        self: ImplicitMetaGradientModule,
        /,
        *input: Any,
        **kwargs: Any,
    ) -> tuple[TupleOfTensors, Any]:
        del flat_params, flat_meta_params, params_names, meta_params_names
        output = cls_solve(self, *input, **kwargs)
        return tuple(p.detach_() for p in self.parameters()), output

    @functools.wraps(cls_solve)
    def solve(self: ImplicitMetaGradientModule, *input: Any, **kwargs: Any) -> Any:
        params_names, flat_params, meta_params_names, flat_meta_params = _named_tensors(self)
        flat_optimal_params, output = stateless_solver_fn(
            flat_params, flat_meta_params, params_names, meta_params_names, self,
            *input, **kwargs)
        swap_state(self, zip(params_names, flat_optimal_params, strict=True))
        return output

    solve.__implicit_gradients_enabled__ = True  # type: ignore[attr-defined]
    cls.solve = solve  # type: ignore[method-assign]
    return cls


def _check_method(cls: type, name: str) -> None:
    """Rejects a static, class or non-callable ``optimality``/``objective``."""
    method = inspect.getattr_static(cls, name)
    if isinstance(method, staticmethod):
        raise TypeError(f"method {name}() must not be a staticmethod.")
    if isinstance(method, classmethod):
        raise TypeError(f"method {name}() must not be a classmethod.")
    if not callable(method):
        raise TypeError(f"method {name}() must be callable.")


class ImplicitMetaGradientModule(MetaGradientModule, metaclass=abc.ABCMeta):
    """Base class for inner problems differentiated implicitly w.r.t. their meta-parameters.

    A subclass implements :meth:`solve` (any algorithm updating the module's parameters) and
    either :meth:`optimality` (a residual that vanishes at the solution) or :meth:`objective`
    (whose gradient w.r.t. the parameters is then the residual). After ``module.solve(...)`` the
    parameters are differentiable w.r.t. the meta-parameters (tensors requiring grad and modules
    passed to the constructor) through :func:`~torchopt_fn.diff.implicit.custom_root`. The linear
    solver is chosen with the class keyword ``linear_solve``::

        class InnerNet(ImplicitMetaGradientModule, linear_solve=solve_cg(maxiter=50)):
            ...
    """

    _custom_optimality: bool
    _custom_objective: bool
    linear_solve: LinearSolver | None

    def __init_subclass__(cls, linear_solve: LinearSolver | None = None) -> None:
        """Validates the subclass and wraps its ``solve`` method."""
        super().__init_subclass__()
        cls.linear_solve = linear_solve
        base = ImplicitMetaGradientModule
        cls._custom_optimality = (inspect.getattr_static(cls, "optimality")
                                  is not inspect.getattr_static(base, "optimality"))
        cls._custom_objective = (inspect.getattr_static(cls, "objective")
                                 is not inspect.getattr_static(base, "objective"))
        if cls._custom_optimality:
            _check_method(cls, "optimality")
        elif cls._custom_objective:
            _check_method(cls, "objective")
            make_optimality_from_objective(cls)
        else:
            raise TypeError("ImplicitMetaGradientModule requires either an optimality() method "
                            "or an objective() method")
        enable_implicit_gradients(cls)

    @abc.abstractmethod
    def solve(self, *input: Any, **kwargs: Any) -> Any:
        """Solves the inner problem by updating the module's parameters in place.

        It runs without gradient recording; use ``with torch.enable_grad():`` for gradient-based
        inner loops and differentiate w.r.t. the parameters only (``torch.autograd.grad`` or
        ``backward(inputs=...)``), not the meta-parameters.

        Returns:
            Anything (returned by the wrapped method as auxiliary output).
        """
        raise NotImplementedError

    def optimality(self, *input: Any, **kwargs: Any) -> TupleOfTensors:
        """The optimality residual: one tensor per parameter, zero at the solution.

        For example the gradient of the objective (KKT conditions), or ``f(x, theta) - x`` for a
        fixed point. Derived from :meth:`objective` if not implemented.
        """
        raise NotImplementedError

    def objective(self, *input: Any, **kwargs: Any) -> torch.Tensor:
        """The scalar objective of the inner problem (used to derive :meth:`optimality`)."""
        raise NotImplementedError
