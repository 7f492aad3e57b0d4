"""The one switch that plays the role of JAX's ``jax_enable_x64``.

JAX computes in 32 bits unless ``jax_enable_x64`` is set: with it off (the default) a Python
number, a Python-int step count and every schedule value are ``float32``; with it on they are
``float64``. Optax's numbers and dtypes depend on that flag, so this package has the same flag,
off by default as in JAX. Set it where a JAX program would set ``jax_enable_x64``::

    optax_compat.config.update("jax_enable_x64", True)     # "enable_x64" works too
    with optax_compat.config.enable_x64():                # for a block, like
        ...                                               # jax.enable_x64()

Float64 tensors work in either mode (PyTorch has no global 32-bit mode); the switch decides only
what JAX's default precision decides: the dtype of values made from Python numbers and counts
(schedules, ``inject_hyperparams``, dtype arguments written ``float``), and hence the rounding of
hyper-parameters that Optax rounds in its default precision. Run float32 programs with it off
and float64 programs with it on, as JAX users do.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

_NAMES = ("jax_enable_x64", "enable_x64")


class Config:
    """Global settings of :mod:`optax_compat` (``optax_compat.config``)."""

    def __init__(self) -> None:
        self._x64 = False

    @property
    def jax_enable_x64(self) -> bool:
        """Whether 64-bit mode is on (JAX's ``jax.config.jax_enable_x64``)."""
        return self._x64

    def update(self, name: str, value: bool) -> None:
        """Sets a flag, as ``jax.config.update``: ``"jax_enable_x64"`` (or ``"enable_x64"``).

        Raises:
          AttributeError: for an unknown flag name.
        """
        if name not in _NAMES:
            raise AttributeError(f"Unrecognized config option: {name!r} (known: {_NAMES}).")
        self._x64 = bool(value)

    @contextlib.contextmanager
    def enable_x64(self, new_val: bool = True) -> Iterator[None]:
        """Sets 64-bit mode inside a ``with`` block (``jax.enable_x64``)."""
        previous, self._x64 = self._x64, bool(new_val)
        try:
            yield
        finally:
            self._x64 = previous


config = Config()
