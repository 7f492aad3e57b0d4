"""Second-order utilities: the same numbers as Optax, deprecation warnings, differentiability."""

from __future__ import annotations

import inspect

import pytest
import torch

from optax_compat import second_order
from optax_compat.testing import assert_leaves_close, jax_precision, to_jax

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

DTYPES = [torch.float32, torch.float64]


def problem(dtype):
    generator = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(shape, generator=generator, dtype=dtype)

    params = {"layer": {"w": randn(3, 2), "b": randn(2)}, "scale": randn()}
    return params, randn(5, 3), randn(5, 2)


def torch_loss(params, inputs, targets):
    layer = params["layer"]
    predictions = params["scale"] * torch.tanh(inputs @ layer["w"] + layer["b"])
    return ((predictions - targets) ** 2).mean()


def jax_loss(params, inputs, targets):
    import jax.numpy as jnp

    layer = params["layer"]
    predictions = params["scale"] * jnp.tanh(inputs @ layer["w"] + layer["b"])
    return ((predictions - targets) ** 2).mean()


def optax_second_order():
    from optax import second_order as optax_second_order

    return optax_second_order


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_hessian_diag_and_fisher_diag_match_optax(dtype):
    params, inputs, targets = problem(dtype)
    with jax_precision(dtype):
        theirs = optax_second_order()
        arguments = to_jax((params, inputs, targets))
        assert_leaves_close(second_order.hessian_diag(torch_loss, params, inputs, targets),
                            theirs.hessian_diag(jax_loss, *arguments), what="hessian_diag")
        assert_leaves_close(second_order.fisher_diag(torch_loss, params, inputs, targets),
                            theirs.fisher_diag(jax_loss, *arguments), what="fisher_diag")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_hvp_matches_optax_and_is_a_tree(dtype):
    params, inputs, targets = problem(dtype)
    v = torch.randn(9, generator=torch.Generator().manual_seed(1), dtype=dtype)
    ours = second_order.hvp(torch_loss, v, params, inputs, targets)
    with jax_precision(dtype):
        theirs = optax_second_order().hvp(jax_loss, *to_jax((v, params, inputs, targets)))
        assert_leaves_close(ours, theirs, what="hvp")
    assert ours["layer"]["w"].shape == (3, 2) and ours["scale"].shape == ()


def test_against_the_full_hessian():
    params, inputs, targets = problem(torch.float64)
    # Leaves in flattening order (sorted keys): layer.b, layer.w, scale.
    flat = torch.cat([params["layer"]["b"], params["layer"]["w"].reshape(-1),
                      params["scale"].reshape(1)])

    def flat_loss(vector):
        tree = {"layer": {"b": vector[:2], "w": vector[2:8].reshape(3, 2)}, "scale": vector[8]}
        return torch_loss(tree, inputs, targets)

    hessian = torch.autograd.functional.hessian(flat_loss, flat)
    torch.testing.assert_close(second_order.hessian_diag(torch_loss, params, inputs, targets),
                               hessian.diagonal())
    v = torch.randn(9, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    product = second_order.hvp(torch_loss, v, params, inputs, targets)
    torch.testing.assert_close(
        torch.cat([product["layer"]["b"], product["layer"]["w"].reshape(-1),
                   product["scale"].reshape(1)]), hessian @ v)
    gradient = torch.autograd.functional.jacobian(flat_loss, flat)
    torch.testing.assert_close(second_order.fisher_diag(torch_loss, params, inputs, targets),
                               gradient**2)


def test_module_through_functional_call():
    model = torch.nn.Linear(3, 2).double()
    params = dict(model.named_parameters())
    inputs = torch.randn(4, 3, dtype=torch.float64)
    targets = torch.randn(4, 2, dtype=torch.float64)

    def loss(params, inputs, targets):
        return ((torch.func.functional_call(model, params, (inputs,)) - targets) ** 2).sum()

    diagonal = second_order.hessian_diag(loss, params, inputs, targets)
    # A linear least-squares loss: the diagonal is 2 * (number of examples) for biases and
    # 2 * sum(x_i^2) for each weight (flattening order: bias, weight).
    expected = torch.cat([torch.full((2,), 8.0, dtype=torch.float64),
                          (2 * (inputs**2).sum(0)).repeat(2)])
    torch.testing.assert_close(diagonal, expected)


def test_results_are_differentiable():
    params, inputs, targets = problem(torch.float64)
    params = {"layer": {key: value.clone().requires_grad_()
                        for key, value in params["layer"].items()},
              "scale": params["scale"].clone().requires_grad_()}
    total = second_order.hessian_diag(torch_loss, params, inputs, targets).sum()
    total = total + second_order.fisher_diag(torch_loss, params, inputs, targets).sum()
    grads = torch.autograd.grad(total, [params["layer"]["w"], params["scale"]])
    assert all(torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)


@pytest.mark.parametrize("name", ["hvp", "hessian_diag", "fisher_diag"])
def test_deprecation_warning_and_signature(name):
    params, inputs, targets = problem(torch.float32)
    args = (torch.ones(9),) if name == "hvp" else ()
    with pytest.warns(DeprecationWarning, match=f"{name} is deprecated"):
        getattr(second_order, name)(torch_loss, *args, params, inputs, targets)
    ours = inspect.signature(getattr(second_order, name)).parameters
    theirs = inspect.signature(getattr(optax_second_order(), name)).parameters
    assert [(p.name, p.kind, p.default) for p in ours.values()] == [
        (p.name, p.kind, p.default) for p in theirs.values()]


def test_bad_input_errors():
    params, inputs, targets = problem(torch.float32)
    with pytest.raises(ValueError, match="9 elements"):
        second_order.hvp(torch_loss, torch.ones(8), params, inputs, targets)
    with pytest.raises(TypeError, match="scale"):
        second_order.fisher_diag(torch_loss, {**params, "scale": torch.tensor(1)}, inputs,
                                 targets)
