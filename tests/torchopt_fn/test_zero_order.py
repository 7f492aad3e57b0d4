"""Zero-order gradient estimators: unbiasedness and variance on functions of known gradient."""

import math

import pytest
import torch
from torch import nn

import torchopt_fn.diff as diff
from torchopt_fn.diff.zero_order import ZeroOrderGradientModule, zero_order

DTYPE = torch.float64
METHODS = ("naive", "forward", "antithetic")
NUM_ESTIMATES = 1000
SIGMA = 0.5
# With a fixed seed each check is deterministic; 4 standard errors leave room for the
# 2 x 3 x 2 coordinates checked while still catching a bias of a few percent (TorchOpt's
# sigma**2-scaled 'forward' estimate is off by 75% here).
MAX_STANDARD_ERRORS = 4.0

Q = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=DTYPE)
C = torch.tensor([1.0, -1.0], dtype=DTYPE)
X = torch.tensor([0.3, -0.7], dtype=DTYPE)


def quadratic(x):
    return 0.5 * x @ Q @ x + C @ x + 3.0


def sines(x):
    return torch.sin(x).sum() + 3.0


# Gradients of the Gaussian-smoothed functions E[f(x + sigma eps)]: a quadratic's is its own, a
# sine's is damped by exp(-sigma^2 / 2).
FUNCTIONS = {
    "quadratic": (quadratic, Q @ X + C),
    "sines": (sines, math.exp(-SIGMA**2 / 2) * torch.cos(X)),
}


def _normal():
    zero, one = torch.tensor(0.0, dtype=DTYPE), torch.tensor(1.0, dtype=DTYPE)
    return torch.distributions.Normal(zero, one)


def _estimates(fn, method, seed=0, distribution=None, num_samples=1):
    torch.manual_seed(seed)
    estimator = zero_order(distribution or _normal(), method=method, num_samples=num_samples,
                           sigma=SIGMA)(fn)
    x = X.clone().requires_grad_()
    return torch.stack([torch.autograd.grad(estimator(x), x)[0] for _ in range(NUM_ESTIMATES)])


@pytest.mark.parametrize("function", sorted(FUNCTIONS))
def test_each_method_is_unbiased_and_antithetic_has_lower_variance(function):
    fn, true_gradient = FUNCTIONS[function]
    variances = {}
    for method in METHODS:
        estimates = _estimates(fn, method)
        standard_error = estimates.std(0) / math.sqrt(NUM_ESTIMATES)
        z_scores = (estimates.mean(0) - true_gradient) / standard_error
        assert z_scores.abs().max() < MAX_STANDARD_ERRORS, (method, z_scores)
        variances[method] = estimates.var(0).sum()
    assert variances["antithetic"] < 0.5 * variances["naive"]
    assert variances["forward"] < 0.5 * variances["naive"]


def test_value_is_the_function_value_and_sampling_functions_work():
    estimator = zero_order(lambda shape: torch.randn(shape, dtype=DTYPE), method="antithetic",
                           num_samples=400, sigma=SIGMA)(quadratic)
    x = X.clone().requires_grad_()
    value = estimator(x)
    assert float(value.detach()) == pytest.approx(float(quadratic(X)))
    torch.manual_seed(0)
    (gradient,) = torch.autograd.grad(3 * value, x)  # the cotangent scales the estimate
    torch.testing.assert_close(gradient, 3 * (Q @ X + C), rtol=0.15, atol=0.15)


def test_callable_module_tree_arguments_and_several_argnums():
    def loss(params, scale, bias):
        return scale * (params["a"].square().sum() + params["b"].sum()) + bias

    estimator = diff.zero_order(_normal(), method="antithetic", argnums=(0, 2),
                                num_samples=4000, sigma=0.1)(loss)
    params = {"a": torch.tensor([1.0, -2.0], dtype=DTYPE, requires_grad=True),
              "b": torch.ones(3, dtype=DTYPE, requires_grad=True)}
    bias = torch.tensor(0.5, dtype=DTYPE, requires_grad=True)
    scale = torch.tensor(2.0, dtype=DTYPE, requires_grad=True)
    torch.manual_seed(1)
    grad_a, grad_b, grad_bias = torch.autograd.grad(estimator(params, scale, bias),
                                                    [params["a"], params["b"], bias])
    # Each coordinate's standard error is |true gradient| / sqrt(4000) = sqrt(93 / 4000) ~ 0.15.
    tolerance = dict(rtol=0, atol=4 * 0.153)
    torch.testing.assert_close(grad_a, 4 * params["a"].detach(), **tolerance)
    torch.testing.assert_close(grad_b, torch.full((3,), 2.0, dtype=DTYPE), **tolerance)
    torch.testing.assert_close(grad_bias, torch.tensor(1.0, dtype=DTYPE), **tolerance)
    # scale is not in argnums: no gradient flows to it.
    assert torch.autograd.grad(estimator(params, scale, bias), scale, allow_unused=True)[0] is None


class LinearPolicy(ZeroOrderGradientModule, method="antithetic", num_samples=200, sigma=0.1):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([0.5, -1.0, 2.0], dtype=DTYPE))
        self.distribution = _normal()

    def forward(self, x):
        return (x @ self.weight).square().mean()

    def sample(self, sample_shape=torch.Size()):
        return self.distribution.sample(sample_shape)


def test_zero_order_gradient_module():
    torch.manual_seed(0)
    policy = LinearPolicy()
    x = torch.randn(10, 3, dtype=DTYPE)
    loss = policy(x)
    loss.backward()
    true_gradient = 2 * x.T @ (x @ policy.weight.detach()) / len(x)
    torch.testing.assert_close(policy.weight.grad, true_gradient, rtol=0.2, atol=0.2)
    torch.testing.assert_close(loss.detach(), (x @ policy.weight.detach()).square().mean())


def test_bad_input():
    with pytest.raises(ValueError, match="method"):
        zero_order(_normal(), method="central")
    with pytest.raises(ValueError, match="num_samples"):
        zero_order(_normal(), num_samples=0)
    with pytest.raises(ValueError, match="sigma"):
        zero_order(_normal(), sigma=0.0)
    with pytest.raises(TypeError, match="distribution"):
        zero_order(42)
    with pytest.raises(RuntimeError, match="scalar"):
        zero_order(_normal())(lambda x: x * 2)(X)
    with pytest.raises(ValueError, match="out of range"):
        zero_order(_normal(), argnums=3)(quadratic)(X)
    batched = torch.distributions.Normal(torch.zeros(2, dtype=DTYPE), torch.ones(2, dtype=DTYPE))
    x = X.clone().requires_grad_()
    with pytest.raises(ValueError, match="shape"):
        zero_order(batched)(quadratic)(x).backward()
