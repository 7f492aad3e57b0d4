"""Euclidean projections onto convex sets (mirrors ``optax.projections``)."""

from optax_compat.projections._projections import (
    projection_box,
    projection_halfspace,
    projection_hypercube,
    projection_hyperplane,
    projection_l1_ball,
    projection_l1_sphere,
    projection_l2_ball,
    projection_l2_sphere,
    projection_linf_ball,
    projection_non_negative,
    projection_simplex,
    projection_vector,
)
