#!/bin/bash
# Question: the timings issue #32 asks for, and the GPU-only checks of a change, in one device call.
# Each step is named on the command line and runs under its own timeout; logs and JSON land in
# $OUT; the last lines are a short table (step, exit code, wall seconds).
#   COMMIT=<hash> bash ablations/probes/h200_steps.sh quick-cold quick-warm api paper-fwd ...
# Steps:
#   quick-cold / quick-warm  python -m fa2check.ablate --grid quick (cold, then warm Triton cache)
#   api            the API against the table's FA2 row: --seqlen 8192 --head-dim 128, Triton kernels
#   paper-fwd      the paper grid's forward on the Hopper chassis
#   paper-fwdbwd   the paper grid's forward + backward
#   verify-full    make verify's full tier (our Triton kernels and the Gluon forward)
#   head-dims      the GPU tests of odd head dims and v's own head dim, then the head-dims probe
#   d53            the Triton FA1 schedule's causal hidden-key case at q 16384 x k 1000, float32
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
C=${COMMIT:+--commit $COMMIT}
declare -A RC WALL
step() {  # step NAME TIMEOUT COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s.%N)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  RC[$name]=$?; WALL[$name]=$(echo "$(date +%s.%N) - $t0" | bc)
  echo "$name rc=${RC[$name]} wall=${WALL[$name]}s"; tail -3 "$OUT/$name.log"
}
for s in "$@"; do case $s in
  quick-cold|quick-warm) step $s 170 python3 -m fa2check.ablate --grid quick --budget-s 150 $C --out "$OUT/$s" --no-plots ;;
  api) step api 120 python3 -m fa2check.ablate --seqlen 8192 --head-dim 128 --mode fwd --kernels triton --budget-s 100 $C --out "$OUT/api" --no-plots ;;
  paper-fwd) step paper-fwd 330 python3 -m fa2check.ablate --grid paper --mode fwd --budget-s 310 $C --out "$OUT/paper-fwd" --no-plots ;;
  paper-fwdbwd) step paper-fwdbwd 590 python3 -m fa2check.ablate --grid paper --mode fwd+bwd --budget-s 570 $C --out "$OUT/paper-fwdbwd" --no-plots ;;
  verify-full) step verify-full 300 python3 -m fa2check.verify --tier full --json "$OUT/verify-full.json" $C ;;
  head-dims) step head-dims-tests 200 python3 -m pytest -q -m gpu tests/test_head_dims.py -rf
             step head-dims-probe 130 python3 ablations/probes/head_dims.py --out "$OUT/head-dims" --budget-s 110 $C ;;
  d53) step d53 120 python3 -m fa2check.verify --tier full --impl ours --variant=+defer-seqpar+splitq --variant=-defer-seqpar-splitq --case 'q>k-b1-h4/1-q16384-k1000-d32-float32-causal-s302' --json "$OUT/d53.json" $C ;;
  *) echo "unknown step $s"; exit 2 ;;
esac; done
echo; printf "%-18s %4s %8s\n" step rc wall_s
for s in "${!RC[@]}"; do printf "%-18s %4s %8.0f\n" "$s" "${RC[$s]}" "${WALL[$s]}"; done
