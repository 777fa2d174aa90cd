#!/bin/bash
# The GPU check, run on a lent GPU machine from a copy of this tree (tree/) beside wheels of tinker 0.38 and its
# pure-Python dependencies for that machine's Python ("${WHEELS:-../../.whl}"/*.whl, relative to tree/): it installs them and the
# ghost_trace plugin into /tmp/site, runs the GPU tests, then the GPU benchmarks, writing logs under $OUT.
# As used: `mkdir -p .gpu/tree && git archive HEAD | tar -x -C .gpu/tree && cp benchmarks/gpu_check.sh .gpu/`, wheels
# in .whl/ (pip download --python-version 3.12 ...), then `bash .gpu/gpu_check.sh` there with .gpu and .whl carried.
# Knobs: TREE, WHEELS, TESTS, TEST_S, BENCH, BENCH_S. A full run took ~245 s on an H100 (2026-11-26).
set -u
cd "${TREE:-$(dirname "$0")/tree}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${WHEELS:-../../.whl}"/*.whl || exit 3
python3 -m pip install -q --no-deps --no-build-isolation --no-index --target /tmp/site plugins/ghost_trace >/dev/null 2>&1 || exit 4
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "import torch, transformers, peft, tinker; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'tinker', tinker.__version__)" | tee -a $OUT/gpu.txt
T0=$(date +%s)
timeout ${TEST_S:-150} python3 -m pytest -o addopts="" --import-mode=importlib -p minds_core.testing -p no:cacheprovider -q --timeout 100 \
  ${TESTS:-tests/backends/local/test_cuda.py tests/backends/local/test_cuda_graphs.py tests/backends/local/test_cuda_flex.py tests/backends/local/test_placement.py tests/backends/local/test_losses.py} > $OUT/tests.log 2>&1
echo "tests rc=$? in $(( $(date +%s) - T0 )) s" >> $OUT/tests.log
grep -E "passed|failed|^FAILED|^ERROR|rc=" $OUT/tests.log | tail -15
for b in ${BENCH:-gpu_sampling.py gpu_step.py serve_overhead.py}; do
  T0=$(date +%s)
  timeout ${BENCH_S:-170} python3 benchmarks/$b > $OUT/$b.log 2>&1; echo "$b rc=$? in $(( $(date +%s) - T0 )) s" >> $OUT/$b.log
  grep -v -i -E "warn|shards|peft/tuners" $OUT/$b.log | tail -25
done
