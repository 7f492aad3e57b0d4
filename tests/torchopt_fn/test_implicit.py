"""Implicit differentiation: hypergradients against closed forms and unrolled optimization."""

import copy

import pytest
import torch
from torch import nn

from torchopt_fn import linear_solve
from torchopt_fn.diff.implicit import ImplicitMetaGradientModule
from torchopt_fn.diff.implicit.decorator import custom_root

DTYPE = torch.float64
TOL = 1e-6


def _ridge_data(seed: int = 0, n: int = 20, d: int = 5):
    gen = torch.Generator().manual_seed(seed)
    data = {name: torch.randn(shape, generator=gen, dtype=DTYPE)
            for name, shape in [("x", (n, d)), ("y", (n,)), ("x_val", (n // 2, d)),
                                ("y_val", (n // 2,))]}
    return data


DATA = _ridge_data()
D = DATA["x"].shape[1]


def ridge_optimality(w, lam, x, y):
    """Gradient of 0.5 ||x w - y||^2 + 0.5 lam ||w||^2."""
    return x.T @ (x @ w - y) + lam * w


def ridge_closed_form(lam, x, y):
    return torch.linalg.solve(x.T @ x + lam * torch.eye(x.shape[1], dtype=DTYPE), x.T @ y)


def validation_loss(w):
    return 0.5 * (DATA["x_val"] @ w - DATA["y_val"]).square().sum()


def _ns_step() -> float:
    hessian = DATA["x"].T @ DATA["x"] + 2.0 * torch.eye(D, dtype=DTYPE)
    return float(1.0 / torch.linalg.eigvalsh(hessian).max())


SOLVERS = {
    "solve_cg": lambda: linear_solve.solve_cg(rtol=1e-12),
    "solve_normal_cg": lambda: linear_solve.solve_normal_cg(rtol=1e-12),
    "solve_inv": lambda: linear_solve.solve_inv(),
    "solve_inv_ns": lambda: linear_solve.solve_inv(ns=True, maxiter=3000, alpha=_ns_step()),
}


def _ridge_solver(solve):
    @custom_root(ridge_optimality, argnums=1, solve=solve)
    def solver(w0, lam, x, y):
        # Any algorithm works; gradient descent shows that its iterations are not differentiated.
        w = w0
        step = 1.0 / float(torch.linalg.eigvalsh(x.T @ x).max() + lam)
        for _ in range(2000):
            w = w - step * ridge_optimality(w, lam, x, y)
        return w

    return solver


@pytest.mark.parametrize("solver_name", sorted(SOLVERS))
def test_ridge_hypergradient_matches_closed_form(solver_name):
    solver = _ridge_solver(SOLVERS[solver_name]())
    lam = torch.tensor(2.0, dtype=DTYPE, requires_grad=True)
    expected = torch.autograd.grad(validation_loss(ridge_closed_form(lam, DATA["x"], DATA["y"])),
                                   lam)[0]

    solution = solver(torch.zeros(D, dtype=DTYPE), lam, DATA["x"], DATA["y"])
    torch.testing.assert_close(solution, ridge_closed_form(lam, DATA["x"], DATA["y"]).detach(),
                               rtol=0, atol=1e-10)
    (hypergradient,) = torch.autograd.grad(validation_loss(solution), lam)
    assert abs(float(hypergradient - expected)) < TOL
    assert abs(float(expected)) > 1e-3  # a non-trivial gradient


def test_ridge_with_tree_solution_and_unpenalized_scalar_bias():
    """A dict solution whose leaves are coupled (weights and a 0-d bias)."""
    x, y = DATA["x"], DATA["y"]

    def optimality(params, lam):
        residual = x @ params["w"] + params["b"] - y
        return {"w": x.T @ residual + lam * params["w"], "b": residual.sum()}

    def closed_form(lam):
        features = torch.cat([x, torch.ones(len(x), 1, dtype=DTYPE)], dim=1)
        penalty = torch.diag(torch.cat([lam.expand(D), torch.zeros(1, dtype=DTYPE)]))
        solution = torch.linalg.solve(features.T @ features + penalty, features.T @ y)
        return {"w": solution[:D], "b": solution[D]}

    def loss(params):
        return 0.5 * (DATA["x_val"] @ params["w"] + params["b"] - DATA["y_val"]).square().sum()

    lam = torch.tensor(0.7, dtype=DTYPE, requires_grad=True)
    expected = torch.autograd.grad(loss(closed_form(lam)), lam)[0]
    for solve in (linear_solve.solve_cg(rtol=1e-12), linear_solve.solve_inv()):
        solver = custom_root(optimality, argnums=1, solve=solve)(
            lambda init, lam: {k: v.detach() for k, v in closed_form(lam).items()})
        init = {"w": torch.zeros(D, dtype=DTYPE), "b": torch.zeros((), dtype=DTYPE)}
        (hypergradient,) = torch.autograd.grad(loss(solver(init, lam)), lam)
        assert abs(float(hypergradient - expected)) < TOL


def test_scalar_parameter_gets_the_right_gradient():
    """TorchOpt issue #222: a 0-d system got maxiter = 0 CG iterations and a zero gradient."""

    def optimality(x, theta):
        return x + x**3 - theta

    @custom_root(optimality, argnums=1)  # default solver: solve_normal_cg
    def solver(x, theta):
        for _ in range(50):  # Newton's method
            x = x - optimality(x, theta) / (1 + 3 * x**2)
        return x

    theta = torch.tensor(2.0, dtype=DTYPE, requires_grad=True)
    root = solver(torch.tensor(0.0, dtype=DTYPE), theta)
    assert abs(float(root.detach()) - 1.0) < 1e-12
    (gradient,) = torch.autograd.grad(root, theta)
    assert abs(float(gradient) - 1 / (1 + 3 * float(root.detach()) ** 2)) < 1e-10


VMAP_SOLVERS = {  # Under vmap CG runs all of maxiter iterations (masked once converged).
    "solve_cg": lambda: linear_solve.solve_cg(rtol=1e-12, maxiter=3 * D),
    "solve_normal_cg": lambda: linear_solve.solve_normal_cg(rtol=1e-12, maxiter=3 * D),
    "solve_inv": lambda: linear_solve.solve_inv(),
}


@pytest.mark.parametrize("solver_name", sorted(VMAP_SOLVERS))
def test_vmap_over_a_batch_of_inner_problems(solver_name):
    solver = custom_root(ridge_optimality, argnums=1, solve=VMAP_SOLVERS[solver_name]())(
        lambda w0, lam, x, y: ridge_closed_form(lam, x, y))

    def outer(lam):
        return validation_loss(solver(torch.zeros(D, dtype=DTYPE), lam, DATA["x"], DATA["y"]))

    lams = torch.tensor([0.1, 1.0, 3.0, 10.0], dtype=DTYPE)
    batched = torch.func.vmap(torch.func.grad(outer))(lams)
    expected = torch.func.vmap(torch.func.grad(
        lambda lam: validation_loss(ridge_closed_form(lam, DATA["x"], DATA["y"]))))(lams)
    torch.testing.assert_close(batched, expected, rtol=0, atol=TOL)

    # Batched data too: one problem per (x, y) pair, and the Jacobian by jacrev (vmap inside).
    xs = torch.stack([DATA["x"], 2 * DATA["x"]])
    ys = torch.stack([DATA["y"], -DATA["y"]])
    jac = torch.func.vmap(torch.func.jacrev(
        lambda lam, x, y: solver(torch.zeros(D, dtype=DTYPE), lam, x, y)), in_dims=(None, 0, 0))(
            torch.tensor(1.5, dtype=DTYPE), xs, ys)
    expected_jac = torch.func.vmap(torch.func.jacrev(ridge_closed_form), in_dims=(None, 0, 0))(
        torch.tensor(1.5, dtype=DTYPE), xs, ys)
    torch.testing.assert_close(jac, expected_jac, rtol=0, atol=TOL)


@pytest.mark.parametrize("solver_name", sorted(VMAP_SOLVERS))
def test_forward_mode_and_second_order_derivatives(solver_name):
    solver = custom_root(ridge_optimality, argnums=1, solve=VMAP_SOLVERS[solver_name]())(
        lambda w0, lam, x, y: ridge_closed_form(lam, x, y))

    def implicit(lam):
        return solver(torch.zeros(D, dtype=DTYPE), lam, DATA["x"], DATA["y"])

    def explicit(lam):
        return ridge_closed_form(lam, DATA["x"], DATA["y"])

    lam = torch.tensor(1.5, dtype=DTYPE)
    torch.testing.assert_close(torch.func.jacfwd(implicit)(lam), torch.func.jacfwd(explicit)(lam),
                               rtol=0, atol=TOL)
    _, tangent = torch.func.jvp(implicit, (lam,), (torch.tensor(2.0, dtype=DTYPE),))
    torch.testing.assert_close(tangent, 2 * torch.func.jacfwd(explicit)(lam), rtol=0, atol=TOL)

    # The derivative rules are themselves differentiable: the solution's dependence on lam is
    # accounted for when the gradient is differentiated again.
    expected = torch.func.hessian(lambda lam: validation_loss(explicit(lam)))(lam)
    torch.testing.assert_close(torch.func.hessian(lambda lam: validation_loss(implicit(lam)))(lam),
                               expected, rtol=0, atol=TOL)
    lam = lam.clone().requires_grad_()
    (gradient,) = torch.autograd.grad(validation_loss(implicit(lam)), lam, create_graph=True)
    (second,) = torch.autograd.grad(gradient, lam)
    torch.testing.assert_close(second, expected, rtol=0, atol=TOL)


def test_vmap_marks_non_converged_linear_solves_with_nan():
    solver = custom_root(ridge_optimality, argnums=1, solve=linear_solve.solve_cg(maxiter=1))(
        lambda w0, lam, x, y: ridge_closed_form(lam, x, y))
    outer = torch.func.grad(lambda lam: validation_loss(
        solver(torch.zeros(D, dtype=DTYPE), lam, DATA["x"], DATA["y"])))
    assert torch.isnan(torch.func.vmap(outer)(torch.tensor([1.0, 2.0], dtype=DTYPE))).all()


def test_tuple_solution_keyword_arguments_and_aux():
    def optimality(params, lam, *, x, y):
        w, scale = params
        return ridge_optimality(w, lam, x, y), scale - 2 * lam

    @custom_root(optimality, argnums=1, has_aux=True, solve=linear_solve.solve_inv())
    def solver(params, lam, *, x, y):
        return (ridge_closed_form(lam, x, y), 2 * lam), {"iterations": 0}

    lam = torch.tensor(1.3, dtype=DTYPE, requires_grad=True)
    init = (torch.zeros(D, dtype=DTYPE), torch.zeros((), dtype=DTYPE))
    (w, scale), aux = solver(init, lam, x=DATA["x"], y=DATA["y"])
    assert aux == {"iterations": 0}
    (gradient,) = torch.autograd.grad(validation_loss(w) + scale, lam)
    expected = torch.autograd.grad(
        validation_loss(ridge_closed_form(lam, DATA["x"], DATA["y"])) + 2 * lam, lam)[0]
    assert abs(float(gradient - expected)) < TOL


def test_multiple_argnums_and_tree_arguments():
    def optimality(w, hyper, x, y):
        return x.T @ (x @ w - y) + hyper["lam"] * (w - hyper["center"])

    def closed_form(hyper, x, y):
        lam, center = hyper["lam"], hyper["center"]
        return torch.linalg.solve(x.T @ x + lam * torch.eye(D, dtype=DTYPE), x.T @ y + lam * center)

    solver = custom_root(optimality, argnums=(1, 3), solve=linear_solve.solve_cg(rtol=1e-12))(
        lambda w, hyper, x, y: closed_form(hyper, x, y))
    hyper = {"lam": torch.tensor(0.5, dtype=DTYPE, requires_grad=True),
             "center": torch.randn(D, dtype=DTYPE, requires_grad=True)}
    y = DATA["y"].clone().requires_grad_()
    inputs = [hyper["lam"], hyper["center"], y]
    grads = torch.autograd.grad(validation_loss(solver(torch.zeros(D, dtype=DTYPE), hyper,
                                                       DATA["x"], y)), inputs)
    expected = torch.autograd.grad(validation_loss(closed_form(hyper, DATA["x"], y)), inputs)
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, rtol=0, atol=TOL)


# ------------------------------------------------------------------------------------------------
# Bad input.


def test_argnums_selecting_the_initial_guess_or_negative_is_rejected():
    with pytest.raises(ValueError, match="argnums"):
        custom_root(ridge_optimality, argnums=0)
    with pytest.raises(ValueError, match="argnums"):
        custom_root(ridge_optimality, argnums=(1, -1))
    with pytest.raises(TypeError, match="argnums"):
        custom_root(ridge_optimality, argnums="lam")


def test_argnums_out_of_range_is_rejected_at_the_call():
    solver = custom_root(ridge_optimality, argnums=4)(
        lambda w0, lam, x, y: ridge_closed_form(lam, x, y))
    with pytest.raises(ValueError, match="out of range"):
        solver(torch.zeros(D, dtype=DTYPE), torch.tensor(1.0, dtype=DTYPE), DATA["x"], DATA["y"])


def test_argnums_selecting_a_non_tensor_is_rejected():
    solver = custom_root(lambda w, lam, name: w - lam, argnums=2)(lambda w, lam, name: lam)
    with pytest.raises(TypeError, match="tensor"):
        solver(torch.zeros(()), torch.ones(()), "not a tensor")


@pytest.mark.parametrize("bad_output", ["shape", "structure"])
def test_optimality_output_not_matching_the_solution_raises(bad_output):
    def optimality(w, lam, x, y):
        residual = ridge_optimality(w, lam, x, y)
        return residual[:-1] if bad_output == "shape" else (residual,)

    solver = custom_root(optimality, argnums=1)(lambda w0, lam, x, y: ridge_closed_form(lam, x, y))
    lam = torch.tensor(1.0, dtype=DTYPE, requires_grad=True)
    with pytest.raises(ValueError, match="optimality_fn"):
        solver(torch.zeros(D, dtype=DTYPE), lam, DATA["x"], DATA["y"])
    # Without anything to differentiate the optimality function is not evaluated.
    solver(torch.zeros(D, dtype=DTYPE), lam.detach(), DATA["x"], DATA["y"])


def test_non_convergent_linear_solve_raises_instead_of_a_wrong_gradient():
    solver = custom_root(ridge_optimality, argnums=1, solve=linear_solve.solve_cg(maxiter=2))(
        lambda w0, lam, x, y: ridge_closed_form(lam, x, y))
    lam = torch.tensor(1.0, dtype=DTYPE, requires_grad=True)
    loss = validation_loss(solver(torch.zeros(D, dtype=DTYPE), lam, DATA["x"], DATA["y"]))
    with pytest.raises(RuntimeError, match="did not converge"):
        torch.autograd.grad(loss, lam)


def test_solver_options_stay_with_the_solver_and_signatures_are_checked():
    @custom_root(ridge_optimality, argnums=1, solve=linear_solve.solve_inv())
    def solver(w0, lam, x, y, iterations=3):  # `iterations` is not passed to optimality_fn
        return ridge_closed_form(lam, x, y)

    lam = torch.tensor(1.0, dtype=DTYPE, requires_grad=True)
    torch.autograd.grad(validation_loss(solver(torch.zeros(D), lam, DATA["x"], DATA["y"])), lam)
    with pytest.raises(TypeError, match="optimality_fn cannot be called"):
        solver(torch.zeros(D), lam, DATA["x"], DATA["y"], 5)


def test_solver_output_is_checked():
    solver = custom_root(ridge_optimality, argnums=1, has_aux=True)(
        lambda w0, lam, x, y: ridge_closed_form(lam, x, y))
    with pytest.raises(TypeError, match="pair"):
        solver(torch.zeros(D, dtype=DTYPE), torch.tensor(1.0, dtype=DTYPE), DATA["x"], DATA["y"])
    solver = custom_root(ridge_optimality, argnums=1)(lambda w0, lam, x, y: "done")
    with pytest.raises(TypeError, match="tensor"):
        solver(torch.zeros(D, dtype=DTYPE), torch.tensor(1.0, dtype=DTYPE), DATA["x"], DATA["y"])


# ------------------------------------------------------------------------------------------------
# iMAML: implicit meta-gradient against unrolled inner optimization.

INNER_REG = 2.0
INNER_LR = 0.1
INNER_STEPS = 200


def _task(seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 3, generator=gen, dtype=DTYPE)
    y = torch.sin(x @ torch.tensor([1.0, -2.0, 0.5], dtype=DTYPE)).unsqueeze(-1)
    x_val = torch.randn(8, 3, generator=gen, dtype=DTYPE)
    y_val = torch.sin(x_val @ torch.tensor([1.0, -2.0, 0.5], dtype=DTYPE)).unsqueeze(-1)
    return x, y, x_val, y_val


def _make_net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)).to(DTYPE)


def _inner_loss(net, params, meta_params, x, y):
    prediction = torch.func.functional_call(net, params, (x,))
    proximal = sum((params[k] - meta_params[k]).square().sum() for k in params)
    return (prediction - y).square().mean() + 0.5 * INNER_REG * proximal


def _unrolled_meta_gradient(net, meta_params, task):
    x, y, x_val, y_val = task
    params = dict(meta_params)
    for _ in range(INNER_STEPS):
        grads = torch.autograd.grad(_inner_loss(net, params, meta_params, x, y),
                                    tuple(params.values()), create_graph=True)
        params = {k: p - INNER_LR * g for (k, p), g in zip(params.items(), grads)}
    val = (torch.func.functional_call(net, params, (x_val,)) - y_val).square().mean()
    return torch.autograd.grad(val, tuple(meta_params.values())), params


def test_imaml_functional_matches_unrolled_optimization():
    net, task = _make_net(), _task()
    x, y, x_val, y_val = task
    meta_params = {k: v.detach().clone().requires_grad_() for k, v in net.named_parameters()}
    unrolled, unrolled_params = _unrolled_meta_gradient(net, meta_params, task)

    def optimality(params, meta, x, y):
        return torch.func.grad(_inner_loss, argnums=1)(net, params, meta, x, y)

    @custom_root(lambda p, m, x, y: optimality(p, m, x, y), argnums=1,
                 solve=linear_solve.solve_cg(rtol=1e-12))
    def inner_solve(params, meta, x, y):
        for _ in range(INNER_STEPS):
            grads = optimality(params, meta, x, y)
            params = {k: params[k] - INNER_LR * grads[k] for k in params}
        return params

    params = inner_solve({k: v.detach() for k, v in meta_params.items()}, meta_params, x, y)
    for k in params:
        torch.testing.assert_close(params[k], unrolled_params[k].detach(), rtol=0, atol=1e-10)
    val = (torch.func.functional_call(net, params, (x_val,)) - y_val).square().mean()
    implicit = torch.autograd.grad(val, tuple(meta_params.values()))
    difference = max(float((a - b).abs().max()) for a, b in zip(implicit, unrolled))
    assert difference < 1e-8
    assert max(float(g.abs().max()) for g in implicit) > 1e-3


class _InnerNet(ImplicitMetaGradientModule, linear_solve=linear_solve.solve_cg(rtol=1e-12)):
    def __init__(self, meta_net: nn.Module) -> None:
        super().__init__()
        self.meta_net = meta_net
        self.net = copy.deepcopy(meta_net)

    def forward(self, x):
        return self.net(x)

    def objective(self, x, y):
        proximal = sum((p - m).square().sum()
                       for p, m in zip(self.parameters(), self.meta_parameters()))
        return (self.net(x) - y).square().mean() + 0.5 * INNER_REG * proximal

    def solve(self, x, y):
        params = tuple(self.parameters())
        optimizer = torch.optim.SGD(params, lr=INNER_LR)
        with torch.enable_grad():
            for _ in range(INNER_STEPS):
                optimizer.zero_grad()
                self.objective(x, y).backward(inputs=params)
                optimizer.step()
        return "solved"


def test_imaml_module_matches_unrolled_optimization():
    meta_net, task = _make_net(), _task()
    x, y, x_val, y_val = task
    meta_params = dict(meta_net.named_parameters())
    unrolled, _ = _unrolled_meta_gradient(meta_net, meta_params, task)

    inner = _InnerNet(meta_net)
    assert {n for n, _ in inner.named_meta_parameters()} == {f"meta_net.{n}" for n in meta_params}
    assert {n for n, _ in inner.named_parameters()} == {f"net.{n}" for n in meta_params}
    assert inner.solve(x, y) == "solved"
    val = (inner(x_val) - y_val).square().mean()
    implicit = torch.autograd.grad(val, tuple(meta_net.parameters()))
    difference = max(float((a - b).abs().max()) for a, b in zip(implicit, unrolled))
    assert difference < 1e-8


def test_implicit_module_with_a_custom_optimality():
    class Ridge(ImplicitMetaGradientModule, linear_solve=linear_solve.solve_inv()):
        def __init__(self, lam):
            super().__init__()
            self.lam = lam
            self.w = nn.Parameter(torch.zeros(D, dtype=DTYPE))

        def optimality(self, x, y):
            return (ridge_optimality(self.w, self.lam, x, y),)

        def solve(self, x, y):
            self.w.copy_(ridge_closed_form(self.lam, x, y))

    lam = torch.tensor(2.0, dtype=DTYPE, requires_grad=True)
    model = Ridge(lam)
    assert list(model.meta_parameters()) == [lam]
    model.solve(DATA["x"], DATA["y"])
    (hypergradient,) = torch.autograd.grad(validation_loss(model.w), lam)
    expected = torch.autograd.grad(validation_loss(ridge_closed_form(lam, DATA["x"], DATA["y"])),
                                   lam)[0]
    assert abs(float(hypergradient - expected)) < TOL


def test_implicit_module_definition_errors():
    with pytest.raises(TypeError, match="optimality"):
        class Neither(ImplicitMetaGradientModule):
            def solve(self):
                pass

    with pytest.raises(TypeError, match="staticmethod"):
        class Static(ImplicitMetaGradientModule):
            @staticmethod
            def objective():
                pass

            def solve(self):
                pass
