#!/bin/bash
# The GPU check: one run on a lent GPU machine that fits TOTAL_S (570 s; ~7 min expected on an H100), from a copy of
# this tree (tree/) beside wheels of tinker 0.38 and its pure-Python dependencies for that machine's Python 3.12 (h2,
# hpack and hyperframe included: the SDK's HTTP/2 client needs them), "$WHEELS"/*.whl relative to tree/.
# It installs them and the ghost_trace plugin into $SITE, checks that everything imports and that torch sees the GPU,
# then runs, each with its own timeout and its stdout/stderr in $OUT/NAME.log/.err: the GPU tests (every test file
# under tests/ that asks torch.cuda.is_available), gpu_sampling.py, gpu_step.py, gpu_warm_up.py (the memory plan
# and the sampler's warm-up from a fresh service, against every step eager) and serve_overhead.py.
# $OUT/summary.txt gathers the figures as each step ends (and is printed last); the exit status is 0 when every
# step passed, 1 when one failed or was skipped, 3-5 when nothing could run (install, plugin, imports or GPU).
#
# As used: `mkdir -p .gpu/tree && git archive HEAD | tar -x -C .gpu/tree && cp benchmarks/gpu_check.sh .gpu/`,
# wheels in .whl/ (pip download --only-binary=:all: --python-version 3.12 ...), then `bash .gpu/gpu_check.sh` there
# with .gpu and .whl carried; or straight from the checkout the run copies: `TREE=. WHEELS=.whl bash benchmarks/gpu_check.sh`
# with .whl carried.
# Rehearsal on a CPU machine (minutes; the suite only checks the syntax): the benchmarks' --smoke runs and the GPU
# test files collected (their CUDA tests skip), with this checkout and its venv:
#   SMOKE=1 WHEELS= PYTHON=.venv/bin/python TREE=. OUT=$(mktemp -d) bash benchmarks/gpu_check.sh
# Knobs: TREE (the tree to run in), OUT (required), PYTHON (python3), WHEELS (../../.whl; empty: install nothing and
# use PYTHON's own packages), SITE (/tmp/site), SMOKE (1: on the CPU, figures mean nothing), TESTS (test files),
# TEST_K (the tests' -k expression: 'not cpu' on the GPU, leaving the CPU's parametrizations and tests named for the CPU
# to the CI, so no test that needs a GPU says 'cpu' in its name: tests/test_benchmarks.py checks; 'cuda' with
# SMOKE), PYTEST_ARGS (more pytest arguments), BENCH (benchmark scripts), TEST_S / BENCH_S (a step's timeout; BENCH_S for every
# benchmark), TOTAL_S (the whole run: a step gets at most what is left of it).
set -u
: "${OUT:?set OUT to the folder that takes the logs}"
START=$(date +%s)
DEADLINE=$(( START + ${TOTAL_S:-570} ))
cd "${TREE:-$(dirname "$0")/tree}" || exit 3
PY=${PYTHON:-python3}
SMOKE=${SMOKE:-}
WHEELS=${WHEELS-../../.whl}
SITE=${SITE:-/tmp/site}
SUMMARY=$OUT/summary.txt
FAILED=0
mkdir -p "$OUT"
: > "$SUMMARY"

install() {  # install WHAT...: into $SITE, from nothing but WHAT; pip's words in $OUT/install.log
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$@" >> "$OUT/install.log" 2>&1
}
if [ -n "$WHEELS" ]; then
  install "$WHEELS"/*.whl || { tail -20 "$OUT/install.log"; exit 3; }
  install --no-build-isolation plugins/ghost_trace || { tail -20 "$OUT/install.log"; exit 4; }
  export PYTHONPATH="$PWD:$SITE"
else
  export PYTHONPATH="$PWD"
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

# What the run needs, all checked at once, so that a missing package costs seconds instead of a benchmark.
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$SUMMARY"
GPU=$([ -n "$SMOKE" ] && echo 0 || echo 1) "$PY" - >> "$SUMMARY" 2>&1 <<'EOF'
import importlib, os, sys
missing = []
for name in ("torch", "transformers", "peft", "tinker", "h2", "pytest", "pytest_asyncio", "minds_core.testing",
             "minds_core.serve.engine", "minds_core.backends.local", "minds_ghost_trace"):
    try:
        importlib.import_module(name)
    except Exception as exc:  # any failure to import is reported, all of them at once
        missing.append(f"{name} ({type(exc).__name__}: {exc})")
versions = (f"{n} {getattr(sys.modules.get(n), '__version__', 'missing')}" for n in ("torch", "transformers", "peft", "tinker"))
print(f"python {sys.version.split()[0]},", ", ".join(versions))
if missing:
    sys.exit("cannot import: " + "; ".join(missing))
if os.environ["GPU"] == "1" and not sys.modules["torch"].cuda.is_available():
    sys.exit("torch sees no GPU (run with SMOKE=1 for a rehearsal on the CPU)")
EOF
[ $? -eq 0 ] || { cat "$SUMMARY"; exit 5; }
TIMEOUT_ARG=$("$PY" -c "import pytest_timeout" 2>/dev/null && echo "--timeout 240")
# minds' pytest plugin, unless installed (then its entry point loads it already)
PLUGIN_ARG=$("$PY" -c "from importlib.metadata import entry_points as e
raise SystemExit(any(p.value == 'minds_core.testing' for p in e(group='pytest11')))" && echo "-p minds_core.testing")

limit() {  # the timeout of step $1 before TOTAL_S caps it
  case $1 in
    tests) echo "${TEST_S:-200}" ;;
    gpu_sampling.py) echo "${BENCH_S:-120}" ;;
    gpu_step.py) echo "${BENCH_S:-180}" ;;
    gpu_warm_up.py) echo "${BENCH_S:-90}" ;;
    *) echo "${BENCH_S:-200}" ;;
  esac
}

step() {  # step NAME COMMAND...: run COMMAND with its timeout; stdout in $OUT/NAME.log, stderr in $OUT/NAME.err
  local name=$1 left own seconds began rc why=""
  shift
  left=$(( DEADLINE - $(date +%s) ))
  own=$(limit "$name")
  seconds=$(( own < left ? own : left ))
  if [ "$seconds" -lt 15 ]; then
    echo "== $name: skipped, ${left} s of TOTAL_S left" >> "$SUMMARY"
    FAILED=1
    return
  fi
  began=$(date +%s)
  timeout -k 15 "$seconds" "$@" > "$OUT/$name.log" 2> "$OUT/$name.err"
  rc=$?
  { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && why=" (timed out after ${seconds} s)"
  [ $rc -eq 0 ] || FAILED=1
  {
    echo "== $name: rc=$rc$why in $(( $(date +%s) - began )) s"
    if [ "$name" = tests ]; then
      grep -E "^(FAILED|ERROR) |[0-9]+ (passed|failed|skipped|errors?)" "$OUT/$name.log" | tail -25
      [ -z "$why" ] || tail -2 "$OUT/$name.log" | sed 's/^/  stopped in: /'  # -v: the test that was running
    else
      grep -v -E "^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} \[" "$OUT/$name.log"  # the backend's log lines
    fi
    [ $rc -eq 0 ] || tail -5 "$OUT/$name.err" | sed 's/^/  stderr: /'
  } >> "$SUMMARY"
}

# shellcheck disable=SC2046,SC2086  # word splitting of the lists and of the optional arguments is meant
step tests "$PY" -m pytest -o addopts="" --import-mode=importlib $PLUGIN_ARG -p no:cacheprovider -v \
  --durations=10 $TIMEOUT_ARG -k "${TEST_K-$([ -n "$SMOKE" ] && echo cuda || echo 'not cpu')}" ${PYTEST_ARGS-} \
  ${TESTS:-$(grep -rl --include='*.py' 'cuda\.is_available' tests | sort)}
for b in ${BENCH:-gpu_sampling.py gpu_step.py gpu_warm_up.py serve_overhead.py}; do
  step "$b" "$PY" "benchmarks/$b" ${SMOKE:+--smoke}
done
echo "== all: $(( $(date +%s) - START )) s, $([ $FAILED -eq 0 ] && echo 'every step passed' || echo 'a step failed')" >> "$SUMMARY"
cat "$SUMMARY"
exit $FAILED
