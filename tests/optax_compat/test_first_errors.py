"""The errors a new user meets first name the problem and the fix."""

import pytest
import torch

import optax_compat as optax
import torchopt_fn


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
