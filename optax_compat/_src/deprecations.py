"""Names still resolved with a ``DeprecationWarning`` (mirrors ``optax/_src/deprecations.py``).

A module lists its deprecated names in a ``_deprecations`` dict ``{name: (message, value)}`` and
sets ``__getattr__ = deprecation_getattr(__name__, _deprecations)``: the names resolve with
Optax's warning text and stay out of ``dir()``, as in Optax. A ``None`` value means the name is
gone and raises ``AttributeError`` with the message.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any


def deprecation_getattr(module: str,
                        deprecations: Mapping[str, tuple[str, Any]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` resolving ``deprecations`` with a ``DeprecationWarning``."""

    def getattr_(name: str) -> Any:
        if name in deprecations:
            message, value = deprecations[name]
            if value is None:
                raise AttributeError(message)
            warnings.warn(message, DeprecationWarning, stacklevel=2)
            return value
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return getattr_
