"""Perturbed functions: statistical checks against exact expectations and against Optax."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch

from optax_compat import perturbations as pert
from optax_compat import tree_utils
from optax_compat.testing import assert_leaves_close, to_jax

NOISES = [pert.Gumbel, pert.Normal]


def one_hot_argmax(x: torch.Tensor) -> torch.Tensor:
    flat = x.reshape(-1)
    return torch.nn.functional.one_hot(flat.argmax(), flat.shape[0]).to(x.dtype).reshape(x.shape)


def softmax_jacobian(x: torch.Tensor, sigma: float) -> torch.Tensor:
    probabilities = torch.softmax(x / sigma, 0)
    return (torch.diag(probabilities) - torch.outer(probabilities, probabilities)) / sigma


@pytest.mark.parametrize("sigma", [0.5, 1.0])
def test_perturbed_argmax_is_softmax_in_expectation(sigma):
    # E[argmax(x + sigma * Gumbel)] = softmax(x / sigma), so the value and Jacobian are known.
    num_samples = 100_000
    x = torch.randn(8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    perturbed = pert.make_perturbed_fun(one_hot_argmax, num_samples, sigma)
    value = perturbed(0, x)
    probabilities = torch.softmax(x / sigma, 0)
    standard_error = (probabilities * (1 - probabilities) / num_samples).sqrt()
    assert ((value - probabilities).abs() <= 5 * standard_error + 1e-12).all()
    jacobian = torch.autograd.functional.jacobian(lambda x: perturbed(0, x), x)
    torch.testing.assert_close(jacobian, softmax_jacobian(x, sigma), atol=0.05, rtol=0)

    # A loss of the perturbed argmax: the chain rule through the estimated Jacobian.
    def loss(values):
        return (values**2 + torch.cos(values)).sum()

    x_grad = x.clone().requires_grad_()
    (ours,) = torch.autograd.grad(loss(perturbed(0, x_grad)), x_grad)
    x_exact = x.clone().requires_grad_()
    (exact,) = torch.autograd.grad(loss(torch.softmax(x_exact / sigma, 0)), x_exact)
    torch.testing.assert_close(ours, exact, atol=0.1, rtol=0)


def test_perturbed_argmax_on_a_tree():
    sigma = 1.0
    generator = torch.Generator().manual_seed(1)
    x = (torch.randn(4, generator=generator),
         {"k1": torch.randn(3, generator=generator), "k2": torch.randn(2, 1, generator=generator)})
    perturbed = pert.make_perturbed_fun(_argmax_tree, 50_000, sigma)
    value = perturbed(torch.Generator().manual_seed(2), x)
    expected = _argmax_tree_expectation(x, sigma)
    assert tree_utils.tree_allclose(value, expected, atol=0.02)


def _argmax_tree(tree):
    return (one_hot_argmax(tree[0]), {key: one_hot_argmax(leaf) for key, leaf in tree[1].items()})


def _argmax_tree_expectation(tree, sigma):
    def softmax(leaf):
        return torch.softmax(leaf.reshape(-1) / sigma, 0).reshape(leaf.shape)

    return (softmax(tree[0]), {key: softmax(leaf) for key, leaf in tree[1].items()})


@pytest.mark.parametrize("sigma", [0.5, 1.0])
def test_linear_function_value_and_jacobian(sigma):
    generator = torch.Generator().manual_seed(3)
    matrix = torch.randn(3, 2, generator=generator, dtype=torch.float64)
    offset = torch.randn(3, generator=generator, dtype=torch.float64)
    x = torch.randn(2, generator=generator, dtype=torch.float64)
    perturbed = pert.make_perturbed_fun(lambda x: matrix @ x + offset, 100_000, sigma,
                                        pert.Normal())
    value = perturbed(4, x)
    # The value's noise is sigma * matrix @ mean(z): a few standard errors at most.
    standard_error = sigma * matrix.norm(dim=1) / math.sqrt(100_000)
    assert ((value - (matrix @ x + offset)).abs() <= 5 * standard_error).all()
    jacobian = torch.autograd.functional.jacobian(lambda x: perturbed(4, x), x)
    torch.testing.assert_close(jacobian, matrix, atol=0.05, rtol=0)


OFFSET = 4.0


def differentiable_test_function(x):
    x0, x1, x2 = x[..., 0], x[..., 1], x[..., 2]
    y0 = x0 * x1**2 * torch.sin(x2 * x1 - x0) + torch.cos(x0**3)
    y1 = x2 + x0 * torch.sin(x1)
    return torch.stack([y0, y1], -1) + OFFSET  # the offset makes the baseline matter


@pytest.mark.parametrize("use_baseline", [True, False])
@pytest.mark.parametrize("noise", NOISES, ids=lambda cls: cls.__name__)
def test_jacobian_estimates_agree_with_optax_within_standard_errors(noise, use_baseline):
    """Both estimators, repeated over seeds: same mean and the same spread (variance)."""
    import jax
    import jax.numpy as jnp
    from optax import perturbations as optax_pert

    sigma, num_samples, repeats = 0.5, 4000, 12
    x = torch.tensor([0.3, 0.4, 0.5], dtype=torch.float64)
    ours_fn = pert.make_perturbed_fun(differentiable_test_function, num_samples, sigma,
                                      noise(), use_baseline)
    ours = np.stack([
        torch.autograd.functional.jacobian(lambda x, seed=seed: ours_fn(seed, x), x).numpy()
        for seed in range(repeats)])

    with jax.enable_x64(True):
        def jax_function(x):
            x0, x1, x2 = x
            return jnp.stack([x0 * x1**2 * jnp.sin(x2 * x1 - x0) + jnp.cos(x0**3),
                              x2 + x0 * jnp.sin(x1)]) + OFFSET

        theirs_fn = optax_pert.make_perturbed_fun(
            jax_function, num_samples, sigma, getattr(optax_pert, noise.__name__)(),
            use_baseline)
        jacobian = jax.jit(jax.jacobian(theirs_fn, argnums=1))
        theirs = np.stack([np.asarray(jacobian(jax.random.key(seed), to_jax(x)))
                           for seed in range(repeats)])
    # Against each other: the difference of the means within 5 standard errors.
    standard_error = np.sqrt(ours.var(0, ddof=1) / repeats + theirs.var(0, ddof=1) / repeats)
    assert (np.abs(ours.mean(0) - theirs.mean(0)) <= 5 * standard_error + 1e-3).all()
    # Same variance (the baseline changes it a lot, so this checks it is applied as in Optax).
    ratio = ours.std(0, ddof=1) / theirs.std(0, ddof=1)
    assert ((ratio > 0.35) & (ratio < 2.9)).all(), ratio
    # And against the derivative of the smoothed function, from direct sampling.
    generator = torch.Generator().manual_seed(5)
    z = noise().sample(generator, (200_000, 3), torch.float64)
    direct = torch.func.vmap(torch.func.jacrev(differentiable_test_function))(x + sigma * z)
    assert (np.abs(ours.mean(0) - direct.mean(0).numpy()) <= 5 * ours.std(0, ddof=1)
            / math.sqrt(repeats) + 0.02).all()


@pytest.mark.parametrize("sigma", [0.5, 1.0])
@pytest.mark.parametrize("noise", NOISES, ids=lambda cls: cls.__name__)
def test_hessian_of_quadratic(noise, sigma):
    def quadratic(x):
        return 0.5 * (x**2).sum()

    perturbed = pert.make_perturbed_fun(quadratic, 100_000, sigma, noise())
    hessian = torch.autograd.functional.hessian(lambda x: perturbed(0, x),
                                                torch.zeros(2, dtype=torch.float64))
    torch.testing.assert_close(hessian, torch.eye(2, dtype=torch.float64), atol=0.1, rtol=0)


class _NoDerivative(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        raise AssertionError("the derivative of fun must not be used")


def test_derivative_of_fun_is_not_used():
    perturbed = pert.make_perturbed_fun(_NoDerivative.apply, 10)
    x = torch.tensor(0.0, requires_grad=True)
    (grad,) = torch.autograd.grad(perturbed(0, x), x)
    assert torch.isfinite(grad)


def test_non_flat_shape_and_generator_keys():
    perturbed = pert.make_perturbed_fun(lambda x: x[0, 0], 10)
    x = torch.ones(1, 2, requires_grad=True)
    (grad,) = torch.autograd.grad(perturbed(torch.Generator().manual_seed(0), x), x)
    assert grad.shape == (1, 2) and torch.isfinite(grad).all()


def test_function_that_cannot_be_vectorised_gives_the_same_numbers():
    def with_item(x):  # Python control flow on a value: not vmappable
        return x.sum() if x.sum().item() > 0 else -x.sum()

    def vectorised(x):
        return torch.where(x.sum() > 0, x.sum(), -x.sum())

    x = torch.tensor([0.1, -0.05, 0.02], dtype=torch.float64)
    for use_baseline in (True, False):
        loop = pert.make_perturbed_fun(with_item, 50, 0.3, pert.Normal(), use_baseline)
        vmapped = pert.make_perturbed_fun(vectorised, 50, 0.3, pert.Normal(), use_baseline)
        torch.testing.assert_close(loop(7, x), vmapped(7, x))
        torch.testing.assert_close(
            torch.autograd.functional.jacobian(lambda x, f=loop: f(7, x), x),
            torch.autograd.functional.jacobian(lambda x, f=vmapped: f(7, x), x))


def test_values_on_tree_grow_with_distance():
    """A loss that is zero at a reference tree is smaller near it than at a random tree."""
    reference = [{"weights": torch.ones(13, 4), "biases": torch.ones(13)},
                 {"weights": torch.ones(8, 13), "biases": torch.ones(8)}]
    element = torch.tensor([1.0, 2.0, 3.0, 4.0])

    def predict(tree):
        hidden = tree[0]["weights"] @ element + tree[0]["biases"]
        return tree[1]["weights"] @ hidden + tree[1]["biases"]

    def loss(tree):
        return ((predict(tree) - predict(reference)) ** 2).mean()

    perturbed = pert.make_perturbed_fun(loss, num_samples=100, sigma=0.1, noise=pert.Normal())
    low = perturbed(0, reference)
    high = perturbed(2, tree_utils.tree_random_like(1, reference))
    assert low < high


def test_same_seed_same_estimate_and_value_without_gradient():
    perturbed = pert.make_perturbed_fun(one_hot_argmax, 100, sigma=1.0)
    x = 0.1 * torch.randn(5, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(perturbed(3, x), perturbed(3, x))
    assert not torch.equal(perturbed(3, x), perturbed(4, x))
    assert perturbed(3, x).sum().item() == pytest.approx(1.0)


@pytest.mark.parametrize("noise", NOISES, ids=lambda cls: cls.__name__)
def test_noise_moments_dtype_and_log_prob(noise):
    import jax.numpy as jnp
    from optax import perturbations as optax_pert

    distribution = noise()
    samples = distribution.sample(0, (200_000,), torch.float64)
    assert samples.dtype == torch.float64 and samples.shape == (200_000,)
    assert distribution.sample(0, (2, 3)).dtype == torch.get_default_dtype()
    assert distribution.sample(0).shape == ()
    torch.testing.assert_close(distribution.sample(5, (4,)), distribution.sample(5, (4,)))
    mean, variance = {"Gumbel": (0.5772156649, math.pi**2 / 6), "Normal": (0.0, 1.0)}[
        noise.__name__]
    assert abs(samples.mean().item() - mean) < 5 * math.sqrt(variance / 200_000)
    assert abs(samples.var().item() / variance - 1) < 0.03
    assert torch.isfinite(samples).all()
    points = torch.linspace(-3, 3, 13, dtype=torch.float64)
    theirs = getattr(optax_pert, noise.__name__)().log_prob(jnp.asarray(points.numpy()))
    assert_leaves_close(distribution.log_prob(points), theirs)
    with pytest.raises(TypeError, match="dtype"):
        distribution.sample(0, (2,), torch.int32)


def test_signatures_match_optax():
    from optax import perturbations as optax_pert

    def params(fn):
        return [(p.name, p.kind, p.default if p.default is inspect.Parameter.empty
                 else repr(type(p.default)) if p.name == "noise" else p.default)
                for p in inspect.signature(fn).parameters.values()]

    def names(value):
        return value.replace("optax_compat.perturbations._make_pert", "X").replace(
            "optax.perturbations._make_pert", "X")

    ours, theirs = params(pert.make_perturbed_fun), params(optax_pert.make_perturbed_fun)
    assert [(n, k, names(str(d))) for n, k, d in ours] == [
        (n, k, names(str(d))) for n, k, d in theirs]
    for cls in ("Gumbel", "Normal"):
        for method in ("sample", "log_prob"):
            ours = inspect.signature(getattr(getattr(pert, cls), method)).parameters
            theirs = inspect.signature(getattr(getattr(optax_pert, cls), method)).parameters
            assert [(p.name, p.kind, p.default) for p in ours.values()] == [
                (p.name, p.kind, p.default) for p in theirs.values()]


def test_bad_input_errors():
    with pytest.raises(ValueError, match="num_samples"):
        pert.make_perturbed_fun(one_hot_argmax, 0)
    perturbed = pert.make_perturbed_fun(one_hot_argmax, 10)
    with pytest.raises(TypeError, match=r"\['a'\]"):
        perturbed(0, {"a": torch.tensor([1, 2])})
    with pytest.raises(TypeError, match="key"):
        perturbed(0.5, torch.zeros(3))


def test_custom_noise_is_sampled_per_sample_with_each_leaf_shape_as_optax():
    """Optax's protocol: ``sample(key, leaf.shape, dtype)`` once per sample and leaf."""
    import jax
    import optax

    class Recording:
        def __init__(self, draw):
            self.draw, self.shapes = draw, []

        def sample(self, key, sample_shape=(), dtype=float):
            self.shapes.append(tuple(sample_shape))
            return self.draw(key, sample_shape, dtype)

        def log_prob(self, inputs):
            self.shapes.append(("log_prob", tuple(inputs.shape)))
            return -0.5 * inputs**2

    fun = lambda tree: tree["a"].sum() + tree["b"].sum()
    ours_noise = Recording(lambda key, shape, dtype: torch.randn(shape, dtype=dtype))
    pert.make_perturbed_fun(fun, num_samples=3, noise=ours_noise)(
        0, {"a": torch.zeros(2, 3), "b": torch.zeros(4)})
    theirs_noise = Recording(jax.random.normal)
    optax.perturbations.make_perturbed_fun(fun, num_samples=3, noise=theirs_noise)(
        jax.random.key(0), {"a": jax.numpy.zeros((2, 3)), "b": jax.numpy.zeros(4)})
    # JAX traces each call once under vmap; the calls are per sample with the leaf's shape.
    assert sorted(set(ours_noise.shapes), key=str) == sorted(set(theirs_noise.shapes), key=str)
    assert ours_noise.shapes.count((2, 3)) == 3 and ours_noise.shapes.count((4,)) == 3
