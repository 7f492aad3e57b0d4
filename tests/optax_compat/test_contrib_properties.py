"""Properties of the contrib momo, reduce_on_plateau, schedule_free, mechanize, sam and sophia
transformations: no host sync, differentiable, in-place requests, tensor hyperparameters."""

import optax
import pytest
import torch

import optax_compat as ox
from optax_compat._runtime import tree_math
from optax_compat.contrib import (
    _mechanic,
    _momo,
    _reduce_on_plateau,
    _sam,
    _schedule_free,
    _sophia,
)
from optax_compat.testing import compare_with_optax, jit_optax, make_tree


def _squared_gradients():
    """A deterministic stand-in for the Hessian estimator (the random one seeds on the host)."""
    return ox.stateless(lambda updates, params: ox.tree_utils.tree_mul(updates, updates))


CASES = {
    "momo": lambda: _momo.momo(0.5, weight_decay=0.1, adapt_lower_bound=True),
    "momo_adam": lambda: _momo.momo_adam(0.5, weight_decay=0.1, adapt_lower_bound=True),
    "reduce_on_plateau": lambda: _reduce_on_plateau.reduce_on_plateau(patience=1, cooldown=1),
    "schedule_free_adamw": lambda: _schedule_free.schedule_free_adamw(0.1, warmup_steps=2),
    # Not adam: its fused-kernel path reads the step count on the host.
    "mechanize": lambda: _mechanic.mechanize(ox.sgd(1.0, momentum=0.9)),
    "sam": lambda: _sam.sam(ox.sgd(0.1), ox.chain(_sam.normalize(), ox.sgd(0.05))),
    "sophia": lambda: _sophia.sophia(0.1, update_interval=2,
                                     hessian_diagonal_fn=_squared_gradients()),
}
NEEDS_VALUE = {"momo", "momo_adam", "reduce_on_plateau"}


def _extra_args(name, step):
    return {"value": torch.tensor(2.0 - 0.1 * step)} if name in NEEDS_VALUE else {}


@pytest.mark.parametrize("name", list(CASES))
def test_update_does_not_read_tensors_on_the_host(name, monkeypatch):
    tx = CASES[name]()
    params = make_tree()
    state = tx.init(params)

    def refuse(self, *args):
        raise AssertionError("host sync in update")

    for method in ("__bool__", "item", "__int__", "__float__"):
        monkeypatch.setattr(torch.Tensor, method, refuse)
    for step in range(3):
        updates, state = tx.update(make_tree(seed=step + 1), state, params,
                                   **_extra_args(name, step))
        params = ox.apply_updates(params, updates)
    monkeypatch.undo()
    assert all(torch.isfinite(x).all() for x in tree_math.leaves(params))


def _gradient_through_two_steps(name):
    tx = CASES[name]()
    initial = make_tree(torch.float64)
    leaf = initial["layer"]["w"].requires_grad_()
    params, state = initial, tx.init(initial)
    for step in range(2):
        grads = ox.tree_utils.tree_scale(2.0, params)  # the gradient of |params|^2
        extra_args = {k: v.double() for k, v in _extra_args(name, step).items()}
        updates, state = tx.update(grads, state, params, **extra_args)
        params = ox.apply_updates(params, updates)
    (gradient,) = torch.autograd.grad(params["layer"]["w"].sum(), leaf)
    return gradient


@pytest.mark.parametrize("name", [name for name in CASES if name != "mechanize"])
def test_updates_are_differentiable_with_respect_to_the_initial_params(name):
    assert torch.isfinite(_gradient_through_two_steps(name)).all()


def test_mechanize_gradient_is_nan_as_in_optax():
    # Mechanic's first step has h = 0 and takes sqrt(h ** 2): JAX's gradient through two
    # Optax steps is NaN as well (checked with jax.grad), so this is Optax's behaviour.
    assert torch.isnan(_gradient_through_two_steps("mechanize")).all()


@pytest.mark.parametrize("name", ["mechanize", "sam", "sophia", "schedule_free_adamw"])
def test_a_forwarded_inplace_request_gives_the_pure_numbers(name):
    # Chains (and torchopt_fn) forward ``inplace=True`` to wrappers; the wrappers that read
    # their inputs again, or may keep an old inner state, must still compute the pure result.
    def adam_based(tx_name):
        if tx_name == "mechanize":
            return _mechanic.mechanize(ox.adam(1.0))
        if tx_name == "sam":
            return _sam.sam(ox.adam(0.1), ox.chain(_sam.normalize(), ox.adam(0.05)))
        if tx_name == "sophia":
            return _sophia.sophia(0.1, update_interval=2,
                                  hessian_diagonal_fn=_squared_gradients())
        return CASES[tx_name]()

    params = make_tree()
    pure_tx, inplace_tx = adam_based(name), adam_based(name)
    pure_state, inplace_state = pure_tx.init(params), inplace_tx.init(params)
    for step in range(3):
        pure_updates, pure_state = pure_tx.update(make_tree(seed=step + 1), pure_state, params)
        inplace_updates, inplace_state = inplace_tx.update(make_tree(seed=step + 1),
                                                           inplace_state, params, inplace=True)
        torch.testing.assert_close(inplace_updates, pure_updates, rtol=0, atol=0)
        params = ox.apply_updates(params, pure_updates)


def _hyperparameter():
    return torch.tensor(0.5, dtype=torch.float64, requires_grad=True)


TENSOR_HYPERPARAMETER_CASES = {
    "momo": (lambda h: _momo.momo(h, beta=0.8, weight_decay=h * 0.2, adapt_lower_bound=True),
             lambda: optax.contrib.momo(0.5, beta=0.8, weight_decay=0.1,
                                        adapt_lower_bound=True)),
    "momo_adam": (lambda h: _momo.momo_adam(h, b1=h + 0.3, b2=h + 0.4, eps=h * 2e-3,
                                            weight_decay=h * 0.2, adapt_lower_bound=True),
                  lambda: optax.contrib.momo_adam(0.5, b1=0.8, b2=0.9, eps=1e-3,
                                                  weight_decay=0.1, adapt_lower_bound=True)),
    "mechanize": (lambda h: _mechanic.mechanize(ox.sgd(1.0), weight_decay=h * 0.2,
                                                s_init=h * 2e-3),
                  lambda: optax.contrib.mechanize(optax.sgd(1.0), weight_decay=0.1,
                                                  s_init=1e-3)),
    "schedule_free": (lambda h: _schedule_free.schedule_free(ox.sgd(0.1), h * 0.2,
                                                             b1=h + 0.3, weight_lr_power=h * 3),
                      lambda: optax.contrib.schedule_free(optax.sgd(0.1), 0.1, b1=0.8,
                                                          weight_lr_power=1.5)),
    "sophia": (lambda h: _sophia.sophia(h * 0.2, b1=h + 0.4, b2=h + 0.4, eps=h * 2e-3,
                                        gamma=h, clip_threshold=h * 2, update_interval=1,
                                        hessian_diagonal_fn=_squared_gradients()),
               lambda: optax.contrib.sophia(
                   0.1, b1=0.9, b2=0.9, eps=1e-3, gamma=0.5, clip_threshold=1.0,
                   update_interval=1,
                   hessian_diagonal_fn=optax.stateless(lambda u, p: optax.tree.mul(u, u)))),
}


@pytest.mark.parametrize("name", list(TENSOR_HYPERPARAMETER_CASES))
def test_float64_tensor_hyperparameters_match_optax_keep_float32_and_are_differentiable(name):
    ours, theirs = TENSOR_HYPERPARAMETER_CASES[name]
    hyperparameter = _hyperparameter()
    tx = ours(hyperparameter)
    extra_args = (lambda step: {"value": torch.tensor(2.0 - 0.2 * step)}) if (
        name.startswith("momo")) else None
    compare_with_optax(tx, lambda: jit_optax(theirs()), torch.float32, steps=3,
                       extra_args=extra_args)
    params, state = make_tree(), tx.init(make_tree())
    for step in range(2):
        updates, state = tx.update(make_tree(seed=step + 1), state, params,
                                   **(extra_args(step) if extra_args else {}))
        params = ox.apply_updates(params, updates)
    floating = [x for x in tree_math.leaves((updates, state)) if x.is_floating_point()]
    assert all(x.dtype == torch.float32 for x in floating)
    (gradient,) = torch.autograd.grad(params["layer"]["w"].sum(), hyperparameter)
    # Mechanic's gradient is NaN in Optax too (see test_mechanize_gradient_is_nan_as_in_optax).
    assert torch.isfinite(gradient) or (name == "mechanize" and torch.isnan(gradient))


@pytest.mark.parametrize("name", ["momo", "momo_adam", "schedule_free_adamw", "mechanize",
                                  "sophia"])
def test_a_state_for_other_params_is_rejected_naming_the_path(name):
    tx = CASES[name]()
    state = tx.init({"a": torch.ones(2)})
    params = {"b": torch.ones(2)}
    with pytest.raises(ValueError, match=r"key 'a'|key 'b'"):
        tx.update(params, state, params, **_extra_args(name, 0))
