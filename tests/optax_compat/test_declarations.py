"""Declaring your own transformations (``optax_compat.capabilities``) and checking declarations
(``optax_compat.testing.check_*``): every built-in declaration holds on data, each check catches
deliberately wrong ones, and what is declared is what the fast paths take."""

import warnings

import hypothesis
import optree
import pytest
import torch
from hypothesis import given

import optax_compat as optax
from optax_compat import capabilities, testing
from optax_compat.testing import strategies

SETTINGS = hypothesis.settings(max_examples=15, deadline=None, derandomize=True,
                               suppress_health_check=[hypothesis.HealthCheck.too_slow])


def _tree(*shapes, seed=0):
    return {f"p{i}": testing.seeded_randn(*shape, seed=seed + i) for i, shape in enumerate(shapes)}


SHAPES = ((3, 4), (3, 4), (4,), (2, 3, 4))
PARAMS = _tree(*SHAPES)


def _grads(step, shapes=SHAPES):
    return _tree(*shapes, seed=100 + 10 * step)


ELEMENTWISE = {"adam": lambda: optax.adam(0.1), "sgd": lambda: optax.sgd(0.1, momentum=0.9),
               "lion": lambda: optax.lion(0.1), "adan": lambda: optax.adan(0.1),
               "chain": lambda: optax.chain(optax.clip(1.0), optax.scale_by_rms(),
                                            optax.add_decayed_weights(0.1), optax.scale(-0.1))}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
@SETTINGS
@given(strategies.params_and_grads(steps=2, min_value=-5.0, max_value=5.0))
def test_elementwise_builtins_pass_on_drawn_trees(name, params_and_grads):
    params, grads = params_and_grads
    tx = ELEMENTWISE[name]()
    testing.check_elementwise(tx, params, grads.__getitem__)
    testing.check_inplace(tx, params, grads.__getitem__)


@SETTINGS
@given(strategies.params_and_grads(steps=2, min_value=-5.0, max_value=5.0))
def test_layout_checks_of_global_and_per_leaf_builtins_pass_on_drawn_trees(params_and_grads):
    params, grads = params_and_grads
    testing.check_global_reduction(optax.clip_by_global_norm(1.0), params, grads.__getitem__)
    testing.check_per_leaf(optax.lamb(0.1), params, grads.__getitem__)
    testing.check_per_leaf(optax.adafactor(0.1), params, grads.__getitem__)


# --- deliberately wrong declarations, each caught --------------------------------------------


def _stateless(leaf_fn):
    """A transformation mapping each update leaf through ``leaf_fn(update, all_updates)``."""

    def update(updates, state, params=None):
        leaves = optree.tree_leaves(updates)
        return optree.tree_map(lambda u: leaf_fn(u, leaves), updates), state

    return optax.GradientTransformation(optax.init_empty_state, update)


def _global_norm(leaves):
    return torch.sqrt(sum((x ** 2).sum() for x in leaves))


def _position(leaves, leaf):
    return next(i for i, x in enumerate(leaves) if x is leaf)


WRONG = {
    "a per-leaf norm": (lambda u, leaves: u / u.norm(), "concatenated"),
    "a global norm": (lambda u, leaves: u / _global_norm(leaves), "split in two halves"),
    "an element's position": (lambda u, leaves: u.reshape(-1).cumsum(0).reshape(u.shape),
                              "concatenated"),
    "the leaf's position": (lambda u, leaves: u * (1 + _position(leaves, u)), "reverse order"),
    "the leaf's size": (lambda u, leaves: u / u.numel(), "concatenated"),
}


@pytest.mark.parametrize("kind", sorted(WRONG))
def test_check_elementwise_catches_a_transformation_reading(kind):
    leaf_fn, rearrangement = WRONG[kind]
    tx = capabilities.elementwise(_stateless(leaf_fn))
    with pytest.raises(AssertionError, match=f"declared elementwise.*{rearrangement}"):
        testing.check_elementwise(tx, PARAMS, _grads)
    with pytest.raises(ValueError, match=r"validate=True.*declared elementwise"):
        optax.fused_step(tx, _tree(*SHAPES), backend=None, validate=True)


@pytest.mark.parametrize("kind", ["a per-leaf norm", "an element's position", "the leaf's size"])
def test_check_global_reduction_catches_a_transformation_reading(kind):
    leaf_fn, rearrangement = WRONG[kind]
    tx = capabilities.global_reduction("divides by something")(_stateless(leaf_fn))
    with pytest.raises(AssertionError, match=f"declared with global reductions.*{rearrangement}"):
        testing.check_global_reduction(tx, PARAMS, _grads)


WRONG_PER_LEAF = {
    "a global norm": (lambda u, leaves: u / _global_norm(leaves), "alone"),
    "another leaf": (lambda u, leaves: u + leaves[0].mean(), "alone"),
    "the number of leaves": (lambda u, leaves: u / len(leaves), "alone"),
    "the leaf's position": (lambda u, leaves: u * (1 + _position(leaves, u)), "alone"),
    "a value on the host (.item())": (lambda u, leaves: u * u.abs().max().item(), "vmap"),
}


@pytest.mark.parametrize("kind", sorted(WRONG_PER_LEAF))
def test_check_per_leaf_catches_a_transformation_reading(kind):
    leaf_fn, rearrangement = WRONG_PER_LEAF[kind]
    tx = capabilities.per_leaf("normalizes each leaf")(_stateless(leaf_fn))
    with pytest.raises(AssertionError, match=f"declared per leaf.*{rearrangement}"):
        testing.check_per_leaf(tx, PARAMS, _grads)
    with pytest.raises(ValueError, match=r"validate=True.*declared per leaf"):
        optax.fused_step(tx, _tree(*SHAPES), backend=None, validate=True)


def _momentum(inplace_body):
    """A momentum transformation declared in place, its in-place branch ``inplace_body(
    updates, trace, params)`` -> (new updates, new trace)."""

    def init(params):
        return optree.tree_map(torch.zeros_like, params)

    @capabilities.supports_inplace
    def update(updates, state, params=None, *, inplace=False):
        if inplace:
            pairs = [inplace_body(u, t, p) for u, t, p in zip(
                optree.tree_leaves(updates), optree.tree_leaves(state),
                optree.tree_leaves(params), strict=True)]
            spec = optree.tree_structure(updates)
            return (optree.tree_unflatten(spec, [u for u, _ in pairs]),
                    optree.tree_unflatten(spec, [t for _, t in pairs]))
        new_trace = optree.tree_map(lambda u, t: 0.9 * t + u, updates, state)
        return new_trace, new_trace

    return optax.GradientTransformationExtraArgs(init, update)


def _right(u, t, p):
    t.mul_(0.9).add_(u)
    return u.copy_(t), t


WRONG_INPLACE = {
    "writes into the params": (lambda u, t, p: (p.add_(0.0 * u), *_right(u, t, p))[1:],
                               "modified params"),
    "returns its state buffer as the update": (lambda u, t, p: (t.mul_(0.9).add_(u), t),
                                               "in memory of the state"),
    "computes in the wrong order": (lambda u, t, p: (u.copy_(t), t.mul_(0.9).add_(u)),
                                    "differ"),
    "refuses the keyword": (None, "fails"),
}


@pytest.mark.parametrize("kind", sorted(WRONG_INPLACE))
def test_check_inplace_catches_an_update_that(kind):
    body, message = WRONG_INPLACE[kind]
    tx = _momentum(body) if body else capabilities.supports_inplace(
        optax.GradientTransformation(optax.init_empty_state, lambda u, s, p=None: (u, s)))
    with pytest.raises(AssertionError, match=message):
        testing.check_inplace(tx, PARAMS, _grads)


def test_check_inplace_catches_a_pure_call_that_writes_its_inputs():
    def init(params):
        return optree.tree_map(torch.zeros_like, params)

    def update(updates, state, params=None, *, inplace=False):
        del inplace  # always in place: wrong for the pure call
        for u, t in zip(optree.tree_leaves(updates), optree.tree_leaves(state), strict=True):
            t.mul_(0.9).add_(u)
            u.copy_(t)
        return updates, state

    tx = capabilities.supports_inplace(optax.GradientTransformation(init, update))
    with pytest.raises(AssertionError, match=r"pure update 1.*modified"):
        testing.check_inplace(tx, PARAMS, _grads)


def test_a_right_inplace_declaration_passes_and_chain_passes_the_request_on():
    tx = _momentum(_right)
    testing.check_inplace(tx, PARAMS, _grads)
    chained = optax.chain(tx, optax.scale(-0.1))
    assert testing.check_declarations(chained, PARAMS, _grads) == ("check_inplace",)
    grads = _grads(0)
    updates, _ = chained.update(grads, chained.init(PARAMS), PARAMS, inplace=True)
    assert updates["p0"] is grads["p0"]  # written into the handed-over gradients


def test_check_inplace_refuses_an_undeclared_transformation():
    with pytest.raises(AssertionError, match="does not declare in-place support"):
        testing.check_inplace(optax.stateless(lambda u, p: u), PARAMS, _grads)


# --- the public declarations and the fast paths --------------------------------------------------


def _sign_update(updates, state, params=None):
    return optree.tree_map(torch.sign, updates), state


def test_declaring_a_built_transformation_returns_a_new_one_and_keeps_the_original():
    for build in (lambda: optax.stateless_with_tree_map(lambda g, p: g.sign()),
                  lambda: optax.stateless(lambda u, p: optree.tree_map(torch.sign, u)),
                  lambda: optax.GradientTransformationExtraArgs(optax.init_empty_state,
                                                                _sign_update)):
        tx = build()
        declared = capabilities.elementwise(tx)
        assert type(declared) is type(tx) and declared.init is tx.init
        assert capabilities.why_not(declared, capabilities.FLAT) is None
        assert capabilities.why_not(declared, capabilities.STACKED) is None
        assert "not declared" in capabilities.why_not(tx)
        testing.check_elementwise(declared, PARAMS, _grads)
    assert capabilities.capabilities_of(_sign_update).layouts is None  # the function untouched


def test_declarations_as_decorators_and_their_layouts():
    @capabilities.elementwise
    def elementwise(updates, state, params=None):
        return updates, state

    @capabilities.global_reduction("divides by the global norm")
    def global_(updates, state, params=None):
        return updates, state

    @capabilities.per_leaf("normalizes each leaf")
    def per_leaf(updates, state, params=None):
        return updates, state

    layouts = {name: optax.fused_step(optax.GradientTransformation(optax.init_empty_state, fn),
                                      _tree(*SHAPES), backend=None).layout
               for name, fn in [("e", elementwise), ("g", global_), ("p", per_leaf)]}
    assert layouts == {"e": "flat", "g": "flat", "p": "stacked"}
    assert capabilities.why_not(global_, capabilities.STACKED).endswith(
        "divides by the global norm")
    wrapper = capabilities.like(optax.adam(0.1), optax.lamb(0.1))(
        optax.GradientTransformation(optax.init_empty_state, lambda u, s, p=None: (u, s)))
    assert capabilities.why_not(wrapper, capabilities.STACKED) is None
    assert "trust ratio" in capabilities.why_not(wrapper, capabilities.FLAT)


def test_a_declaration_refuses_what_is_not_an_update_or_a_transformation():
    with pytest.raises(TypeError, match="declares an update function or a GradientTransformation"):
        capabilities.elementwise(3)


def test_an_undeclared_transformation_is_refused_by_fused_step_and_unfused_in_torch_optimizer():
    tx = optax.chain(optax.stateless_with_tree_map(lambda g, p: g.sign()), optax.scale(-0.1))
    with pytest.raises(ValueError, match="stateless_with_tree_map is not declared"):
        optax.fused_step(tx, _tree(*SHAPES))
    param = torch.nn.Parameter(torch.ones(3))
    param.grad = torch.tensor([1.0, -2.0, 0.5])
    optimizer = optax.TorchOptimizer([param], tx, fused=True)
    with pytest.warns(UserWarning, match="steps unfused: .*not declared"):
        optimizer.step()
    assert torch.equal(param.detach(), torch.tensor([0.9, 1.1, 0.9]))


def _custom_adam(b1=0.9, b2=0.999, eps=1e-8):
    """A hand-written Adam over optax.tree's public functions, declared elementwise."""

    def init(params):
        return (torch.zeros([], dtype=torch.int32), optax.tree.zeros_like(params),
                optax.tree.zeros_like(params))

    @capabilities.elementwise
    def update(updates, state, params=None):
        count, mu, nu = state
        count = count + 1
        mu = optax.tree.update_moment(updates, mu, b1, 1)
        nu = optax.tree.update_moment_per_elem_norm(updates, nu, b2, 2)
        mu_hat, nu_hat = optax.tree.bias_correction(mu, b1, count), optax.tree.bias_correction(
            nu, b2, count)
        new = optree.tree_map(lambda m, v: m / (v.sqrt() + eps), mu_hat, nu_hat)
        return new, (count, mu, nu)

    return optax.GradientTransformation(init, update)


@pytest.mark.parametrize("backend", [None, "aot_eager"])
def test_a_declared_custom_optimizer_runs_fused_with_its_pure_numbers(backend):
    tx = optax.chain(_custom_adam(), optax.scale(-0.05))
    testing.check_declarations(tx, PARAMS, _grads)
    pure_params, state = _tree(*SHAPES), tx.init(PARAMS)
    fused_params = _tree(*SHAPES)
    step = optax.fused_step(tx, fused_params, backend=backend, validate=True)
    optimizers = {fused: optax.TorchOptimizer(
        [torch.nn.Parameter(p.clone()) for p in _tree(*SHAPES).values()], tx, fused=fused)
        for fused in (False, True)}
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no "steps unfused"
        for number in range(3):
            grads = _grads(number)
            updates, state = tx.update(grads, state, pure_params)
            pure_params = optax.apply_updates(pure_params, updates)
            step(grads)
            for optimizer in optimizers.values():
                for param, grad in zip(optimizer.param_groups[0]["params"], grads.values(),
                                       strict=True):
                    param.grad = grad.clone()
                optimizer.step()
    testing.assert_trees_all_close(fused_params, pure_params)
    unfused, fused = (optimizers[f].state_dict() for f in (False, True))
    testing.assert_leaves_close(optimizers[True].param_groups[0]["params"], pure_params)
    testing.assert_trees_all_close(fused["state"], unfused["state"])


def test_declaring_a_built_transformation_in_place_reaches_its_update_behind_the_entry():
    seen = []

    def update(updates, state, params=None, *, inplace=False):
        seen.append(inplace)
        return updates, state

    built = optax.GradientTransformationExtraArgs(optax.init_empty_state, update)
    built.update(_grads(0), built.init(PARAMS), PARAMS, inplace=True)  # dropped at the entry
    declared = capabilities.supports_inplace(built)
    declared.update(_grads(0), declared.init(PARAMS), PARAMS, inplace=True)
    assert seen == [False, True]
    assert capabilities.capabilities_of(built).inplace is False
    assert capabilities.capabilities_of(declared).inplace is True
