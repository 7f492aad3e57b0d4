"""The errors a new user meets first name the problem and the fix."""

import jax.numpy as jnp
import numpy as np
import optax as real_optax
import pytest
import torch

import optax_compat as optax
import torchopt_fn
from optax_compat._runtime import none_gradients


def _params():
    return {"a": torch.zeros(2), "b": torch.zeros(3)}


def test_missing_key_in_updates_is_named():
    tx = optax.adam(0.1)
    state = tx.init(_params())
    with pytest.raises(ValueError, match=r"updates has no key 'b' that state.mu has"):
        tx.update({"a": torch.ones(2)}, state, _params())


def test_extra_key_in_updates_is_named():
    tx = optax.adam(0.1)
    state = tx.init(_params())
    grads = {"a": torch.ones(2), "b": torch.ones(3), "c": torch.ones(1)}
    with pytest.raises(ValueError, match="updates has an extra key 'c'"):
        tx.update(grads, state, _params())


def test_renamed_key_names_both_sides():
    tx = optax.sgd(0.1, momentum=0.9)
    state = tx.init(_params())
    with pytest.raises(ValueError,
                       match=r"has no key 'b' that .* has; updates has an extra key 'c'"):
        tx.update({"a": torch.ones(2), "c": torch.ones(3)}, state, _params())


def test_apply_updates_names_the_missing_key():
    with pytest.raises(ValueError, match="updates has no key 'b' that params has"):
        optax.apply_updates(_params(), {"a": torch.ones(2)})
    with pytest.raises(ValueError, match="updates has no key 'b' that params has"):
        torchopt_fn.apply_updates(_params(), {"a": torch.ones(2)})


@pytest.mark.parametrize("what", ["module", "parameters"])
@pytest.mark.parametrize("name", ["adam", "sgd", "lion", "adafactor"])
def test_init_with_a_module_or_its_parameters_says_what_to_pass(what, name):
    model = torch.nn.Linear(3, 2)
    params = model if what == "module" else model.parameters()
    with pytest.raises(TypeError, match=r"dict\(model.named_parameters\(\)\)"):
        getattr(optax, name)(0.1).init(params)


@pytest.mark.parametrize("name", ["adam", "adamw", "sgd", "lion", "rmsprop", "adagrad", "lamb",
                                  "adafactor", "novograd", "radam"])
def test_a_string_learning_rate_fails_when_the_optimizer_is_built(name):
    with pytest.raises(TypeError, match="learning_rate must be a number"):
        getattr(optax, name)("1e-3")


def test_a_string_weight_decay_fails_when_built():
    with pytest.raises(TypeError, match="weight_decay must be a number"):
        optax.adamw(1e-3, weight_decay="0.01")


def test_torchopt_string_lr_fails_when_built():
    with pytest.raises(TypeError, match="lr must be a number"):
        torchopt_fn.adam("1e-3")


SHAPE_CASES = {
    "adam": lambda: optax.adam(0.1),
    "adamw": lambda: optax.adamw(0.1, weight_decay=0.1),
    "sgd_momentum": lambda: optax.sgd(0.1, momentum=0.9),
    "lion": lambda: optax.lion(0.1),
    "rmsprop": lambda: optax.rmsprop(0.1),
    "adafactor": lambda: optax.adafactor(0.1),
    "chain": lambda: optax.chain(optax.clip_by_global_norm(1.0), optax.adam(0.1)),
}


def _transposed_grads():
    return {"a": torch.ones(2), "w": torch.ones(2, 3)}


@pytest.mark.parametrize("name", list(SHAPE_CASES))
def test_a_leaf_of_another_shape_fails_at_update_naming_the_path(name):
    tx = SHAPE_CASES[name]()
    params = {"a": torch.zeros(2), "w": torch.zeros(3, 2)}
    with pytest.raises(ValueError, match=r"updates\['w'\] has shape \(2, 3\) where "
                                         r"params\['w'\] has shape \(3, 2\)") as raised:
        tx.update(_transposed_grads(), tx.init(params), params)
    assert isinstance(raised.value.__cause__, RuntimeError)


@pytest.mark.parametrize(("name", "state_part"), [("adam", r"state\[0\]\.mu"),
                                                  ("sgd_momentum", r"state\[0\]\.trace"),
                                                  ("chain", r"state\[1\]\[0\]\.mu")])
def test_without_params_the_state_leaf_is_named(name, state_part):
    tx = SHAPE_CASES[name]()
    state = tx.init({"a": torch.zeros(2), "w": torch.zeros(3, 2)})
    with pytest.raises(ValueError, match=rf"updates\['w'\] has shape \(2, 3\) where "
                                         rf"{state_part}\['w'\] has shape \(3, 2\)"):
        tx.update(_transposed_grads(), state)


OPTAX_SHAPE_CASES = {
    "adam": lambda: real_optax.adam(0.1),
    "adamw": lambda: real_optax.adamw(0.1, weight_decay=0.1),
    "lion": lambda: real_optax.lion(0.1),
    "sgd_momentum": lambda: real_optax.sgd(0.1, momentum=0.9),
}


@pytest.mark.parametrize("name", list(OPTAX_SHAPE_CASES))
@pytest.mark.parametrize("params, grads", [
    ({"w": torch.linspace(-1.0, 1.0, 6).reshape(3, 2)},
     {"w": torch.tensor([[0.5], [-1.0], [2.0]])}),
    # Wider than the moments: Optax's updates and new moments take the broadcast shape (what
    # ``scale_by_distance_over_gradients`` hands on for a 0-d parameter).
    ({"w": torch.tensor(1.5)}, {"w": torch.tensor([0.3])}),
], ids=["narrower", "wider"])
def test_shapes_that_broadcast_are_accepted_as_in_optax(name, params, grads):
    ours, theirs = SHAPE_CASES[name](), OPTAX_SHAPE_CASES[name]()
    updates, _ = ours.update(grads, ours.init(params), params)
    jax_params = {"w": jnp.asarray(params["w"].numpy())}
    expected, _ = theirs.update({"w": jnp.asarray(grads["w"].numpy())},
                                theirs.init(jax_params), jax_params)
    torch.testing.assert_close(updates["w"], torch.tensor(np.array(expected["w"])),
                               rtol=1e-6, atol=1e-7)


def test_a_runtime_error_without_a_shape_difference_is_raised_unchanged():
    def update(updates, state, params=None):
        raise RuntimeError("not a shape problem")

    tx = optax.GradientTransformation(lambda params: optax.EmptyState(), update)
    with pytest.raises(RuntimeError, match="not a shape problem"):
        tx.update({"w": torch.ones(2)}, tx.init({"w": torch.zeros(2)}), {"w": torch.zeros(2)})


@pytest.mark.parametrize("with_params", [True, False], ids=["params", "no_params"])
def test_factored_moments_are_no_evidence_of_a_shape_mismatch(with_params):
    """Adafactor's row and column factors are per-parameter parts of other shapes: when an
    update fails for another reason, the shapes of well-shaped updates are not blamed, and the
    original error is raised."""
    params = {"a": torch.zeros(2), "w": torch.zeros(3, 2), "v": torch.zeros(4, 5)}
    tx = optax.adafactor(0.1, min_dim_size_to_factor=2)
    state = tx.init(params)
    grads = {key: torch.ones_like(leaf) for key, leaf in params.items()}
    given = params if with_params else None
    assert none_gradients.shape_mismatch(grads, state, given) is None
    # A real mismatch is still named against the params; without them, Adafactor's state
    # holds no parameter-shaped part to name it against.
    transposed = {**grads, "w": torch.ones(2, 3)}
    expected = ("params differ: updates['w'] has shape (2, 3) where params['w'] has shape "
                "(3, 2)") if with_params else None
    assert none_gradients.shape_mismatch(transposed, state, given) == expected
