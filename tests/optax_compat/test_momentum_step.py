"""SGD with momentum's whole in-place step, against real Optax."""

from __future__ import annotations

import pytest
import torch

import optax_compat
from optax_compat import testing


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_whole_step_gives_optaxs_params_and_state(nesterov):
    import optax

    params = testing.make_tree()
    tx = optax_compat.sgd(0.1, momentum=0.9, nesterov=nesterov)
    step = optax_compat.inplace_step(tx)
    assert step is not None
    state = tx.init(params)
    with testing.jax_precision(torch.float32):
        theirs_tx = testing.jit_optax(optax.sgd(0.1, momentum=0.9, nesterov=nesterov))
        theirs_params = testing.to_jax(params)
        theirs_state = theirs_tx.init(theirs_params)
        for seed in (1, 2, 3):
            grads = testing.make_tree(seed=seed)
            returned = step(params, grads, state)
            assert returned is state  # its buffers were written in place
            updates, theirs_state = theirs_tx.update(testing.to_jax(grads), theirs_state,
                                                     theirs_params)
            theirs_params = optax.apply_updates(theirs_params, updates)
            testing.assert_leaves_close(params, theirs_params, what=f"step {seed}: params")
            testing.assert_leaves_close(state, testing.to_torch(theirs_state),
                                        what=f"step {seed}: state")


@pytest.mark.parametrize("tx", [
    optax_compat.sgd(0.1),
    optax_compat.sgd(optax_compat.linear_schedule(0.1, 0.01, 5), momentum=0.9),
    optax_compat.sgd(0.1, momentum=0.9, accumulator_dtype=torch.bfloat16),
], ids=["no_momentum", "schedule", "accumulator_dtype"])
def test_sgd_without_a_whole_step_where_it_would_differ(tx):
    assert optax_compat.inplace_step(tx) is None


def test_a_gradient_of_another_dtype_takes_the_update():
    params = {"w": torch.ones(3)}
    tx = optax_compat.sgd(0.1, momentum=0.9)
    state = optax_compat.inplace_step(tx)(params, {"w": torch.ones(3, dtype=torch.float64)},
                                          tx.init(params))
    assert params["w"].dtype == torch.float32
    torch.testing.assert_close(params["w"], torch.full((3,), 0.9))
    torch.testing.assert_close(state[0].trace["w"], torch.ones(3, dtype=torch.float64))


@pytest.mark.parametrize("nesterov", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_whole_step_on_the_fused_kernel_steps_like_torch_optims_fused_sgd(
        fused_sgd_calls, nesterov, dtype):
    # Shapes with and without a tail after the last full vector, a scalar and an empty leaf:
    # the kernel is torch.optim's own, so the numbers are its, bit for bit.
    shapes = [(3, 5), (64,), (), (0,), (1001,)]
    ours = [torch.randn(shape, dtype=dtype) for shape in shapes]
    theirs = [p.clone().requires_grad_() for p in ours]
    optimizer = optax_compat.TorchOptimizer(
        [p.requires_grad_() for p in ours], optax_compat.sgd(0.03, momentum=0.9,
                                                             nesterov=nesterov))
    reference = torch.optim.SGD(theirs, lr=0.03, momentum=0.9, nesterov=nesterov, fused=True)
    for _ in range(3):
        for p, q in zip(ours, theirs):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.clone()
        optimizer.step()
        reference.step()
    assert len(fused_sgd_calls) == 6  # ours and torch's, each step
    for p, q in zip(ours, theirs):
        assert torch.equal(p, q)
        assert torch.equal(optimizer.state[p]["0.trace"], reference.state[q]["momentum_buffer"])


@pytest.mark.parametrize("case", ["zero momentum", "strided param", "two dtypes",
                                  "tensor learning rate"])
def test_steps_the_kernel_would_change_take_the_multi_tensor_path(fused_sgd_calls, case):
    import optax

    params = {"a": torch.randn(4, 6), "b": torch.randn(5)}
    learning_rate, momentum = 0.1, 0.9
    if case == "zero momentum":  # the kernel would keep no trace; Optax's is the gradient
        momentum = 0.0
    elif case == "strided param":
        params["a"] = torch.randn(6, 4).t()
    elif case == "two dtypes":
        params["b"] = params["b"].double()
    else:
        learning_rate = torch.tensor(0.1)
    grads = {name: torch.randn_like(p) for name, p in params.items()}
    tx = optax_compat.sgd(learning_rate, momentum=momentum)
    state = tx.init(params)
    expected_updates, _ = tx.update(grads, state, params)
    expected = {name: p + expected_updates[name] for name, p in params.items()}
    state = optax_compat.inplace_step(tx)(params, grads, state)
    assert not fused_sgd_calls
    testing.assert_leaves_close(params, expected)
    theirs_tx = optax.sgd(0.1, momentum=momentum)
    _, theirs_state = theirs_tx.update(testing.to_jax(grads),
                                       theirs_tx.init(testing.to_jax(params)))
    testing.assert_leaves_close(state, testing.to_torch(theirs_state), what="state")
