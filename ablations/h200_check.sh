#!/bin/bash
# One device call: A/B forward timing of kernel versions, then make verify's full tier (ours and
# torch SDPA's backends) and the GPU test suite side by side. Everything lands under $OUT.
#   bash ablations/h200_check.sh [KERNEL_DIR ...]   (run from the repository root on the H200)
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
if [ $# -gt 0 ]; then
  timeout 120 python3 ablations/compare_kernels.py "$@" kernels --json "$OUT/ab-forward.json" \
    > "$OUT/ab-forward.log" 2>&1; echo "ab rc=$?"
fi
timeout 420 python3 -m fa2check.verify --tier full --impl sdpa --jobs 8 \
  --json "$OUT/verify-full-sdpa.json" > "$OUT/verify-full-sdpa.log" 2>&1 &
VERIFY=$!
timeout 420 python3 -m pytest -v -rf -p no:warnings -n 6 tests/ --ignore=tests/test_compile_gate.py \
  --ignore=tests/test_layouts.py ${PYTEST_ARGS:-} --junitxml "$OUT/pytest-gpu.xml" > "$OUT/pytest-gpu.log" 2>&1 &
PYTEST=$!
wait $VERIFY; echo "verify rc=$?"
wait $PYTEST; echo "pytest rc=$?"
tail -4 "$OUT/ab-forward.log" 2>/dev/null
grep -E "pass|fail" "$OUT/verify-full-sdpa.log" | tail -3
tail -3 "$OUT/pytest-gpu.log"
