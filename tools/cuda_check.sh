#!/usr/bin/env bash
# The device-sensitive tests on a GPU: runs them with OPTAX_COMPAT_TEST_DEVICE=cuda (tests take
# their tensors from the `device` fixture, and every other factory call lands there too; see
# tests/conftest.py) and prints the counts of passed, failed, errored and skipped tests.
#
#   tools/cuda_check.sh [pytest arguments...]          # e.g. -x, -n 4, -k adam
#   OPTAX_COMPAT_TEST_DEVICE=cpu tools/cuda_check.sh   # the same subset on the CPU
#
# Environment: OPTAX_COMPAT_TEST_DEVICE (default cuda), CUDA_CHECK_TIMEOUT (seconds for the
# whole run, default 1800), PYTHON (default python).
# Exit status: pytest's; 2 when CUDA is asked for but torch sees no GPU; 124 on timeout.
set -euo pipefail
cd "$(dirname "$0")/.."

device="${OPTAX_COMPAT_TEST_DEVICE:-cuda}"
limit="${CUDA_CHECK_TIMEOUT:-1800}"
python="${PYTHON:-python}"
tests=(
  tests/optax_compat/test_torch_optimizer.py
  tests/optax_compat/test_adam_engine.py
  tests/optax_compat/test_compile.py
  tests/optax_compat/test_numerics.py
  tests/optax_compat/test_update.py
  tests/optax_compat/test_alias.py
  tests/torchopt_fn/test_optim.py
  tests/torchopt_fn/test_alias.py
)

if [[ "$device" == cuda* ]] && ! "$python" -c \
    'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "cuda_check: OPTAX_COMPAT_TEST_DEVICE=$device, but torch.cuda.is_available() is False" \
       "(torch $("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)')):" \
       "run this on a machine with a CUDA GPU and a CUDA build of torch," \
       "or set OPTAX_COMPAT_TEST_DEVICE=cpu to run the subset on the CPU." >&2
  exit 2
fi

report="$(mktemp -d)"
trap 'rm -rf "$report"' EXIT
echo "cuda_check: ${#tests[@]} test files on $device, at most $limit s"
start=$SECONDS
status=0
OPTAX_COMPAT_TEST_DEVICE="$device" timeout --kill-after=30 "$limit" \
  "$python" -m pytest -q -p no:cacheprovider --junitxml="$report/junit.xml" "$@" "${tests[@]}" \
  || status=$?
elapsed=$((SECONDS - start))

if [[ $status -eq 124 || $status -eq 137 ]]; then
  echo "cuda_check: timed out after $limit s (CUDA_CHECK_TIMEOUT) on $device" >&2
  exit 124
fi
if [[ ! -s "$report/junit.xml" ]]; then
  echo "cuda_check: pytest wrote no report (exit status $status) on $device" >&2
  exit $((status == 0 ? 1 : status))
fi
"$python" - "$report/junit.xml" "$device" "$elapsed" <<'PY'
import sys
import xml.etree.ElementTree as ElementTree

root = ElementTree.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
count = {key: sum(int(suite.get(key, 0)) for suite in suites)
         for key in ("tests", "failures", "errors", "skipped")}
passed = count["tests"] - count["failures"] - count["errors"] - count["skipped"]
print(f"cuda_check: device={sys.argv[2]} passed={passed} failed={count['failures']} "
      f"errors={count['errors']} skipped={count['skipped']} in {sys.argv[3]} s")
PY
exit "$status"
