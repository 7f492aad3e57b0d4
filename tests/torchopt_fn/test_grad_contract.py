"""torch.optim's contract for every optimizer class we ship: ``step()`` reads ``.grad``, never
writes it.

Each optimizer steps ``k`` times on the same ``.grad`` tensors (no backward in between, as
after one ``backward`` and several ``step`` calls); every gradient must stay the very tensor it
was, bit for bit, and the parameters must match ``k`` steps of ``torch.optim`` (the
``torchopt_fn`` classes) or of the transformation's pure update (``TorchOptimizer`` over every
Optax alias). Each memory layout a parameter can have is its own parameter group, so that a
group of packed tensors takes the fused kernels where they run and the others the multi-tensor
and per-operation paths.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import optax_compat
import torchopt_fn as torchopt
from optax_compat.testing import assert_trees_all_close
from optax_compat.testing.strategies import hyperparameters, tensors
from tests.torchopt_fn.test_optim import CASES, IDS

_SIDES = st.integers(2, 3)


def _shape(layout: str) -> st.SearchStrategy[tuple[int, ...]]:
    """Logical shapes of a ``layout``: large enough that the layout differs from the packed
    one (a transposed or channels-last tensor with a side of 1 is packed as well)."""
    if layout == "zero_d":
        return st.just(())
    if layout == "channels_last":
        return st.tuples(st.integers(1, 2), _SIDES, _SIDES, st.integers(1, 2))
    return st.tuples(_SIDES, _SIDES)


def _laid_out(layout: str, value: torch.Tensor) -> torch.Tensor:
    """A fresh tensor equal to ``value`` with the memory layout ``layout``."""
    if layout == "transposed":
        return value.t().contiguous().t()
    if layout == "strided":  # every other column of a wider buffer
        rows, columns = value.shape
        return value.new_zeros(rows, 2 * columns)[:, ::2].copy_(value)
    if layout == "channels_last":
        return value.contiguous(memory_format=torch.channels_last)
    return value.clone()


# Parameter groups by layout: the packed tensors may take the fused kernels, the others not.
GROUPS = (("contiguous", "zero_d"), ("transposed", "strided", "channels_last"))

Drawn = list[list[tuple[str, torch.Tensor, torch.Tensor]]]


def _draw_groups(data: st.DataObject, dtype: torch.dtype,
                 groups: Sequence[Sequence[str]] = GROUPS) -> Drawn:
    """Per group, one ``(layout, param value, grad value)`` per layout, values in ``[-5, 5]``.

    The values of an example are one drawn tensor, split: one draw, not one per tensor.
    """
    shapes = [[(layout, data.draw(_shape(layout), label=layout)) for layout in group]
              for group in groups]
    sizes = [math.prod(shape) for group in shapes for _, shape in group for _ in "pg"]
    values = iter(data.draw(tensors((sum(sizes),), dtype, min_value=-5.0, max_value=5.0),
                            label="values").split(sizes))
    return [[(layout, next(values).reshape(shape), next(values).reshape(shape))
             for layout, shape in group] for group in shapes]


def _parameters(drawn: Drawn) -> list[list[torch.nn.Parameter]]:
    """The drawn parameters in their layouts, each with its gradient in the same layout."""
    groups = []
    for group in drawn:
        params = []
        for layout, value, grad in group:
            param = torch.nn.Parameter(_laid_out(layout, value))
            param.grad = _laid_out(layout, grad)
            assert (layout in ("contiguous", "zero_d")) == param.is_contiguous(), layout
            params.append(param)
        groups.append(params)
    return groups


def _steps_keep_gradients(optimizer: torch.optim.Optimizer,
                          groups: list[list[torch.nn.Parameter]], steps: int,
                          closure: Callable[[], Any] | None = None) -> None:
    """Steps ``optimizer`` ``steps`` times and checks that every ``.grad`` is the tensor it
    was, with its values and strides."""
    params = [p for group in groups for p in group]
    grads = [p.grad for p in params]
    copies = [(g.clone(), g.stride()) for g in grads]
    for _ in range(steps):
        optimizer.step(closure)
        for p, grad, (copy, stride) in zip(params, grads, copies, strict=True):
            assert p.grad is grad
            assert grad.stride() == stride
            assert torch.equal(grad, copy), f"step() wrote into a {tuple(grad.shape)} .grad"


def _assert_params_close(actual: list[list[torch.Tensor]],
                         expected: list[list[torch.Tensor]]) -> None:
    assert_trees_all_close([[p.detach() for p in group] for group in actual],
                           [[p.detach() for p in group] for group in expected])


_SETTINGS = settings(max_examples=4, suppress_health_check=[HealthCheck.function_scoped_fixture])
STEPS = st.integers(1, 3)
DTYPES = st.sampled_from([torch.float32, torch.float64])


@pytest.mark.parametrize(("ours", "theirs", "kwargs"), CASES, ids=IDS)
@_SETTINGS
@given(data=st.data(), steps=STEPS, dtype=DTYPES)
def test_torchopt_fn_steps_read_grads_and_match_torch_optim(ours, theirs, kwargs, data, steps,
                                                            dtype, device):
    drawn = _draw_groups(data, dtype)
    with torch.device(device):
        groups, reference = _parameters(drawn), _parameters(drawn)
    optimizer = ours([{"params": group} for group in groups], **kwargs)
    _steps_keep_gradients(optimizer, groups, steps)
    torch_kwargs = {k: v for k, v in kwargs.items() if k != "use_accelerated_op"}
    reference_optimizer = theirs([{"params": group} for group in reference], **torch_kwargs)
    for _ in range(steps):
        reference_optimizer.step()
    _assert_params_close(groups, reference)


def _functional_steps(tx: optax_compat.GradientTransformation, drawn: Drawn, steps: int,
                      device: torch.device, **extra_args: Any) -> list[list[torch.Tensor]]:
    """``steps`` pure updates of each drawn group by its gradients."""
    results = []
    for group in drawn:
        params = tuple(value.to(device) for _, value, _ in group)
        grads = tuple(grad.to(device) for _, _, grad in group)
        state = tx.init(params)
        for _ in range(steps):
            updates, state = tx.update(grads, state, params, **extra_args)
            params = optax_compat.apply_updates(params, updates)
        results.append(list(params))
    return results


@pytest.mark.parametrize("impl", [
    functools.partial(torchopt.adam, 1e-2, weight_decay=0.1),
    functools.partial(torchopt.chain, torchopt.clip_grad_norm(1.0), torchopt.sgd(0.1, 0.9)),
    functools.partial(optax_compat.adamw, 1e-2),
], ids=["adam", "chain", "optax_compat.adamw"])
@_SETTINGS
@given(data=st.data(), steps=STEPS, dtype=DTYPES)
def test_torchopt_fn_optimizer_reads_grads(impl, data, steps, dtype, device):
    drawn = _draw_groups(data, dtype)
    with torch.device(device):
        groups = _parameters(drawn)
    optimizer = torchopt.Optimizer([{"params": group} for group in groups], impl())
    _steps_keep_gradients(optimizer, groups, steps)
    _assert_params_close(groups, _functional_steps(optimizer.tx, drawn, steps, device))


# Every alias of Optax's ``alias`` module; ``lbfgs`` is left out: its line search needs the
# loss as a function (``value_fn``), which torch.optim's ``step(closure)`` does not give.
ALIASES = ["adabelief", "adadelta", "adafactor", "adagrad", "adam", "adamax", "adamaxw",
           "adamw", "adan", "amsgrad", "fromage", "lamb", "lars", "lion", "nadam", "nadamw",
           "noisy_sgd", "novograd", "optimistic_adam", "optimistic_adam_v2",
           "optimistic_gradient_descent", "polyak_sgd", "radam", "rmsprop", "rprop", "sgd",
           "sign_sgd", "signum", "sm3", "yogi"]
# SM3 keeps one accumulator per dimension: a 0-d parameter has none (Optax refuses it).
_WITHOUT_SCALARS = {"sm3"}
LOSS = 2.0  # the closure's loss, read by polyak_sgd


def test_aliases_are_those_of_optax_alias_module():
    from optax_compat._src import alias

    # Functions defined there, and partial applications of them (nadam, nadamw).
    public = {name for name, value in vars(alias).items()
              if not name.startswith("_") and callable(value) and name.islower()
              and getattr(getattr(value, "func", value), "__module__", None) == alias.__name__}
    assert public - {"lbfgs"} == set(ALIASES)


@pytest.mark.filterwarnings("ignore:`optimistic_adam` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("inplace", [False, True], ids=["pure", "inplace"])
@pytest.mark.parametrize("name", ALIASES)
@_SETTINGS
@given(data=st.data(), steps=STEPS, dtype=DTYPES)
def test_torch_optimizer_reads_grads(name, inplace, data, steps, dtype, device):
    tx = getattr(optax_compat, name)(**data.draw(hyperparameters(name), label="kwargs"))
    drawn = _draw_groups(data, dtype, [[layout for layout in group if not (
        name in _WITHOUT_SCALARS and layout == "zero_d")] for group in GROUPS])
    with torch.device(device):
        groups = _parameters(drawn)
    optimizer = optax_compat.TorchOptimizer([{"params": group} for group in groups], tx,
                                            inplace=inplace)
    _steps_keep_gradients(optimizer, groups, steps, closure=lambda: LOSS)
    _assert_params_close(groups, _functional_steps(tx, drawn, steps, device, value=LOSS))
