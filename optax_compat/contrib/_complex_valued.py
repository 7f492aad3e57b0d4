"""Complex-valued optimisation by splitting complex tensors into real pairs.

Mirrors ``optax/contrib/_complex_valued.py``. :func:`split_real_and_imaginary` hands the
wrapped transformation a tree in which every complex leaf is replaced by a
:class:`SplitRealAndImaginaryArrays` pair of real tensors (views, nothing is copied), and
merges the transformed pairs back into complex updates; real leaves pass through. An optimizer
on complex params then behaves as on the two real params.

PyTorch's ``autograd`` already returns the conjugate Wirtinger gradient that descent needs on
complex params (JAX's ``grad`` returns its conjugate, which Optax users conjugate by hand).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

import torch

from optax_compat._runtime import tree_math as tm
from optax_compat._src import base


class SplitRealAndImaginaryArrays(NamedTuple):
    """The real and imaginary parts of a complex tensor, as two real tensors."""

    real: torch.Tensor
    imaginary: torch.Tensor


def _complex_to_real_pair(x: torch.Tensor) -> Any:
    """A :class:`SplitRealAndImaginaryArrays` for a complex ``x``; a real ``x`` is returned."""
    if isinstance(x, torch.Tensor) and x.is_complex():
        return SplitRealAndImaginaryArrays(x.real, x.imag)
    return x


def _real_pair_to_complex(x: Any) -> torch.Tensor:
    """The complex tensor of a :class:`SplitRealAndImaginaryArrays`; anything else is returned."""
    if isinstance(x, SplitRealAndImaginaryArrays):
        return torch.complex(x.real, x.imaginary)
    return x


def _is_pair(x: Any) -> bool:
    return isinstance(x, SplitRealAndImaginaryArrays)


class SplitRealAndImaginaryState(NamedTuple):
    """The state of the transformation wrapped by :func:`split_real_and_imaginary`."""

    inner_state: base.OptState


def split_real_and_imaginary(
    inner: base.GradientTransformation,
) -> base.GradientTransformation:
    """Runs ``inner`` on the real and imaginary parts of complex updates, as separate reals.

    Args:
      inner: the transformation to wrap; it sees :class:`SplitRealAndImaginaryArrays` pairs
        in place of complex leaves (in the updates, the params and therefore its state).

    Returns:
      A transformation with a :class:`SplitRealAndImaginaryState`; its updates are complex
      where the incoming updates are.

    Examples:
      >>> import torch
      >>> import optax_compat as optax
      >>> params = {"z": torch.tensor([1.0 + 2.0j])}
      >>> opt = optax.contrib.split_real_and_imaginary(optax.adam(0.1))
      >>> state = opt.init(params)
      >>> updates, state = opt.update({"z": torch.tensor([0.5 - 3.0j])}, state, params)
      >>> updates["z"]  # Adam on the real and the imaginary parts separately
      tensor([-0.1000+0.1000j])
    """

    def init_fn(params: base.Params) -> SplitRealAndImaginaryState:
        return SplitRealAndImaginaryState(inner.init(tm.tree_map(_complex_to_real_pair, params)))

    def update_fn(updates: base.Updates, state: SplitRealAndImaginaryState,
                  params: Optional[base.Params] = None):
        split_updates = tm.tree_map(_complex_to_real_pair, updates)
        split_params = tm.tree_map(_complex_to_real_pair, params)  # None stays None
        split_updates, inner_state = inner.update(split_updates, state.inner_state,
                                                  split_params)
        merged = tm.tree_map(_real_pair_to_complex, split_updates, is_leaf=_is_pair)
        return merged, SplitRealAndImaginaryState(inner_state)

    return base.GradientTransformation(init_fn, update_fn)
