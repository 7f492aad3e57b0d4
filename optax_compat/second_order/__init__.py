"""Deprecated second-order utilities (mirrors ``optax.second_order``)."""

from optax_compat.second_order._deprecated import fisher_diag, hessian_diag, hvp
