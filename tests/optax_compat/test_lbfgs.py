"""scale_by_lbfgs and the lbfgs alias against real Optax."""

from __future__ import annotations

import math

import numpy as np
import optax
import pytest
import torch

from optax_compat import apply_updates
from optax_compat._runtime import tree_math
from optax_compat._src import alias, base, linesearch, transform
from optax_compat.testing import (
    assert_leaves_close,
    compare_with_optax,
    jax_precision,
    jit_optax,
    make_tree,
)
from tests.optax_compat.linesearch_cases import PROBLEMS, run_against_optax

F64 = torch.float64
LINESEARCH_RTOL = {F64: 1e-9}


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("memory_size,scale_init_precond", [(1, True), (3, True), (4, False)])
def test_scale_by_lbfgs_matches_optax_on_random_trees(dtype, memory_size, scale_init_precond):
    # More steps than memory slots, so that the ring buffer wraps around.
    compare_with_optax(
        transform.scale_by_lbfgs(memory_size=memory_size, scale_init_precond=scale_init_precond),
        lambda: jit_optax(optax.scale_by_lbfgs(memory_size=memory_size,
                                               scale_init_precond=scale_init_precond)),
        dtype, steps=6)


def test_a_leaf_that_changes_shape_is_a_value_error_as_in_optax():
    # scale_by_distance_over_gradients turns a 0-d parameter into a vector (in Optax too):
    # at the next step the L-BFGS memory, made for a 0-d leaf, cannot take it.
    def chain(module):
        return module.chain(module.scale_by_lbfgs(), module.scale_by_distance_over_gradients())

    def run(module, params):
        tx = chain(module)
        state = tx.init(params)
        for _ in range(2):
            updates, state = tx.update(params, state, params)
            params = module.apply_updates(params, updates)

    import optax_compat

    with pytest.raises(ValueError, match="Cannot broadcast"):
        run(optax, {"w": np.float32(1.0)})
    with pytest.raises(ValueError, match=r"at \['w'\] has shape \(1,\) in the updates and "
                                         r"\(1,\) in the params, but \(\) at init"):
        run(optax_compat, {"w": torch.tensor(1.0)})


# (case, build(module) -> solver, problem, steps, resync). Rosenbrock's trajectory is chaotic:
# those cases restart ours from Optax's params and state at each step, so that each step is
# compared from identical inputs; the others run freely from start to end.
LBFGS_CASES = [
    ("default-quadratic", lambda m: m.lbfgs(), "quadratic", 20, False),
    ("default-logistic", lambda m: m.lbfgs(), "logistic", 8, False),
    ("default-rosenbrock2", lambda m: m.lbfgs(), "rosenbrock2", 25, True),
    ("default-rosenbrock10", lambda m: m.lbfgs(), "rosenbrock10", 20, True),
    ("memory1-quadratic", lambda m: m.lbfgs(memory_size=1), "quadratic", 15, False),
    ("memory3-rosenbrock10", lambda m: m.lbfgs(memory_size=3), "rosenbrock10", 15, True),
    ("unscaled-rosenbrock2", lambda m: m.lbfgs(scale_init_precond=False), "rosenbrock2", 15,
     True),
    ("no-linesearch-logistic", lambda m: m.lbfgs(learning_rate=0.5, linesearch=None),
     "logistic", 10, False),
]


def _with_backtracking(module, alias_module):
    return alias_module.lbfgs(linesearch=module.scale_by_backtracking_linesearch(
        max_backtracking_steps=15, store_grad=True))


@pytest.mark.parametrize("name,build,problem,steps,resync", LBFGS_CASES,
                         ids=[case[0] for case in LBFGS_CASES])
def test_lbfgs_matches_optax_float64(name, build, problem, steps, resync):
    with jax_precision(F64):
        theirs = build(optax)
    run_against_optax(build(alias), theirs, PROBLEMS[problem], steps=steps, dtype=F64,
                      resync=resync)


def test_lbfgs_with_backtracking_linesearch_matches_optax():
    with jax_precision(F64):
        theirs = _with_backtracking(optax, optax)
    run_against_optax(_with_backtracking(linesearch, alias), theirs, PROBLEMS["rosenbrock2"],
                      steps=20, dtype=F64, resync=True)


@pytest.mark.parametrize("problem", ["quadratic", "rosenbrock2"])
def test_lbfgs_matches_optax_float32(problem):
    # Differences of nearly equal float32 gradients lose digits: compare step by step.
    with jax_precision(torch.float32):
        theirs = optax.lbfgs()
    run_against_optax(alias.lbfgs(), theirs, PROBLEMS[problem], steps=10,
                      dtype=torch.float32, rtol=1e-4, atol=1e-5, resync=True)


def test_lbfgs_converges_on_rosenbrock():
    problem = PROBLEMS["rosenbrock10"]
    solver = alias.lbfgs()
    params = problem.params(F64)
    state = solver.init(params)
    value_and_grad = linesearch.value_and_grad_from_state(problem.torch_fn)
    for _ in range(100):
        value, grad = value_and_grad(params, state=state)
        updates, state = solver.update(grad, state, params, value=value, grad=grad,
                                       value_fn=problem.torch_fn)
        params = apply_updates(params, updates)
    torch.testing.assert_close(params, torch.ones(10, dtype=F64), rtol=0, atol=1e-6)


def test_scale_by_lbfgs_memory_is_not_aliased_to_the_callers_tensors():
    params, grads = make_tree(F64, seed=0), make_tree(F64, seed=1)
    tx = transform.scale_by_lbfgs(memory_size=2)
    _, state = tx.update(grads, tx.init(params), params)
    snapshot = [x.clone() for x in (state.params["layer"]["w"], state.updates["layer"]["w"])]
    params["layer"]["w"].add_(1.0)
    grads["layer"]["w"].add_(1.0)
    assert torch.equal(state.params["layer"]["w"], snapshot[0])
    assert torch.equal(state.updates["layer"]["w"], snapshot[1])


def test_scale_by_lbfgs_is_differentiable():
    params = torch.randn(4, dtype=F64, generator=torch.Generator().manual_seed(0))
    tx = transform.scale_by_lbfgs(memory_size=2)
    state = tx.init(params)
    grads = torch.randn(4, dtype=F64, generator=torch.Generator().manual_seed(1))
    _, state = tx.update(grads, state, params)
    new_grads = (grads * 0.5).requires_grad_(True)
    updates, _ = tx.update(new_grads, state, params - 0.1 * grads)
    (direction,) = torch.autograd.grad(updates.sum(), new_grads)
    assert torch.isfinite(direction).all() and direction.abs().sum() > 0
    assert torch.autograd.gradcheck(
        lambda g: tx.update(g, state, params - 0.1 * grads)[0], (new_grads,))


def test_scale_by_lbfgs_first_step_is_capped_at_unit_norm():
    params = torch.zeros(3, dtype=F64)
    tx = transform.scale_by_lbfgs()
    big = torch.tensor([30.0, 40.0, 0.0], dtype=F64)
    small = torch.tensor([0.3, 0.4, 0.0], dtype=F64)
    assert math.isclose(tx.update(big, tx.init(params), params)[0].norm().item(), 1.0)
    assert torch.equal(tx.update(small, tx.init(params), params)[0], small)


def test_lbfgs_state_types_match_optax():
    params = {"w": torch.zeros(3, dtype=F64), "b": torch.zeros((), dtype=F64)}
    for build in (lambda m: m.lbfgs(), lambda m: m.lbfgs(linesearch=None),
                  lambda m: m.lbfgs(learning_rate=0.1)):
        with jax_precision(F64):
            theirs = build(optax).init({k: np.asarray(v) for k, v in params.items()})
        ours = build(alias).init(params)
        assert type(ours[0]).__name__ == "ScaleByLBFGSState"
        assert type(ours[0])._fields == type(theirs[0])._fields
        assert [type(s).__name__ for s in ours] == [type(s).__name__ for s in theirs]


def test_bad_usage_raises_clear_errors():
    with pytest.raises(ValueError, match="memory_size must be >= 1"):
        transform.scale_by_lbfgs(memory_size=0)
    params = torch.ones(3, dtype=F64)
    tx = transform.scale_by_lbfgs()
    with pytest.raises(ValueError, match="requires the current value of parameters"):
        tx.update(params, tx.init(params), None)
    with pytest.raises(ValueError, match="structure of params"):
        tx.update(params, tx.init(params), {"x": params})
    solver = alias.lbfgs()
    with pytest.raises(TypeError, match="value_fn"):
        solver.update(params, solver.init(params), params)


def test_lbfgs_signature_defaults():
    linesearch_default = alias.lbfgs.__defaults__[-1]
    assert isinstance(linesearch_default, base.GradientTransformationExtraArgs)
    assert alias.lbfgs.__defaults__[:3] == (None, 10, True)


def _complex_objective(lib):
    mat = np.array([[1, -2], [3, 4], [-4 + 2j, 5 - 3j], [-2 - 2j, 6]])

    def fn(z):
        return lib.sum(lib.abs(lib.asarray(mat, dtype=z.dtype) @ z) ** 1.5)
    return fn


@pytest.mark.parametrize("use_zoom", [True, False], ids=["zoom", "backtracking"])
def test_lbfgs_on_complex_params_matches_optax(use_zoom):
    # Optax's test_lbfgs_complex. Optax callers pass the conjugate of jax.grad, which is what
    # torch.autograd returns; the gradients a line search stores keep each library's convention.
    import functools

    import jax

    def build(module, linesearch_module):
        if use_zoom:
            search = linesearch_module.scale_by_zoom_linesearch(max_linesearch_steps=20,
                                                                initial_guess_strategy="one")
        else:
            search = linesearch_module.scale_by_backtracking_linesearch(max_backtracking_steps=20)
        return module.lbfgs(linesearch=search)

    fn, jax_fn = _complex_objective(torch), _complex_objective(jax.numpy)
    with jax_precision(F64):
        params = torch.tensor([1 - 1j, 0 + 1j], dtype=torch.complex128)
        solver, theirs_solver = build(alias, linesearch), build(optax, optax)
        theirs_params = jax.numpy.asarray(params.numpy())
        state, theirs_state = solver.init(params), theirs_solver.init(theirs_params)
        theirs_update = jax.jit(functools.partial(theirs_solver.update, value_fn=jax_fn))
        for step in range(10):
            z = params.clone().requires_grad_(True)
            value = fn(z)
            (grad,) = torch.autograd.grad(value, z)
            theirs_value, theirs_grad = jax.value_and_grad(jax_fn)(theirs_params)
            theirs_grad = jax.numpy.conj(theirs_grad)
            updates, state = solver.update(grad, state, params, value=value.detach(), grad=grad,
                                           value_fn=fn)
            theirs_updates, theirs_state = theirs_update(theirs_grad, theirs_state, theirs_params,
                                                         value=theirs_value, grad=theirs_grad)
            params = apply_updates(params, updates)
            theirs_params = optax.apply_updates(theirs_params, theirs_updates)
            # A line search on a complex objective: float64 values agree to 1e-9.
            assert_leaves_close(params, theirs_params, rtol=LINESEARCH_RTOL, atol=0.0,
                                what=f"params step {step}")
            ours_search, theirs_search = state[2], theirs_state[2]
            assert int(ours_search.info.num_linesearch_steps) == int(
                theirs_search.info.num_linesearch_steps)
            assert_leaves_close(ours_search.learning_rate, theirs_search.learning_rate,
                                rtol=LINESEARCH_RTOL, atol=0.0)
            if use_zoom:
                assert_leaves_close(ours_search.grad, np.conj(np.asarray(theirs_search.grad)),
                                    rtol=LINESEARCH_RTOL, atol=0.0)
        assert fn(params) < 0.01 * fn(torch.tensor([1 - 1j, 0 + 1j], dtype=torch.complex128))


def test_lbfgs_trains_a_module_through_functional_call_under_no_grad():
    # An ordinary PyTorch loss: the line search differentiates it itself, even in no_grad.
    from torch.func import functional_call

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(),
                                torch.nn.Linear(16, 1)).double()
    inputs = torch.randn(64, 3, dtype=F64)
    targets = torch.sin(inputs.sum(1, keepdim=True))

    def loss(params):
        return torch.mean((functional_call(model, params, (inputs,)) - targets) ** 2)

    params = {name: p.detach() for name, p in model.named_parameters()}
    initial = loss(params).item()
    solver = alias.lbfgs()
    state = solver.init(params)
    value_and_grad = linesearch.value_and_grad_from_state(loss)
    with torch.no_grad():
        for _ in range(30):
            value, grad = value_and_grad(params, state=state)
            updates, state = solver.update(grad, state, params, value=value, grad=grad,
                                           value_fn=loss)
            params = apply_updates(params, updates)
    assert loss(params).item() < 0.05 * initial
    assert all(not p.requires_grad for p in params.values())


def test_scale_by_lbfgs_on_mixed_dtypes_matches_optax():
    # Leaves of different dtypes cannot share one flat vector: the leaf-by-leaf recursion runs.
    def mixed(seed):
        tree = make_tree(F64, seed=seed)
        tree["layer"]["w"] = tree["layer"]["w"].float()
        return tree

    compare_with_optax(transform.scale_by_lbfgs(memory_size=3),
                       lambda: jit_optax(optax.scale_by_lbfgs(memory_size=3)), torch.float32,
                       steps=5, params=mixed(0), grads=[mixed(i + 1) for i in range(5)])


def test_flat_and_leafwise_recursions_agree(monkeypatch):
    params = make_tree(F64, seed=0)
    grads = [make_tree(F64, seed=i + 1) for i in range(6)]

    def run():
        tx = transform.scale_by_lbfgs(memory_size=4)
        state, current, outputs = tx.init(params), params, []
        for grad in grads:
            updates, state = tx.update(grad, state, current)
            current = apply_updates(current, updates)
            outputs.append(updates)
        return outputs

    flat = run()
    monkeypatch.setattr(transform, "_concatenated", lambda leaves: False)
    leafwise = run()
    for ours, reference in zip(flat, leafwise):
        for a, b in zip(tree_math.leaves(ours), tree_math.leaves(reference), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
