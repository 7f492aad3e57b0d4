#!/usr/bin/env bash
# Everything a session lent a CUDA GPU checks, in one bounded run, logs and tables into OUT_DIR:
#
#   1. versions.txt: the GPU, torch, CUDA, JAX, optree and Optax seen;
#   2. bench_memory_cuda.md/.log: benchmarks/bench_memory.py --device cuda --parts speed:
#      the 8-bit fused AdamW step against the float32 one (issue 40's speed row), first
#      because no other part measures it (given 60 s on an H200 after the tests, with
#      torchao's and bitsandbytes' columns too, it printed no row: compilations and imports
#      come first; those columns are left out now);
#   3. tests.log: tools/cuda_check.sh (the device-sensitive tests on cuda) plus the fused
#      engine's, the memory wrappers' and the Inductor passes' tests, with Optax (the oracle)
#      on JAX's CPU as in CI;
#   4. bench_all_cuda.md/.log: benchmarks/bench_all.py --device cuda, Adam and SGD at
#      (a), (c), (b), (d), in that order: TorchOptimizer (unfused and fused) and torchopt_fn
#      fused against torch.optim's fused and foreach kernels and Optax jit on JAX's GPU (rows
#      are written as they are measured, so a run cut short keeps them);
#
#   tools/gpu_checks.sh OUT_DIR
#
# A machine without registry access (the device machines lent here) gets what its image lacks
# as wheels, downloaded beside the repository for its Python and carried there:
#
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
#     --platform manylinux_2_17_x86_64 -d .whl \
#     optree==0.20.0 optax==0.2.8 torchao==0.18.0 bitsandbytes==0.50.2
#   # there:
#   pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site tools/gpu_checks.sh "$OUT"
#
# Environment: PYTHON (default python3); TESTS_SECONDS, BENCH_SECONDS, MEMORY_SECONDS bound
# the three parts (default 170, 120, 150 s: tests, bench_all, bench_memory); WORKERS, pytest's -n (default 12).
# Exit status: 0; each part's own status is in its log (a part that fails does not stop the rest).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: tools/gpu_checks.sh OUT_DIR}"
mkdir -p "$out"
python="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$python" -c 'import torch, jax, optree, optax
print("torch", torch.__version__, "CUDA", torch.version.cuda, "GPU", torch.cuda.is_available())
print("jax", jax.__version__, jax.devices(), "optree", optree.__version__, "optax", optax.__version__)'
} 2>&1 | tee "$out/versions.txt"

echo "== bench_memory"
timeout --kill-after=10 "${MEMORY_SECONDS:-150}" "$python" benchmarks/bench_memory.py \
  --device cuda --parts speed --sizes a,c --repeats 20 \
  --speed-implementations "fused float32,fused 8-bit" \
  --markdown "$out/bench_memory_cuda.md" 2>&1 | tee "$out/bench_memory.log"

echo "== tests"
JAX_PLATFORMS=cpu CUDA_CHECK_TIMEOUT="${TESTS_SECONDS:-170}" PYTHON="$python" \
  tools/cuda_check.sh -n "${WORKERS:-12}" -rfE -p no:randomly \
  tests/optax_compat/test_torch_optimizer_fused.py tests/optax_compat/test_fused_step.py \
  tests/optax_compat/test_memory.py tests/optax_compat/test_inductor_passes.py \
  tests/optax_compat/test_devices.py 2>&1 | tee "$out/tests.log"

echo "== bench_all"
timeout --kill-after=10 "${BENCH_SECONDS:-120}" "$python" benchmarks/bench_all.py --device cuda \
  --sizes a,c,b,d --optimizers adam,sgd --repeats 20 --warmup 3 --budget 20 \
  --implementations "TorchOptimizer,TorchOptimizer fused,torchopt_fn fused,torch foreach,torch fused,optax jit" \
  --markdown "$out/bench_all_cuda.md" 2>&1 | grep -v "^USDT" | tee "$out/bench_all.log"

exit 0
