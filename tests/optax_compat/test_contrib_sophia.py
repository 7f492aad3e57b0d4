"""sophia and hutchinson_estimator_diag_hessian against real Optax (exact on separable
objectives, whose Hessian is diagonal) and statistically."""

import threading

import jax
import jax.numpy as jnp
import optax
import pytest
import torch

import optax_compat as ox
from optax_compat._runtime import tree_math
from optax_compat.contrib import _sophia
from optax_compat.testing import (
    assert_leaves_close,
    assert_same_state_types,
    jax_precision,
    make_tree,
    to_jax,
)


def _torch_objective(params):
    return sum(torch.sum(0.5 * x ** 2 + 0.25 * x ** 4 + torch.sin(x))
               for x in tree_math.leaves(params))


def _jax_objective(params):
    return sum(jnp.sum(0.5 * x ** 2 + 0.25 * x ** 4 + jnp.sin(x))
               for x in jax.tree.leaves(params))


def _run_against_optax(ours_tx, theirs_tx, dtype, steps=5):
    params = make_tree(dtype, seed=0, scale=0.5)
    with jax_precision(dtype):
        theirs_update = jax.jit(lambda g, s, p: theirs_tx.update(g, s, p,
                                                                 obj_fn=_jax_objective))
        theirs_params = to_jax(params)
        ours_state, theirs_state = ours_tx.init(params), theirs_tx.init(theirs_params)
        for step in range(steps):
            grads = make_tree(dtype, seed=step + 1)
            ours_updates, ours_state = ours_tx.update(grads, ours_state, params,
                                                      obj_fn=_torch_objective)
            theirs_updates, theirs_state = theirs_update(to_jax(grads), theirs_state,
                                                         theirs_params)
            assert_same_state_types(ours_state, theirs_state)
            assert_leaves_close(ours_updates, theirs_updates, what=f"updates step {step}")
            sophia_state, theirs_sophia = ours_state[0], theirs_state[0]
            # The random keys differ in kind (int64 seed vs JAX key): compare the rest.
            assert_leaves_close(sophia_state[:3], theirs_sophia[:3], what=f"state step {step}")
            params = ox.apply_updates(params, ours_updates)
            theirs_params = optax.apply_updates(theirs_params, theirs_updates)
    return ours_state


@pytest.mark.parametrize(("kwargs", "dtype"), [
    ({"learning_rate": 0.1}, torch.float32),
    ({"learning_rate": 0.1, "update_interval": 2, "gamma": 0.5, "b1": 0.9, "b2": 0.8,
      "weight_decay": 0.1}, torch.float64),
    ({"learning_rate": 0.1, "update_interval": 3, "gamma": 0.05, "clip_threshold": None},
     torch.float32),
    ({"learning_rate": 0.05, "update_interval": 1, "gamma": 2.0, "mu_dtype": "float32"},
     torch.float64),
    ({"learning_rate": 0.1, "weight_decay": 0.5, "weight_decay_mask": "matrices"},
     torch.float32),
], ids=["default", "interval_2_decay", "no_clip", "mu_dtype", "decay_mask"])
def test_sophia_matches_optax_on_a_separable_objective(kwargs, dtype):
    theirs_kwargs = {**kwargs}
    if "mu_dtype" in kwargs:
        kwargs = {**kwargs, "mu_dtype": torch.float32}
        theirs_kwargs["mu_dtype"] = jnp.float32
    if "weight_decay_mask" in kwargs:
        kwargs = {**kwargs, "weight_decay_mask": lambda p: tree_math.tree_map(
            lambda x: x.ndim > 1, p)}
        theirs_kwargs["weight_decay_mask"] = lambda p: jax.tree.map(lambda x: x.ndim > 1, p)
    with jax_precision(dtype):
        theirs_tx = optax.contrib.sophia(**theirs_kwargs)
    state = _run_against_optax(_sophia.sophia(**kwargs), theirs_tx, dtype)
    sophia_state = state[0]
    assert sophia_state.count.dtype == torch.int32 and int(sophia_state.count) == 5
    assert sophia_state.mu["layer"]["w"].dtype == kwargs.get("mu_dtype", dtype)
    # The Hessian estimate was taken (1 + 0.5 + ... > 0) at the first step at least.
    assert float(sophia_state.nu["layer"]["w"].min()) > 0


def test_hutchinson_is_unbiased_on_a_coupled_quadratic():
    generator = torch.Generator().manual_seed(0)
    root = torch.randn(5, 5, generator=generator, dtype=torch.float64)
    hessian = root @ root.T + torch.eye(5, dtype=torch.float64)
    params = {"x": torch.randn(5, generator=generator, dtype=torch.float64)}

    def objective(p):
        return 0.5 * p["x"] @ hessian @ p["x"]

    tx = _sophia.hutchinson_estimator_diag_hessian(random_seed=3)
    state = tx.init(params)
    draws = 600
    total = torch.zeros(5, dtype=torch.float64)
    for _ in range(draws):
        estimate, state = tx.update(None, state, params, obj_fn=objective)
        total += estimate["x"]
    # Each estimate is diag(H)_i + sum_{j != i} H_ij u_i u_j: the mean converges to diag(H).
    off_diagonal_std = torch.sqrt((hessian ** 2).sum(1) - torch.diagonal(hessian) ** 2)
    error = torch.abs(total / draws - torch.diagonal(hessian))
    assert torch.all(error < 4 * off_diagonal_std / draws ** 0.5)
    assert state.key.dtype == torch.int64


def test_hutchinson_checks_its_arguments_and_is_differentiable():
    tx = _sophia.hutchinson_estimator_diag_hessian()
    params = {"x": torch.tensor([1.0, 2.0], requires_grad=True)}
    state = tx.init(params)
    with pytest.raises(ValueError, match="obj_fn"):
        tx.update(None, state, params)
    with pytest.raises(ValueError, match="params"):
        tx.update(None, state, None, obj_fn=lambda p: p["x"].sum())
    estimate, _ = tx.update(None, state, params, obj_fn=lambda p: torch.sum(p["x"] ** 3))
    torch.testing.assert_close(estimate["x"], 6 * params["x"].detach())
    (gradient,) = torch.autograd.grad(estimate["x"].sum(), params["x"])
    torch.testing.assert_close(gradient, torch.full((2,), 6.0))


def test_sophia_verbose_prints_the_win_rate_without_reading_the_device_in_update(
        capsys, monkeypatch):
    # A deterministic estimator: the random one seeds on the host.
    squares = ox.stateless(lambda updates, params: ox.tree_utils.tree_mul(updates, updates))
    tx = _sophia.sophia(0.1, verbose=True, print_win_rate_every_n_steps=2,
                        hessian_diagonal_fn=squares)
    params = make_tree()
    state = tx.init(params)
    reads = []
    for method in ("__bool__", "item", "__int__", "__float__"):
        original = getattr(torch.Tensor, method)

        def read(self, *args, original=original):
            if threading.current_thread() is threading.main_thread():
                reads.append(original)
            return original(self, *args)

        monkeypatch.setattr(torch.Tensor, method, read)
    for step in range(4):
        _, state = tx.update(make_tree(seed=step + 1), state, params)
    _sophia._REPORTS.submit(lambda: None).result()  # the reports printed so far
    monkeypatch.undo()
    assert reads == []
    assert capsys.readouterr().out.count("Sophia optimizer win rate: ") == 2


def test_sophia_is_pure_and_needs_params():
    tx = _sophia.sophia(0.1)
    params, grads = make_tree(), make_tree(seed=1)
    copies = [torch.clone(params["layer"]["w"]), torch.clone(grads["layer"]["w"])]
    state = tx.init(params)
    tx.update(grads, state, params, obj_fn=_torch_objective)
    assert torch.equal(params["layer"]["w"], copies[0])
    assert torch.equal(grads["layer"]["w"], copies[1])
    with pytest.raises(ValueError, match="params"):
        tx.update(grads, state, None, obj_fn=_torch_objective)
