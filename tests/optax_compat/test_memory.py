"""``optax_compat.memory``: quantized and low-precision states, compensated and stochastically
rounded low-precision parameters."""

import io
import math

import hypothesis
import optree
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import optax_compat as optax
from optax_compat import memory, testing
from optax_compat._runtime import counter_random, quantization
from optax_compat.testing import strategies

SETTINGS = hypothesis.settings(max_examples=25, deadline=None, derandomize=True,
                               suppress_health_check=[hypothesis.HealthCheck.too_slow])


def _params(seed=0):
    return {"w": testing.seeded_randn(64, 80, seed=seed),
            "b": testing.seeded_randn(80, seed=seed + 1),
            "blocks": [testing.seeded_randn(3, 700, seed=seed + 2)]}


def _grads(step):
    return optree.tree_map(lambda p: testing.seeded_randn(*p.shape, seed=100 + step) * 0.1,
                           _params())


def _run(tx, steps=4, params=None, grads=_grads):
    params = _params() if params is None else params
    state = tx.init(params)
    for step in range(steps):
        updates, state = tx.update(grads(step), state, params)
        params = optax.apply_updates(params, updates)
    return params, state


def _bytes(tree):
    return sum(x.numel() * x.element_size() for x in optree.tree_leaves(tree)
               if isinstance(x, torch.Tensor))


# --- quantization itself ---------------------------------------------------------------------


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("signed", [True, False])
def test_the_dynamic_codes_are_sorted_distinct_and_reach_one(bits, signed):
    code = quantization.code(bits, signed)
    assert code.numel() == 2 ** bits and torch.all(code[1:] > code[:-1])
    assert code[-1] == 1.0 and (0.0 in code.tolist()) == signed and (code.min() < 0) == signed


def _half_steps(normalized, code):
    """For each normalized value, half the gap between the code values around it (the
    distance to the code's end outside it)."""
    above = torch.bucketize(normalized, code).clamp(1, code.numel() - 1)
    low, high = code[above - 1], code[above]
    inside = (normalized >= code[0]) & (normalized <= code[-1])
    outside = torch.minimum((normalized - code[0]).abs(), (normalized - code[-1]).abs())
    return torch.where(inside, (high - low) / 2, outside)


@SETTINGS
@given(bits=st.sampled_from([8, 4]), size=st.integers(1, 700), block=st.sampled_from([2, 64, 256]),
       scale=st.floats(1e-6, 1e6), nonnegative=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_round_trip_error_is_at_most_half_a_quantization_step_of_each_block(
        bits, size, block, scale, nonnegative, seed):
    x = testing.seeded_randn(size, seed=seed) * scale
    x = x.abs() if nonnegative else x
    stored = quantization.quantize(x, bits, block)
    back = quantization.dequantize(stored, bits, block)
    assert back.shape == x.shape and back.dtype == x.dtype
    padded = torch.cat([x, x.new_zeros(-size % block)]).view(-1, block)
    largest = padded.abs().amax(1, keepdim=True)
    unsigned = padded.amin(1, keepdim=True) >= 0
    normalized = padded / torch.where(largest > 0, largest, 1.0)
    bound = torch.where(unsigned, _half_steps(normalized, quantization.code(bits, False)),
                        _half_steps(normalized, quantization.code(bits, True))) * largest
    error = (back - x).abs()
    assert torch.all(error <= bound.reshape(-1)[:size] * (1 + 1e-5) + 1e-30 * scale)


def _hard_values(code):
    """Random values of every decade, the code's own values, the midpoints between them and
    each midpoint's float32 neighbours: where a nearest-value search can go wrong."""
    midpoints = (code[1:] + code[:-1]) / 2
    decades = (testing.seeded_randn(4000, seed=1).clamp(-1, 1)
               * 10 ** -(torch.arange(4000) % 9).float())
    return torch.cat([decades, code, midpoints, torch.nextafter(midpoints, torch.tensor(2.0)),
                      torch.nextafter(midpoints, torch.tensor(-2.0))]).clamp(code[0], code[-1])


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("signed", [True, False])
def test_the_encoder_picks_the_nearest_value_of_the_code(bits, signed):
    code = quantization.code(bits, signed)
    values = _hard_values(code)
    unsigned = torch.full_like(values, not signed, dtype=torch.bool)
    chosen = quantization._encode(values, unsigned, bits).long()
    assert chosen.min() >= 0 and chosen.max() < 2 ** bits
    error = (code[chosen] - values).abs()
    best = (code[None, :] - values[:, None]).abs().amin(dim=1)
    # Exact but where two values are equally near up to float32 rounding of the position on
    # the code's grid (a midpoint's neighbours): within two units in the last place.
    assert torch.all(error <= best + 4 * torch.finfo(torch.float32).eps * values.abs())


@pytest.mark.parametrize("bits", [8, 4])
def test_compiled_quantization_is_eager_quantization_bit_for_bit(bits):
    """Compiled, the values are computed by selects; eagerly, read from a table of the same."""
    x = torch.cat([testing.seeded_randn(3000, seed=bits), testing.seeded_randn(1000, seed=2).abs()
                   * 1e-3, torch.zeros(256)])

    def round_trip(x):
        stored = quantization.quantize(x, bits)
        return stored, quantization.dequantize(stored, bits)

    (codes, scales, _), back = round_trip(x)
    (compiled_codes, compiled_scales, _), compiled_back = torch.compile(
        round_trip, backend="inductor", fullgraph=True)(x)
    assert torch.equal(codes, compiled_codes) and torch.equal(scales, compiled_scales)
    assert torch.equal(back, compiled_back)


@pytest.mark.parametrize("bits", [8, 4])
def test_quantization_does_not_depend_on_the_default_dtype(bits):
    x = torch.cat([testing.seeded_randn(700, seed=bits), testing.seeded_randn(300, seed=3).abs()])
    stored = quantization.quantize(x, bits)
    unsigned = torch.arange(2 * x.numel()) % 2 == 0
    encoded = quantization._encode(x.repeat(2).clamp(-1, 1).abs(), unsigned, bits)
    decoded = quantization._decode(encoded, unsigned, bits)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        again = quantization.quantize(x, bits)
        assert torch.equal(quantization._encode(x.repeat(2).clamp(-1, 1).abs(), unsigned, bits),
                           encoded)
        assert torch.equal(quantization._decode(encoded, unsigned, bits), decoded)
    finally:
        torch.set_default_dtype(default)
    assert torch.equal(again.codes, stored.codes) and torch.equal(again.scales, stored.scales)


def test_a_block_of_zeros_and_a_non_finite_block_stay_what_they_were():
    x = torch.zeros(512)
    x[300] = float("inf")
    back = quantization.dequantize(quantization.quantize(x))
    assert torch.equal(back[:256], torch.zeros(256)) and not torch.isfinite(back[256:]).all()


@SETTINGS
@given(magnitude=st.floats(1e-3, 1e4), negative=st.booleans(),
       dtype=st.sampled_from([torch.bfloat16, torch.float16]))
def test_stochastic_rounding_is_unbiased(magnitude, negative, dtype):
    value, draws = -magnitude if negative else magnitude, 4000
    x = torch.full((draws,), value, dtype=torch.float64)
    uniform = counter_random.uniform_like(torch.tensor(7), torch.tensor(1), 0, x)
    rounded = quantization.stochastic_round(x, dtype, uniform).double()
    nearest = x[:1].to(dtype)
    other = torch.nextafter(nearest, torch.where(nearest.double() > x[:1], float("-inf"),
                                                 float("inf")).to(dtype))
    gap = (other.double() - nearest.double()).abs().item()
    assert set(rounded.unique().tolist()) <= {nearest.double().item(), other.double().item()}
    chance = abs(value - nearest.double().item()) / gap if gap else 0.0
    # Bernoulli(chance) steps of ``gap``: the mean lies within 4.5 standard errors of the value.
    error = gap * (4.5 * math.sqrt(chance * (1 - chance) / draws) + 1 / draws)
    assert abs(rounded.mean().item() - value) <= error


def test_stochastic_rounding_keeps_values_already_representable_and_non_finite_ones():
    x = torch.tensor([1.0, 0.5, float("inf"), float("-inf"), float("nan"), 0.0])
    uniform = torch.full_like(x, 0.999)
    rounded = quantization.stochastic_round(x, torch.bfloat16, uniform)
    assert torch.equal(rounded[:4].float(), x[:4]) and rounded[4].isnan() and rounded[5] == 0


# --- the wrappers ------------------------------------------------------------------------------


@SETTINGS
@given(strategies.params_and_grads(steps=3, dtypes=[torch.float32], min_value=-5.0,
                                   max_value=5.0))
def test_cast_state_to_float32_and_quantize_state_of_small_leaves_equal_the_transformation(
        params_and_grads):
    params, grads = params_and_grads
    for wrapped in (memory.cast_state(optax.adamw(1e-2), torch.float32),
                    memory.quantize_state(optax.adamw(1e-2), min_size=10 ** 9)):
        plain = optax.adamw(1e-2)
        p, s, q, r = params, wrapped.init(params), params, plain.init(params)
        for grad in grads:
            u, s = wrapped.update(grad, s, p)
            v, r = plain.update(grad, r, q)
            p, q = optax.apply_updates(p, u), optax.apply_updates(q, v)
        testing.assert_trees_all_close(p, q, rtol=0.0, atol=0.0)


TRANSFORMS = {
    "adamw": lambda: optax.adamw(1e-2, weight_decay=0.1),
    "lion": lambda: optax.lion(1e-3),
    "adafactor": lambda: optax.adafactor(1e-2),
    "sgd momentum": lambda: optax.sgd(1e-2, momentum=0.9),
    "clip + adamw(schedule)": lambda: optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 1e-2, 2, 10))),
    "inject_hyperparams": lambda: optax.inject_hyperparams(optax.adamw)(learning_rate=1e-2),
    "MultiSteps": lambda: optax.MultiSteps(optax.adamw(1e-2), every_k_schedule=2),
}
WRAPPERS = {
    "8-bit": lambda tx: memory.quantize_state(tx, min_size=1000),
    "4-bit": lambda tx: memory.quantize_state(tx, bits=4, min_size=1000),
    "bf16": lambda tx: memory.cast_state(tx, torch.bfloat16),
    "bf16 nearest": lambda tx: memory.cast_state(tx, torch.bfloat16, stochastic_rounding=False),
}
# How far four steps may move the params from the unwrapped run's (lr 1e-2).
TOLERANCE = {"8-bit": 2e-3, "4-bit": 2e-2, "bf16": 2e-3, "bf16 nearest": 2e-3}


@pytest.mark.parametrize("wrapper", sorted(WRAPPERS))
@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_wrapped_transformations_follow_the_unwrapped_ones(name, wrapper):
    reference, _ = _run(TRANSFORMS[name]())
    params, state = _run(WRAPPERS[wrapper](TRANSFORMS[name]()))
    # Sign-like steps (Adam's first ones, Lion's) move a parameter by the full learning rate
    # either way when a near-zero moment's rounding flips its sign: a few elements may.
    for ours, theirs in zip(optree.tree_leaves(params), optree.tree_leaves(reference),
                            strict=True):
        off = ((ours - theirs).abs() > TOLERANCE[wrapper]).double().mean().item()
        assert off <= (0.05 if wrapper == "4-bit" else 0.01), f"{off:.1%} moved away"
    wide = [x for x in optree.tree_leaves(state) if isinstance(x, torch.Tensor)
            and x.dtype == torch.float32 and x.numel() >= 1000]
    if name != "adafactor" or wrapper.startswith("bf16"):  # adafactor's factors are small
        assert wide == [], f"{len(wide)} large float32 state leaves left"


def test_inside_masked_and_partition():
    def matrices(tree):
        return optree.tree_map(lambda x: x.dim() == 2, tree)

    quantized = memory.quantize_state(optax.adam(1e-2), min_size=1000)
    masked, _ = _run(optax.masked(quantized, matrices))
    partitioned, _ = _run(optax.partition(
        {True: quantized, False: optax.set_to_zero()}, matrices))
    reference, _ = _run(optax.adam(1e-2))
    for params in (masked, partitioned):
        testing.assert_trees_all_close(params["w"], reference["w"], rtol=0.0, atol=2e-3)
    assert torch.equal(partitioned["b"], _params()["b"])


@pytest.mark.parametrize("wrapper", ["8-bit", "4-bit", "bf16"])
def test_state_bytes_per_parameter(wrapper):
    params = {"w": torch.zeros(1 << 20)}
    state = WRAPPERS[wrapper](optax.adamw(1e-3)).init(params)
    per_parameter = _bytes(state) / params["w"].numel()
    assert per_parameter <= {"8-bit": 2.1, "4-bit": 1.1, "bf16": 4.01}[wrapper]


def test_none_gradients_and_empty_trees():
    tx = memory.quantize_state(optax.adam(1e-2), min_size=1000)
    params = _params()
    state = tx.init(params)
    grads = {**_grads(0), "b": None}
    updates, _ = tx.update(grads, state, params)
    assert updates["b"] is None
    for wrapped in (tx, memory.cast_state(optax.adam(1e-2), torch.bfloat16)):
        empty_updates, _ = wrapped.update({}, wrapped.init({}), {})
        assert empty_updates == {}


def test_on_the_meta_device():
    params = optree.tree_map(lambda p: p.to("meta"), _params())
    for tx in (memory.quantize_state(optax.adamw(1e-2), min_size=1000),
               memory.cast_state(optax.adamw(1e-2), torch.bfloat16)):
        state = tx.init(params)
        updates, _ = tx.update(optree.tree_map(torch.ones_like, params), state, params)
        assert updates["w"].device.type == "meta" and updates["w"].shape == (64, 80)


@pytest.mark.parametrize("wrapper", ["8-bit", "4-bit", "bf16"])
def test_torch_optimizer_checkpoints_load_with_weights_only_and_resume_exactly(wrapper):
    def model():
        torch.manual_seed(0)  # inside fork_rng: the global generator is restored
        return torch.nn.Sequential(torch.nn.Linear(40, 50), torch.nn.Tanh(),
                                   torch.nn.Linear(50, 1))

    def train(net, optimizer, steps):
        for step in steps:
            x = testing.seeded_randn(8, 40, seed=step)
            optimizer.zero_grad()
            net(x).pow(2).mean().backward()
            optimizer.step()

    with torch.random.fork_rng():
        net, other = model(), model()
    make = lambda net: optax.TorchOptimizer(
        net.parameters(), WRAPPERS[wrapper](optax.adamw(1e-2)) if wrapper != "4-bit" else
        memory.quantize_state(optax.adamw(1e-2), bits=4, min_size=100))
    optimizer = make(net)
    train(net, optimizer, range(3))
    buffer = io.BytesIO()
    torch.save({"model": net.state_dict(), "optimizer": optimizer.state_dict()}, buffer)
    buffer.seek(0)
    checkpoint = torch.load(buffer, weights_only=True)
    other.load_state_dict(checkpoint["model"])
    resumed = make(other)
    resumed.load_state_dict(checkpoint["optimizer"])
    train(net, optimizer, range(3, 6))
    train(other, resumed, range(3, 6))
    for a, b in zip(net.parameters(), other.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("backend", [None, "aot_eager"])
def test_quantize_state_runs_fused_leaf_by_leaf_with_its_unfused_numbers(backend):
    tx = memory.quantize_state(optax.adamw(1e-2), min_size=1000)
    fused_params = _params()
    step = optax.fused_step(tx, fused_params, backend=backend)
    assert step.layout == "stacked"
    reference, _ = _run(tx, steps=3)
    for number in range(3):
        step(_grads(number))
    testing.assert_trees_all_close(fused_params, reference, rtol=0.0, atol=1e-5)


def test_cast_state_rounding_to_nearest_fuses_and_stochastic_rounding_says_why_not():
    fused = memory.cast_state(optax.adamw(1e-2), torch.bfloat16, stochastic_rounding=False)
    assert optax.fused_step(fused, _params(), backend=None).layout == "flat"
    with pytest.raises(ValueError, match="not declared"):
        optax.fused_step(memory.cast_state(optax.adamw(1e-2), torch.bfloat16), _params())


def test_compiles_without_graph_breaks():
    for tx in (memory.quantize_state(optax.adamw(1e-2), min_size=1000),
               memory.cast_state(optax.adamw(1e-2), torch.bfloat16)):
        testing.check_compilable(tx, _params(), _grads(0))


# --- low-precision parameters ------------------------------------------------------------------


def _bf16_run(tx, update_params, steps=200):
    params = {"w": torch.ones(1000, dtype=torch.bfloat16)}
    state = tx.init(params)
    for step in range(steps):
        grads = {"w": testing.seeded_randn(1000, seed=step) * 0.1 + 1.0}
        updates, state = tx.update(grads, state, params)
        params = update_params(params, updates, step)
    return params["w"].double()


def test_bfloat16_parameters_follow_float32_with_kahan_summation_or_stochastic_rounding():
    float32 = {"w": torch.ones(1000)}
    sgd = optax.sgd(1e-4)
    state = sgd.init(float32)
    for step in range(200):
        grads = {"w": testing.seeded_randn(1000, seed=step) * 0.1 + 1.0}
        updates, state = sgd.update(grads, state, float32)
        float32 = optax.apply_updates(float32, updates)
    target = float32["w"].double()
    plain = _bf16_run(optax.sgd(1e-4), lambda p, u, s: optax.apply_updates(p, u))
    kahan = _bf16_run(optax.chain(optax.sgd(1e-4), memory.kahan_summation()),
                      lambda p, u, s: optax.apply_updates(p, u))
    rounded = _bf16_run(optax.sgd(1e-4), lambda p, u, s: memory.apply_updates(
        p, u, rounding="stochastic", key=s))
    moved = (1 - target).mean()  # about 0.02: far below bfloat16's spacing of 2**-8 at 1
    assert torch.equal(plain, torch.ones(1000, dtype=torch.float64))  # every step lost
    spacing = 2.0 ** -9  # bfloat16's below 1
    assert abs((1 - kahan).mean() - moved) <= spacing / 2  # the residual sits in the state
    assert abs((1 - rounded).mean() - moved) < 0.1 * moved  # 4 standard errors


def test_kahan_summation_needs_params_and_apply_updates_checks_its_arguments():
    tx = memory.kahan_summation()
    with pytest.raises(ValueError, match="needs the params"):
        tx.update({"w": torch.ones(2)}, tx.init({"w": torch.ones(2)}))
    with pytest.raises(ValueError, match="rounding must be"):
        memory.apply_updates({"w": torch.ones(2)}, {"w": torch.ones(2)}, rounding="up")
    with pytest.raises(ValueError, match="needs a key"):
        memory.apply_updates({"w": torch.ones(2)}, {"w": torch.ones(2)}, rounding="stochastic")


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="bits must be one of"):
        memory.quantize_state(optax.adam(1e-3), bits=3)
    with pytest.raises(ValueError, match="even at 4 bits"):
        memory.quantize_state(optax.adam(1e-3), bits=4, block_size=5)
    with pytest.raises(ValueError, match="floating dtype"):
        memory.cast_state(optax.adam(1e-3), torch.int8)


def test_the_wrappers_declarations_hold_on_data():
    bf16 = optree.tree_map(lambda p: p.to(torch.bfloat16), _params())
    checks = {
        "quantize_state": (memory.quantize_state(optax.adamw(1e-2), min_size=100), _params()),
        "cast_state": (memory.cast_state(optax.adamw(1e-2), torch.bfloat16,
                                         stochastic_rounding=False), _params()),
        "kahan_summation": (optax.chain(optax.scale(-1e-2), memory.kahan_summation()), bf16),
    }
    ran = {name: testing.check_declarations(tx, params, lambda step, params=params: optree.tree_map(
        lambda p: testing.seeded_randn(*p.shape, seed=step).to(p.dtype), params))
        for name, (tx, params) in checks.items()}
    assert ran == {"quantize_state": ("check_per_leaf",), "cast_state": ("check_elementwise",),
                   "kahan_summation": ("check_elementwise", "check_inplace")}


def test_dtensor_leaves_are_stored_shard_by_shard():
    import datetime

    import torch.distributed as dist
    from torch.distributed.tensor import Shard, distribute_tensor, init_device_mesh

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
    try:
        with torch.device("cpu"):  # gloo's mesh: the CPU's tensors, whatever the test device
            mesh = init_device_mesh("cpu", (1,))
            plain = _params()

            def shard(tree):
                return optree.tree_map(lambda p: distribute_tensor(p, mesh, [Shard(0)]), tree)

            sharded = shard(plain)
            for wrapper in ("8-bit", "4-bit", "bf16"):
                params, state = _run(WRAPPERS[wrapper](optax.adamw(1e-2)), params=sharded,
                                     grads=lambda step: shard(_grads(step)))
                reference, _ = _run(WRAPPERS[wrapper](optax.adamw(1e-2)), params=plain)
                assert isinstance(params["w"], type(sharded["w"]))
                testing.assert_trees_all_close(optree.tree_map(lambda p: p.full_tensor(), params),
                                               reference)
                assert any(isinstance(x, type(sharded["w"])) for x in optree.tree_leaves(state))
    finally:
        dist.destroy_process_group()
