"""Differentiable approximations by stochastic perturbations (mirrors ``optax.perturbations``)."""

from optax_compat.perturbations._make_pert import Gumbel, Normal, make_perturbed_fun
