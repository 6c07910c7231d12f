#!/bin/bash
# Question: the ablation's wall times (issue #32) and the GPU-only checks of a change, in one
# device call. Each step is named on the command line and runs under its own timeout; its log and
# results go into $OUT/all.tgz (rewritten after every step); the last lines are a short table
# (step, exit code, wall seconds).
#   COMMIT=<hash> bash ablations/probes/h200_steps.sh quick-cold quick-warm api head-dims ...
# Steps:
#   quick-cold / quick-warm  python -m fa2check.ablate --grid quick (cold, then warm Triton cache)
#   api            the API against the table's FA2 row: --seqlen 8192 --head-dim 128, Triton kernels
#   paper          the paper grid, forward and forward + backward, 3 sweeps
#   verify-full    make verify's full tier (our Triton kernels and the Gluon forward)
#   head-dims      the GPU tests of odd head dims and v's own head dim (HEAD_DIMS_TESTS: a -k
#                  filter), then the head-dims probe
#   hopper         the chassis's num_splits GPU tests and fa2check.verify --impl hopper
#   switches       ablations/probes/hopper_switches.py at d=128 8k (oracle checks, then times)
#   hopper-bwd     ablations/probes/hopper_backward.py (oracle checks of the 8 variants, their
#                  compiles in parallel, then the backward's times and its split_q factor), then
#                  the chassis backward's GPU tests (tests/test_hopper_backward.py, cache warm)
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
W=$(mktemp -d)  # the steps write here; $OUT gets one archive of it after every step, so a run
                # cut short still returns what finished (the device returns a few files only)
C=${COMMIT:+--commit $COMMIT}
declare -A RC WALL
ORDER=()
step() {  # step NAME TIMEOUT COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$W/$name.log" 2>&1
  RC[$name]=$?; WALL[$name]=$(( $(date +%s) - t0 )); ORDER+=("$name")
  echo "$name rc=${RC[$name]} wall=${WALL[$name]}s"; tail -3 "$W/$name.log"
  tar czf "$OUT/all.tgz.part" -C "$W" . && mv "$OUT/all.tgz.part" "$OUT/all.tgz"
}
for s in "$@"; do case $s in
  quick-cold|quick-warm) step $s 170 python3 -m fa2check.ablate --grid quick --budget-s 150 $C --out "$W/$s" --no-plots ;;
  api) step api 100 python3 -m fa2check.ablate --seqlen 8192 --head-dim 128 --mode fwd --kernels triton --backends sdpa-flash,api --rep-ms 100 --budget-s 85 $C --out "$W/api" --no-plots ;;
  paper) step paper 590 python3 -m fa2check.ablate --grid paper --mode fwd,fwd+bwd --budget-s 570 $C --out "$W/paper" ;;
  verify-full) step verify-full 300 python3 -m fa2check.verify --tier full --json "$W/verify-full.json" $C ;;
  head-dims) step head-dims-tests 110 python3 -m pytest -q -m gpu tests/test_head_dims.py -rf -k "$HEAD_DIMS_TESTS"
             step head-dims-probe 90 python3 ablations/probes/head_dims.py --out "$W/head-dims" --budget-s 75 $C ;;
  hopper) step hopper-splits-tests 60 python3 -m pytest -q -m gpu tests/test_hopper_splits.py -rf
          step hopper-verify 90 python3 -m fa2check.verify --impl hopper --json "$W/verify-hopper.json" $C ;;
  switches) step switches 110 python3 ablations/probes/hopper_switches.py --out "$W/switches" --head-dims 128 --seqlens 8192 --timeout 50 --budget 100 $C ;;
  hopper-bwd) step hopper-bwd 160 python3 ablations/probes/hopper_backward.py --out "$W/hopper-bwd" --check-timeout 90 --time-timeout 60 $C
              step hopper-bwd-tests 120 python3 -m pytest -q -m gpu tests/test_hopper_backward.py -rf ;;
  *) echo "unknown step $s"; exit 2 ;;
esac; done
echo; printf "%-18s %4s %8s\n" step rc wall_s
for s in "${ORDER[@]}"; do printf "%-18s %4s %8s\n" "$s" "${RC[$s]}" "${WALL[$s]}"; done
