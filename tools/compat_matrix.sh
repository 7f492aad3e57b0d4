#!/usr/bin/env bash
# The supported-versions matrix: the version-sensitive tests under each torch x optree pair.
#
# For each torch version it creates (or reuses) a virtual environment DIR/torch-VERSION, installs
# torch and this repository editable with the test extra, then for each optree version installs
# that optree, records the versions actually installed and runs the tests. It prints a Markdown
# table (also written to DIR/matrix.md, with each cell's log in DIR/logs/) and exits 1 if any
# cell failed, ran out of time or could not be set up.
#
# A torch version is installed with the machine's pip configuration; the word `latest` stands
# for the newest torch on the package registry, resolved and installed (with everything else in
# its environment) with PIP_CONFIG_FILE=/dev/null, so that a machine whose pip configuration
# points at local wheels still tests what a user would get from the registry.
#
# Each venv's optree is put back to the version found there when its cells are done, so reusing
# environments that other work shares leaves them as they were.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: tools/compat_matrix.sh [options] [-- extra pytest arguments]

Options:
  --dir DIR          where the venvs, logs and matrix.md go
                     (default: $COMPAT_MATRIX_DIR, else ~/.cache/optax-compat-matrix);
                     point it at a directory holding torch-VERSION venvs to reuse them
  --torch "V ..."    torch versions (default: "2.13.0 2.14.1 latest")
  --optree "V ..."   optree versions (default: "0.13.0 0.20.0", the ends of the range
                     pyproject.toml admits)
  --timeout SECONDS  time limit of each test run and of each pip call (default: 1800):
                     a run takes at most about
                     torch versions x (2 x optree versions + 3) x SECONDS
  --python PYTHON    interpreter that creates the venvs (default: python3)
  --whole-suite      run every test (but the docs site's: the venvs have no docs extra)
                     instead of the version-sensitive files; about 10 minutes a cell on
                     two cores (pass -- -n 2)
  --dry-run          list the cells and their venvs; create and install nothing
  -h, --help         this text
EOF
}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${COMPAT_MATRIX_DIR:-$HOME/.cache/optax-compat-matrix}
torch_versions="2.13.0 2.14.1 latest"
optree_versions="0.13.0 0.20.0"
cell_timeout=1800
python=python3
dry_run=0
whole_suite=0
pytest_extra=()

while (($#)); do
    case $1 in
        --dir|--torch|--optree|--timeout|--python)
            if (($# < 2)); then
                echo "compat_matrix.sh: $1 needs a value" >&2
                exit 2
            fi
            case $1 in
                --dir) dir=$2 ;;
                --torch) torch_versions=$2 ;;
                --optree) optree_versions=$2 ;;
                --timeout) cell_timeout=$2 ;;
                --python) python=$2 ;;
            esac
            shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        --whole-suite) whole_suite=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; pytest_extra=("$@"); break ;;
        *) echo "compat_matrix.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
done

if ! [[ $cell_timeout =~ ^[1-9][0-9]*$ ]]; then
    echo "compat_matrix.sh: --timeout takes a positive number of seconds, got '$cell_timeout'" >&2
    exit 2
fi
read -r -a torch_list <<<"$torch_versions"
read -r -a optree_list <<<"$optree_versions"
if ((${#torch_list[@]} == 0 || ${#optree_list[@]} == 0)); then
    echo "compat_matrix.sh: --torch and --optree need at least one version each" >&2
    exit 2
fi

tests=(
    tests/optax_compat/test_fused_step.py
    tests/optax_compat/test_inductor_passes.py
    tests/optax_compat/test_compile.py
    tests/optax_compat/test_adam_engine.py
    tests/optax_compat/test_torch_optimizer.py
    tests/optax_compat/test_torch_optimizer_fused.py
    tests/optax_compat/test_declarations.py
    tests/test_torch_distributed.py
    tests/torchopt_fn/test_distributed.py
)
for visual in "$repo"/tests/torchopt_fn/test_visual*.py; do
    tests+=("${visual#"$repo"/}")
done
if ((whole_suite)); then
    tests=(tests --ignore=tests/test_docs.py)
fi

if ((dry_run)); then
    for torch_version in "${torch_list[@]}"; do
        if [[ $torch_version == latest ]]; then
            where="$dir/torch-<newest>, from the registry (PIP_CONFIG_FILE=/dev/null)"
        else
            where="$dir/torch-$torch_version, the machine's pip configuration"
        fi
        for optree_version in "${optree_list[@]}"; do
            echo "torch $torch_version | optree $optree_version | $where"
        done
    done
    echo "tests: ${tests[*]} ${pytest_extra[*]}"
    exit 0
fi

mkdir -p "$dir/logs"
log() { echo "[compat_matrix $(date +%H:%M:%S)] $*" >&2; }
bounded() { timeout --kill-after=30 "$cell_timeout" "$@"; }

# Runs pip of the venv at $1 with the rest of the arguments, under the configuration of that
# venv's torch source ($registry: 1 for the registry).
venv_pip() {
    local venv=$1
    shift
    if ((registry)); then
        PIP_CONFIG_FILE=/dev/null bounded "$venv/bin/python" -m pip "$@"
    else
        bounded "$venv/bin/python" -m pip "$@"
    fi
}

installed_version() {  # $1: venv, $2: module; prints nothing if it is not importable
    "$1/bin/python" -c "import $2; print($2.__version__)" 2>/dev/null || true
}

# The newest torch on the registry, as pip would pick it.
newest_registry_torch() {
    PIP_CONFIG_FILE=/dev/null bounded "$python" -m pip index versions torch 2>/dev/null \
        | sed -n 's/^torch (\(.*\))$/\1/p'
}

rows=()
failed_cells=0
add_row() {  # torch, optree, passed, failed, time
    rows+=("| $1 | $2 | $3 | $4 | $5 |")
}

# Every optree cell of a torch version whose environment could not be set up has failed.
set_up_failed() {
    local optree_version
    for optree_version in "${optree_list[@]}"; do
        add_row "$1" "$optree_version" - "set-up failed" -
        failed_cells=$((failed_cells + 1))
    done
}

for torch_wanted in "${torch_list[@]}"; do
    registry=0
    if [[ $torch_wanted == latest ]]; then
        registry=1
        torch_wanted=$(newest_registry_torch)
        if [[ -z $torch_wanted ]]; then
            log "could not read the newest torch from the registry"
            set_up_failed "latest (unresolved)"
            continue
        fi
        log "newest torch on the registry: $torch_wanted"
    fi
    venv=$dir/torch-$torch_wanted
    setup_log=$dir/logs/setup-torch-$torch_wanted.log
    : >"$setup_log"
    setup_ok=1
    # One && chain: `set -e` does not apply inside a command list followed by ||.
    {
        { [[ -x $venv/bin/python ]] || "$python" -m venv "$venv"; } \
            && { [[ $(installed_version "$venv" torch) == "$torch_wanted"?(+*) ]] \
                 || venv_pip "$venv" install "torch==$torch_wanted"; } \
            && venv_pip "$venv" install -e "$repo[test]" "torch==$torch_wanted"
    } >>"$setup_log" 2>&1 || setup_ok=0
    if ((!setup_ok)); then
        log "set-up of $venv failed; see $setup_log"
        set_up_failed "$torch_wanted"
        continue
    fi
    optree_found=$(installed_version "$venv" optree)
    for optree_version in "${optree_list[@]}"; do
        cell=torch-$torch_wanted-optree-$optree_version
        cell_log=$dir/logs/$cell.log
        if ! venv_pip "$venv" install "optree==$optree_version" >"$cell_log" 2>&1; then
            log "installing optree $optree_version failed; see $cell_log"
            add_row "$torch_wanted" "$optree_version" - "set-up failed" -
            failed_cells=$((failed_cells + 1))
            continue
        fi
        torch_installed=$(installed_version "$venv" torch)
        optree_installed=$(installed_version "$venv" optree)
        junit=$dir/logs/$cell.xml
        rm -f "$junit"
        log "$cell: running the tests (torch $torch_installed, optree $optree_installed)"
        start=$SECONDS
        status=0
        (cd "$repo" && bounded "$venv/bin/python" -m pytest -q -p no:randomly \
            -p no:cacheprovider --junitxml="$junit" "${tests[@]}" "${pytest_extra[@]}") \
            >>"$cell_log" 2>&1 || status=$?
        elapsed=$((SECONDS - start))
        counts=$("$venv/bin/python" - "$junit" <<'EOF' 2>/dev/null || true
import sys
import xml.etree.ElementTree as ET

suite = ET.parse(sys.argv[1]).getroot()
suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
tests, failures, errors, skipped = (int(suite.get(k, 0))
                                    for k in ("tests", "failures", "errors", "skipped"))
print(tests - failures - errors - skipped, failures + errors)
EOF
)
        read -r passed failed <<<"${counts:-- -}"
        if ((status == 124 || status == 137)); then
            failed="$failed (timed out after ${cell_timeout} s)"
        elif ((status != 0)) && [[ $failed == 0 || $failed == - ]]; then
            failed="$failed (pytest exit $status)"
        fi
        ((status == 0)) || failed_cells=$((failed_cells + 1))
        add_row "${torch_installed:-$torch_wanted (not importable)}" "${optree_installed:-?}" "$passed" "$failed" "$elapsed s"
        log "$cell: exit $status, $passed passed, $failed failed, $elapsed s; log: $cell_log"
    done
    if [[ -n $optree_found && $(installed_version "$venv" optree) != "$optree_found" ]]; then
        venv_pip "$venv" install "optree==$optree_found" >>"$setup_log" 2>&1 \
            || log "could not put optree $optree_found back in $venv; see $setup_log"
    fi
done

{
    echo "| torch | optree | passed | failed | time |"
    echo "|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
} | tee "$dir/matrix.md"
((failed_cells == 0))
