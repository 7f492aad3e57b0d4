"""Experimental modules (mirrors ``optax.experimental``)."""

from optax_compat.experimental import _aggregating as aggregating

__all__ = [
    "aggregating",
]
