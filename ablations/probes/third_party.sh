#!/usr/bin/env bash
# Question (issue 51): do attention kernels that others wrote, installed from the package index
# and called as they are (docs/examples/: no hand-written lse, their own (B, S, H, D) layout,
# NotImplementedError where they cannot run), pass fa2check's properties on the H200?
#   fla-core 0.6.0 (flash-linear-attention's softmax parallel_attn, Triton; causal, Sq == Sk)
#   sageattention 1.0.6 (sageattn, Triton, INT8 q.k; forward only)
# Run from the repository root on the GPU machine, which has no network: the wheels come in
# .whl/ (carry it), downloaded on a machine that has one:
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
#     --platform manylinux2014_x86_64 -d .whl fla-core==0.6.0 einops==0.8.2 sageattention==1.0.6
# Writes OUT (default /tmp/third_party): verify-<kernel>-<tier>.json and .md (the verdict table
# as docs/correctness.md shows it). TIERS (default "quick full"), VERIFY_TIMEOUT per run (s).
if [ "${1:-}" = --help ]; then sed -n '2,/^set /s/^# \{0,1\}//p' "$0"; exit 0; fi
set -u
OUT=${OUT:-/tmp/third_party}
TIERS=${TIERS:-quick full}
VERIFY_TIMEOUT=${VERIFY_TIMEOUT:-200}  # 2 kernels x 2 tiers within one 600 s device call
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/docs/examples:${PYTHONPATH:-}
python3 -c "import fla, sageattention, einops, torch, triton; print('torch', torch.__version__, \
'triton', triton.__version__, 'fla', fla.__version__)"
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}

run() {  # run NAME TIER ARGS...
    local name=$1 tier=$2; shift 2
    local json="$OUT/verify-$name-$tier.json"
    echo "== $name, $tier tier: python3 -m fa2check.verify $* --tier $tier"
    timeout -s INT "$VERIFY_TIMEOUT" python3 -m fa2check.verify "$@" --tier "$tier" \
        --json "$json" --commit "$COMMIT" | tail -n 60
    [ -f "$json" ] && python3 -m fa2check.verify --from "$json" | tee "$OUT/verify-$name-$tier.md"
}

for tier in $TIERS; do
    run fla "$tier" --impl fla_parallel_attn:attention --layout bshd
    run sage "$tier" --impl sage_attention:attention --layout bshd --forward-only
done
ls -la "$OUT"
