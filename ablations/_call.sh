#!/bin/bash
set -u
B=bwd_block_m=32,bwd_block_n=64,bwd_num_warps=4,bwd_num_stages=3,bwd_dq_pass=1
F=block_m=64,block_n=64,num_warps=4,num_stages=3,nan_flags=0
A="1024,128,causal,fa2:$F,tma=1,$B 1024,128,causal,fa2:$F,tma=0,$B 1024,128,causal,sdpa-flash"
{ echo "# git 1c5ba07; python3 ablations/launch_cost_probe.py --mode fwd+bwd $A"; timeout 200 python3 ablations/launch_cost_probe.py --mode fwd+bwd $A --json $OUT/launch-fwdbwd-1k-d128.json; } > $OUT/launch-fwdbwd-1k-d128.log 2>&1
echo "rc=$?"; tail -5 $OUT/launch-fwdbwd-1k-d128.log
