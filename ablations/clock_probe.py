"""SM clock, power and temperature (nvidia-smi every 100 ms) while FA2 bf16 and fp16 fwd+bwd
calls run back to back for 6 s each (d=64, causal, 16k, the tiles tuned for that cell):

    python3 ablations/clock_probe.py    # on the GPU, from the repository root

Written for the eighth session's question (why fp16 trails bf16 at the same tiles; NOTES).
"""
import subprocess, sys, time, torch
sys.path.insert(0, '.')
from kernels import flash_attention, default_config
from dataclasses import replace
for dt in (torch.bfloat16, torch.float16, torch.bfloat16, torch.float16):
    q, k, v = (torch.randn(1, 32, 16384, 64, device='cuda', dtype=dt, requires_grad=True) for _ in range(3))
    cfg = replace(default_config(64, True, None, dt), block_m=64, block_n=64, num_warps=4, num_stages=3, bwd_block_m=32, bwd_block_n=128, bwd_num_warps=4, bwd_num_stages=3, bwd_dq_pass=True)
    step = lambda: torch.autograd.grad(flash_attention(q, k, v, causal=True, config=cfg), (q, k, v), torch.ones_like(q))
    step(); torch.cuda.synchronize()
    smi = subprocess.Popen(['nvidia-smi', '--query-gpu=clocks.sm,power.draw,temperature.gpu', '--format=csv,noheader,nounits', '-lms', '100'], stdout=subprocess.PIPE, text=True)
    t0 = time.perf_counter(); n = 0
    while time.perf_counter() - t0 < 6:
        step(); n += 1
    torch.cuda.synchronize(); ms = (time.perf_counter() - t0) / n * 1e3
    smi.terminate(); rows = [list(map(float, l.split(','))) for l in smi.stdout.read().split('\n') if l.strip()][5:]
    mean = [sum(r[i] for r in rows) / len(rows) for i in range(3)]
    print(f'{dt} {ms:.3f} ms a call (batch 1, 32 heads, causal 16k); SM clock {mean[0]:.0f} MHz, power {mean[1]:.0f} W, {mean[2]:.0f} C, {len(rows)} samples')
