#!/bin/bash
# Question: a change's A/B cost and make verify's full tier in one device call (D03)
# One device call: A/B forward timing of kernel versions, then make verify's full tier for ours,
# ours with the Gluon forward, and torch SDPA's backends. Everything lands under $OUT.
#   COMMIT=<hash> bash ablations/probes/h200_check.sh [KERNEL_DIR ...]
#   (from the repository root on the H200; COMMIT is recorded in the JSON files, since the
#   device's copy may carry a stale .git)
# The GPU test suite needs a call of its own (beside the full tier it did not finish in 420 s):
#   python3 -m pytest -q -rf -n 8 tests/ --junitxml $OUT/pytest-gpu.xml
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
if [ $# -gt 0 ]; then
  timeout 120 python3 ablations/probes/compare_kernels.py "$@" kernels \
    --json "$OUT/ab-forward.json" \
    ${COMMIT:+--commit "$COMMIT"} \
    > "$OUT/ab-forward.log" 2>&1; echo "ab rc=$?"
fi
timeout 480 python3 -m fa2check.verify --tier full --impl sdpa --impl gluon --jobs 8 \
  --json "$OUT/verify-full.json" ${COMMIT:+--commit "$COMMIT"} > "$OUT/verify-full.log" 2>&1
echo "verify rc=$?"
tail -4 "$OUT/ab-forward.log" 2>/dev/null
grep -E "pass|fail" "$OUT/verify-full.log" | tail -3
