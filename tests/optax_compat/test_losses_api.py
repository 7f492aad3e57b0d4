"""optax_compat.losses has every public name of optax.losses, with Optax's signatures."""

from __future__ import annotations

import inspect

import optax.losses
import pytest

import optax_compat.losses

OPTAX_NAMES = sorted(n for n in dir(optax.losses) if not n.startswith("_")
                     and callable(getattr(optax.losses, n)))


def test_same_public_names():
    assert len(OPTAX_NAMES) == 32
    assert sorted(optax_compat.losses.__all__) == OPTAX_NAMES


@pytest.mark.parametrize("name", OPTAX_NAMES)
def test_same_signature(name):
    theirs = inspect.signature(getattr(optax.losses, name)).parameters.values()
    ours = inspect.signature(getattr(optax_compat.losses, name)).parameters.values()
    assert [(p.name, p.kind) for p in ours] == [(p.name, p.kind) for p in theirs]
    for their_param, our_param in zip(theirs, ours):
        if callable(their_param.default):  # jnp.mean -> torch.mean
            assert callable(our_param.default)
        else:
            assert our_param.default == their_param.default, their_param.name
