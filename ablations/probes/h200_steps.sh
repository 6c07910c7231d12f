#!/bin/bash
# Question: the ablation's wall times (issue #32) and the GPU-only checks of a change, in one
# device call. Each step is named on the command line and runs under its own timeout; its log and
# results go into $OUT/$ARCHIVE.tgz (default all.tgz, rewritten after every step); the last lines are a table
# (step, exit code, wall seconds).
#   COMMIT=<hash> bash ablations/probes/h200_steps.sh quick-cold quick-warm api head-dims ...
# Steps:
#   quick-cold / quick-warm  python -m fa2check.ablate --grid quick (cold, then warm Triton cache)
#   api            the API against the table's FA2 row: --seqlen 8192 --head-dim 128, Triton kernels
#   api-ab         ablations/probes/api_vs_table.py: the API and the row of the kernel it runs
#                  in alternating rounds (8k d=128 bf16, full and causal; 8 rounds)
#   fastest        the Hopper switches over the paper grid's forward beside Triton's FA2 (the
#                  api peer, with FA2CHECK_FASTEST empty; FASTEST_BUDGET_S, default 280, the
#                  ablation's budget: 420 for the 7 switch variants), then a new table of fastest kernels:
#                  kernels/fastest.json's sources with this run after them, whose forward keys
#                  (of this GPU) replace the table's ($OUT: fastest.json, to copy to kernels/ with
#                  the run's JSON to ablations/results/; D82)
#   paper          the paper grid, forward and forward + backward, 3 sweeps
#   verify-full    make verify's full tier (ours and, on sm_90, the Hopper chassis); verify-warm
#                  the same again (after verify-full: Triton's cache warm)
#   head-dims      the GPU tests of odd head dims and v's own head dim (HEAD_DIMS_TESTS: a -k
#                  filter), then the head-dims probe
#   hopper         the chassis's num_splits GPU tests and fa2check.verify --impl hopper
#   switches       ablations/probes/hopper_switches.py at d=128 8k (oracle checks, then times;
#                  SWITCHES_STAGES=3: every combination timed on a 3-stage K/V ring)
#   switches-ablate  fa2check.ablate --kernels hopper --hopper-switches at d=128 8k, full and
#                  causal, forward (D66): the 8 FA2 variants, the 7 switch variants (D85),
#                  sdpa flash and cuDNN; the switches' Shapley table beside FA3's (budget 150 s)
#   fa1            the chassis's FA1-style rows as % of matmul at d=128 1k-8k (FA1_SEQLENS), with
#                  FA1's num_splits (`+h`) and other K/V tile widths (FA1_BLOCK_NS, e.g. 128,256):
#                  ablations/probes/fa1_schedule.py --backend hopper
#   retune         python -m fa2check.ablate --retune with RETUNE_ARGS (the keys and the grid, e.g.
#                  "--retune-key part=fwd,variant=+defer+seqpar+splitq --head-dim 96 --seqlen
#                  4096 --causal both --mode fwd"), merged into a copy of kernels/tuned_tiles.json
#                  ($OUT's archive: tuned_tiles.json), which the later steps of the call read
#   ablate         python -m fa2check.ablate $ABLATE_ARGS (ABLATE_TIMEOUT, default 200 s; its
#                  --budget-s 20 s less), e.g. ABLATE_ARGS="--grid paper --seqlen 4096 --repeats 1"
#   d96            the head-dims probe at 96 and 128 only (bf16, 4k and 8k, forward)
#   verify-d40     the full tier's case that failed at b393333 (D64: float32 d=40 causal, split-K
#                  with seq_parallel)
#   verify-gluon   the Gluon backend's split-K gradients (its tiles failed at b393333)
#   gpu-tests      pytest -m gpu over GPU_TESTS (files and options, e.g. "tests/a.py -k float32")
#   gpu-check      make gpu-check (python -m fa2check.gpucheck, GPU_CHECK_MINUTES, default 9.5):
#                  verify's full tier, the backends' GPU tests and a fuzz campaign, one verdict
#   replay         python -m fa2check.fuzz --replay REPLAY (a corpus file or an example) on each of
#                  REPLAY_IMPLS (default hopper,sdpa_cudnn,ours), one log line a verdict; exit 1
#                  where any fails it (one that does not take it says NOT RUN)
#   ab             ablations/probes/compare_kernels.py $AB_ARGS (AB_TIMEOUT, default 400 s; carry
#                  ablations/ab for its copies), its JSON in the archive
#   fuzz           python -m fa2check.fuzz --impl FUZZ_IMPL (default hopper; e.g. ours,hopper,gluon)
#                  for FUZZ_SECONDS (default 300), its compiled classes' precompile included;
#                  FUZZ_ARGS more options (e.g. --seed 2908803484)
#   fa1-dram       ablations/probes/fa1_dram.py under Nsight Compute: the FA1-style chassis
#                  forward's DRAM bytes at 2k, 8k and 16k against D48's model (issue 56)
#   flex           torch's compiled flex_attention (D63): fa2check.verify --impl flex (every
#                  property, the full tier; cut at 70 s its JSON keeps the cases that finished),
#                  then its forward beside sdpa-flash, sdpa-cudnn and our Triton kernels at 8k
#                  d=128, full and causal (about 160 s in all); its GPU tests:
#                  GPU_TESTS=tests/test_flex.py ... gpu-tests
#   hopper-bwd     ablations/probes/hopper_backward.py (oracle checks of the 8 variants, their
#                  compiles in parallel, then the backward's times and its split_q factor;
#                  HOPPER_BWD_TIME_S the times' budget, HOPPER_BWD_ARGS e.g. "--no-checks
#                  --head-dims 128")
#   hopper-bwd-tests  the chassis backward's GPU tests (tests/test_hopper_backward.py), 4 workers, 240 s
#                  (cold, one worker, they ran past 120 s: D111)
#   hopper-verify  fa2check.verify --impl hopper alone
#   ncu            Nsight Compute over ablations/probes/stall_probe.py's cases (NCU_CASES, space
#                  separated, NCU_MODE fwd or fwd+bwd): speed of light, pipes, memory, warp states and
#                  scheduler sections, DRAM and shared-memory bytes; the report, its details
#                  and raw pages as CSV (NCU_TAG names the files: several ncu steps a call);
#                  NCU_SOURCE=1 adds the warp samples per SASS instruction (SourceCounters):
#                  the source page as CSV and stall_probe.py --sass-samples' summary
if [ "${1:-}" = --help ]; then sed -n '2,/^set /s/^# \{0,1\}//p' "$0"; exit 0; fi
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
W=$(mktemp -d)  # the steps write here; $OUT gets one archive of it after every step, so a run
                # cut short still returns what finished (the device returns a few files only)
# the commit is given from the local checkout: git on the device may name an older commit than
# the tree it runs (D73: 78f7185 for f85389c's tree)
: "${COMMIT:?set COMMIT=<hash> of the tree being run (git rev-parse --short HEAD, locally)}"
# COMMIT worked out on the device names that stale .git: refuse it where the tree differs
head=$(git rev-parse --short HEAD 2>/dev/null)
if [ -n "$head" ] && [ "${COMMIT:0:7}" = "${head:0:7}" ] && [ "${COMMIT%-dirty}" = "$COMMIT" ] && ! git diff --quiet HEAD 2>/dev/null; then
  echo "COMMIT=$COMMIT is this copy's .git HEAD, and the tree differs from it: give the hash of the local checkout's HEAD (add -dirty for uncommitted changes)" >&2
  exit 2
fi
C="--commit $COMMIT"
ARCHIVE=${ARCHIVE:-all}  # $OUT/$ARCHIVE.tgz: name it when one device call runs this script twice
declare -A RC WALL
ORDER=()
step() {  # step NAME TIMEOUT COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$W/$name.log" 2>&1
  RC[$name]=$?; WALL[$name]=$(( $(date +%s) - t0 )); ORDER+=("$name")
  echo "$name rc=${RC[$name]} wall=${WALL[$name]}s"; tail -3 "$W/$name.log"
  archive
}
archive() { local part="$OUT/.$ARCHIVE.$BASHPID.part"  # tar's 1: a log grew while read
            tar czf "$part" -C "$W" . 2>/dev/null; [ $? -le 1 ] && mv "$part" "$OUT/$ARCHIVE.tgz"; }
( while sleep 30; do archive; done ) &  # also every 30 s: a call cut short keeps its step's log
ARCHIVER=$!; trap 'kill $ARCHIVER 2>/dev/null' EXIT
for s in "$@"; do case $s in
  quick-cold|quick-warm) step $s 170 python3 -m fa2check.ablate --grid quick --budget-s 150 $C --out "$W/$s" --no-plots ;;
  api) step api 100 python3 -m fa2check.ablate --seqlen 8192 --head-dim 128 --mode fwd --kernels triton --backends sdpa-flash,api --rep-ms 100 --budget-s 85 $C --out "$W/api" --no-plots ;;
  api-ab) step api-ab 120 python3 ablations/probes/api_vs_table.py --out "$W/api-ab" --rounds 8 $C ;;
  fastest) B=${FASTEST_BUDGET_S:-280}  # the ablation's own budget; the step's timeout 20 s more
           FA2CHECK_FASTEST= step fastest-run $((B + 20)) python3 -m fa2check.ablate --grid paper --mode fwd --kernels hopper --hopper-switches --backends sdpa-flash,sdpa-cudnn,api --budget-s $B $C --out "$W/fastest"
           step fastest-table 60 python3 -m fa2check.ablate.fastest_table --extend kernels/fastest.json \
             --fwd "$(ls "$W"/fastest/*-paper-fwd.json)" --out "$W/fastest.json" ;;
  paper) B=${PAPER_BUDGET_S:-570}  # the ablation's own budget; the step's timeout 20 s more
         step paper $((B + 20)) python3 -m fa2check.ablate --grid paper --mode fwd,fwd+bwd --budget-s $B $C --out "$W/paper" ;;
  verify-full|verify-warm) step $s ${VERIFY_TIMEOUT:-300} python3 -m fa2check.verify --tier full --json "$W/$s.json" $C ;;
  head-dims) step head-dims-tests 110 python3 -m pytest -q -m gpu tests/test_head_dims.py -rf -k "$HEAD_DIMS_TESTS"
             step head-dims-probe 90 python3 ablations/probes/head_dims.py --out "$W/head-dims" --budget-s 75 $C ;;
  hopper) step hopper-splits-tests 60 python3 -m pytest -q -m gpu tests/test_hopper_splits.py -rf
          step hopper-verify 130 python3 -m fa2check.verify --impl hopper --json "$W/verify-hopper.json" $C ;;
  switches) T=switches${SWITCHES_STAGES:+-stages$SWITCHES_STAGES}  # SWITCHES_STAGES: K/V stages
            step $T 110 python3 ablations/probes/hopper_switches.py --out "$W/$T" --head-dims 128 --seqlens 8192 --timeout 50 --budget 100 ${SWITCHES_STAGES:+--stages $SWITCHES_STAGES} $C ;;
  switches-ablate) step switches-ablate 170 python3 -m fa2check.ablate --kernels hopper --hopper-switches --mode fwd --seqlen 8192 --head-dim 128 --causal both --backends sdpa-flash,sdpa-cudnn --budget-s 150 $C --out "$W/switches-ablate" --no-plots ;;
  fa1) step fa1 150 python3 ablations/probes/fa1_schedule.py --backend hopper --head-dims 128 --seqlens ${FA1_SEQLENS:-1024,2048,8192} ${FA1_BLOCK_NS:+--block-ns $FA1_BLOCK_NS} --out "$W/fa1" $C ;;
  retune) T=${RETUNE_TIMEOUT:-250}; cp kernels/tuned_tiles.json "$W/tuned_tiles.json"
          step retune $T python3 -m fa2check.ablate --retune $RETUNE_ARGS --kernels triton \
            --backends sdpa-flash,sdpa-cudnn --table-out "$W/tuned_tiles.json" --budget-s $((T - 20)) \
            $C --out "$W/retune" --no-plots
          export FA2CHECK_TUNED_TILES="$W/tuned_tiles.json" ;;
  ablate) T=${ABLATE_TIMEOUT:-200}
          step ablate $T python3 -m fa2check.ablate $ABLATE_ARGS --budget-s $((T - 20)) $C --out "$W/ablate" --no-plots ;;
  d96) step d96 100 python3 ablations/probes/head_dims.py --head-dims 96,128 --seqlens 4096,8192 --out "$W/d96" --budget-s 85 $C ;;
  verify-d40) step verify-d40 60 python3 -m fa2check.verify --tier full --property causal_masking --variant=-defer+seqpar-splitq --variant=+defer+seqpar-splitq '--case=q>k-b1-h4/1-q16384-k1000-d40-float32-causal-s302' --json "$W/verify-d40.json" $C ;;
  verify-gluon) step verify-gluon 120 python3 -m fa2check.verify --tier full --impl fa2check.adapters:gluon --variant=-defer+seqpar-splitq --variant=+defer-seqpar-splitq --property gqa_reduction --property causal_masking --json "$W/verify-gluon.json" $C ;;
  gpu-tests) XDIST=$(python3 -c "import xdist" 2>/dev/null && echo "-n 8")  # compile-bound: 8 workers
             step gpu-tests 240 python3 -m pytest -q -m gpu -rf $XDIST ${GPU_TESTS:-tests} ;;
  gpu-check) M=${GPU_CHECK_MINUTES:-9.5}
             step gpu-check $(python3 -c "print(int($M * 60 + 30))") python3 -m fa2check.gpucheck --minutes $M --out "$W/gpu-check" $C ;;
  replay) # fails when any implementation fails it; one that does not take it (exit 3) is NOT RUN
          step replay 240 bash -c 'rc=0; for impl in ${1//,/ }; do python3 -m fa2check.fuzz --impl $impl --replay "$2"; r=$?; [ $r = 0 ] || [ $r = 3 ] || rc=1; done; exit $rc' _ "${REPLAY_IMPLS:-hopper,sdpa_cudnn,ours}" "${REPLAY:?set REPLAY=<corpus file or example>}" ;;
  ab) step ab ${AB_TIMEOUT:-400} python3 ablations/probes/compare_kernels.py $AB_ARGS --json "$W/ab.json" $C ;;
  fuzz) F=${FUZZ_SECONDS:-300}
        step fuzz $((F + 60)) python3 -m fa2check.fuzz --impl ${FUZZ_IMPL:-hopper} --seconds $F ${FUZZ_ARGS:-} --json "$W/fuzz.json" --out "$W/fuzz-found" ;;
  fa1-dram) step fa1-dram 150 ncu --clock-control none --profile-from-start off --csv --page raw --print-units base \
              --metrics dram__bytes_read.sum,dram__bytes_write.sum \
              python3 ablations/probes/fa1_dram.py --model "$W/fa1-dram-model.json"
            cp "$W/fa1-dram.log" "$W/fa1-dram.csv"
            python3 ablations/probes/fa1_dram.py --compare "$W/fa1-dram.csv" --model "$W/fa1-dram-model.json" | tee -a "$W/fa1-dram.log"
            archive ;;
  flex) step flex-verify 70 python3 -m fa2check.verify --impl flex --json "$W/verify-flex.json" $C
        step flex-time 90 python3 -m fa2check.ablate --seqlen 8192 --head-dim 128 --mode fwd --kernels triton --backends sdpa-flash,sdpa-cudnn,flex --rep-ms 100 --budget-s 80 $C --out "$W/flex" --no-plots ;;
  hopper-bwd) T=${HOPPER_BWD_TIME_S:-60}  # phase 2 (times); phase 1 (checks) 90 s
              step hopper-bwd $((T + 100)) python3 ablations/probes/hopper_backward.py --out "$W/hopper-bwd" --check-timeout 90 --time-timeout $T $HOPPER_BWD_ARGS $C ;;
  hopper-bwd-tests) step hopper-bwd-tests 240 python3 -m pytest -q -m gpu tests/test_hopper_backward.py -rf -n 4 ;;
  hopper-verify) step hopper-verify 130 python3 -m fa2check.verify --impl hopper --json "$W/verify-hopper.json" $C ;;
  ncu) T=ncu-${NCU_TAG:-1}
       step $T ${NCU_TIMEOUT:-200} ncu --clock-control none --profile-from-start off \
         --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
         --section SchedulerStats ${NCU_SOURCE:+--section SourceCounters --import-source no} --metrics dram__bytes_read.sum,dram__bytes_write.sum,smsp__sass_data_bytes_mem_shared.sum \
         -o "$W/$T" python3 ablations/probes/stall_probe.py --mode ${NCU_MODE:-fwd} $NCU_CASES
       ncu -i "$W/$T.ncu-rep" --csv --page details > "$W/$T-details.csv" 2>&1
       ncu -i "$W/$T.ncu-rep" --csv --page raw > "$W/$T-raw.csv" 2>&1
       python3 ablations/probes/stall_probe.py --summarize "$W/$T-details.csv" | tee -a "$W/$T.log"
       if [ -n "${NCU_SOURCE:-}" ]; then  # per-instruction warp samples (SASS)
         ncu -i "$W/$T.ncu-rep" --csv --page source --print-source sass > "$W/$T-sass.csv" 2>&1
         python3 ablations/probes/stall_probe.py --sass-samples "$W/$T-sass.csv" | tee -a "$W/$T.log"
       fi
       archive ;;
  *) echo "unknown step $s"; exit 2 ;;
esac; done
echo; printf "%-18s %4s %8s\n" step rc wall_s
for s in "${ORDER[@]}"; do printf "%-18s %4s %8s\n" "$s" "${RC[$s]}" "${WALL[$s]}"; done
