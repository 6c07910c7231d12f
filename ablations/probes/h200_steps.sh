#!/bin/bash
# Question: the timings issue #32 asks for, and the GPU-only checks of a change, in one device call.
# Each step is named on the command line and runs under its own timeout; logs and JSON land in
# $OUT; the last lines are a short table (step, exit code, wall seconds).
#   COMMIT=<hash> bash ablations/probes/h200_steps.sh quick-cold quick-warm api paper-fwd ...
# Steps:
#   quick-cold / quick-warm  python -m fa2check.ablate --grid quick (cold, then warm Triton cache)
#   api            the API against the table's FA2 row: --seqlen 8192 --head-dim 128, Triton kernels
#   paper          the paper grid, forward and forward + backward, 3 sweeps
#   verify-full    make verify's full tier (our Triton kernels and the Gluon forward)
#   head-dims      the GPU tests of odd head dims and v's own head dim (HEAD_DIMS_TESTS: a -k
#                  filter), then the head-dims probe
#   hopper         the chassis's num_splits GPU tests and fa2check.verify --impl hopper
#   switches       ablations/probes/hopper_switches.py at d=128 8k (oracle checks, then times)
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
C=${COMMIT:+--commit $COMMIT}
declare -A RC WALL
ORDER=()
step() {  # step NAME TIMEOUT COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  RC[$name]=$?; WALL[$name]=$(( $(date +%s) - t0 )); ORDER+=("$name")
  echo "$name rc=${RC[$name]} wall=${WALL[$name]}s"; tail -3 "$OUT/$name.log"
}
for s in "$@"; do case $s in
  quick-cold|quick-warm) step $s 170 python3 -m fa2check.ablate --grid quick --budget-s 150 $C --out "$OUT/$s" --no-plots ;;
  api) step api 100 python3 -m fa2check.ablate --seqlen 8192 --head-dim 128 --mode fwd --kernels triton --backends sdpa-flash,api --rep-ms 100 --budget-s 85 $C --out "$OUT/api" --no-plots ;;
  paper) step paper 590 python3 -m fa2check.ablate --grid paper --mode fwd,fwd+bwd --budget-s 570 $C --out "$OUT/paper" ;;
  verify-full) step verify-full 300 python3 -m fa2check.verify --tier full --json "$OUT/verify-full.json" $C ;;
  head-dims) step head-dims-tests 200 python3 -m pytest -q -m gpu tests/test_head_dims.py -rf -k "$HEAD_DIMS_TESTS"
             step head-dims-probe 130 python3 ablations/probes/head_dims.py --out "$OUT/head-dims" --budget-s 110 $C ;;
  hopper) step hopper-splits-tests 90 python3 -m pytest -q -m gpu tests/test_hopper_splits.py -rf
          step hopper-verify 150 python3 -m fa2check.verify --impl hopper --json "$OUT/verify-hopper.json" $C ;;
  switches) step switches 150 python3 ablations/probes/hopper_switches.py --out "$OUT/switches" --head-dims 128 --seqlens 8192 --timeout 60 --budget 140 $C ;;
  *) echo "unknown step $s"; exit 2 ;;
esac; done
# everything in one archive (the device returns a few files), then the table
tar czf /tmp/all.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/all.tgz "$OUT/"
echo; printf "%-18s %4s %8s\n" step rc wall_s
for s in "${ORDER[@]}"; do printf "%-18s %4s %8s\n" "$s" "${RC[$s]}" "${WALL[$s]}"; done
