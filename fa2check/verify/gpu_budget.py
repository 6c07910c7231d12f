"""One GPU memory budget shared by the verify workers: a task starts only when its estimated
peak fits beside what the other workers' running tasks and caches hold.

The estimate (`task_bytes`) is dominated by the float64 oracle, which every property computes
on the case's device: it materialises the (B, Hq, Sq, Sk) scores, and autograd keeps several
copies of them (s, P, dP, dS, temporaries), so the peak is about `PER_SCORE` bytes per score
element; the rest (q, k, v, dO, the oracle's float64 outputs and gradients, the same-dtype
baseline's, the outputs of up to 8 variants that variant_equivalence caches) is linear in the
sizes. Measured on the CPU (peak RSS of one property run, a linear stand-in implementation,
B=1, H=8, S=1024 and 2048, d=16): about 26-34 bytes a score forward only, 43-55 with the
backward; extreme_logits about 33 a score more plus ~1 GiB (its bound's softmax, tau, w, rel
and g over the scores, and chunks of SPREAD_BUDGET float64s); the constants round those up
by about a quarter for the CUDA caching allocator's block rounding.
An implementation other than our kernels (SDPA's math backend, flex) may materialise the
scores too: one float32 forward-and-backward's worth more.

The budget, sized when the run starts: FRACTION of the GPU memory free then, less WORKER_BASE a
worker for everything a worker holds outside the counter: its CUDA context, compiled kernels
and libraries (cuBLAS and the like). Measured on the H200 (D74: the whole GPU's used bytes at
each task's end less the bytes the counter had admitted then, 16 workers): at most 38.4 GiB,
2.4 GiB a worker. A worker's share of the counter is its task's estimate while the task runs,
then what PyTorch still reserves in it (the properties' cached references) once the task is
done.
A task larger than the whole budget runs when no other task runs, so nothing waits forever.
"""
from __future__ import annotations

GIB = 1 << 30
FRACTION = 0.8
WORKER_BASE = 5 * GIB // 2
FIXED = 256 << 20  # per task: small buffers, the allocator's rounding of small blocks

PER_SCORE = {False: 40, True: 64}  # bytes per score element: forward only, with the backward
PER_SCORE_EXTRA = {"extreme_logits": 32, "lse_bounds": 8}  # lse_bounds keeps float64 scores
EXTRA_FIXED = {"extreme_logits": GIB}  # its spread's chunks of 2**25 float64s and their copies
OTHER_IMPL_PER_SCORE = 24  # a non-tiled implementation's float32 scores, P and their grads
PER_LINEAR = 16 * 8  # bytes per element of q, k, v, o: ~16 float64-sized copies of each


def task_bytes(property_name: str, problem, backward: bool, ours: bool = True) -> int:
    """Estimated peak GPU bytes of one verify task (see the module docstring)."""
    p = problem
    scores = p.batch * p.heads_q * p.seqlen_q * p.seqlen_k
    linear = (p.batch * p.heads_q * p.seqlen_q * (p.head_dim + p.head_dim_v)
              + p.batch * p.heads_kv * p.seqlen_k * (p.head_dim + p.head_dim_v))
    per_score = (PER_SCORE[bool(backward)] + PER_SCORE_EXTRA.get(property_name, 0)
                 + (0 if ours else OTHER_IMPL_PER_SCORE))
    return (scores * per_score + linear * PER_LINEAR + FIXED
            + EXTRA_FIXED.get(property_name, 0))


def budget_bytes(free: int, workers: int) -> int:
    """The budget for `workers` processes, given the GPU's free bytes before they start."""
    return max(0, int(FRACTION * (free - workers * WORKER_BASE)))


def gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


class Budget:
    """A counter of admitted bytes shared by processes (made before the pool, passed to each
    worker through the pool's initializer). Each process keeps its own share (`held`)."""

    def __init__(self, context, total: int = 0):
        self._total = context.Value("q", total, lock=False)
        self._used = context.Value("q", 0, lock=False)
        self._running = context.Value("i", 0, lock=False)
        self._cond = context.Condition()
        self.held = 0  # this process's bytes in the counter (pickled as 0 into a worker)

    def __getstate__(self):
        return {**self.__dict__, "held": 0}

    @property
    def total(self) -> int:
        return self._total.value

    @property
    def admitted(self) -> int:
        """Bytes in the counter: running tasks' estimates and idle workers' caches."""
        return self._used.value

    def set_total(self, total: int):
        with self._cond:
            self._total.value = total
            self._cond.notify_all()

    def acquire(self, nbytes: int, shed=None):
        """Block until `nbytes` fit beside everything admitted or held, or no task runs. If
        they do not fit at once, `shed()` (if given) first frees what this process caches and
        returns the bytes it still holds (D72: 16 workers' caches held the budget)."""
        with self._cond:
            if shed is not None and not self._fits(nbytes):
                resident = shed()
                self._used.value += resident - self.held
                self.held = resident
                self._cond.notify_all()
            while not self._fits(nbytes):
                self._cond.wait()
            self._used.value += nbytes
            self.held += nbytes
            self._running.value += 1

    def _fits(self, nbytes: int) -> bool:
        return self._used.value + nbytes <= self._total.value or self._running.value == 0

    def release(self, resident: int):
        """The task is done; this process still holds `resident` bytes (its caches)."""
        with self._cond:
            self._used.value += resident - self.held
            self.held = resident
            self._running.value -= 1
            self._cond.notify_all()

    def describe(self, nbytes: int) -> str:
        return (f"GPU memory budget {gib(self.total)} shared by the workers, this task "
                f"estimated at {gib(nbytes)}")


def resident_bytes() -> int:
    """What PyTorch's allocator still reserves in this process (after empty_cache)."""
    import torch

    return torch.cuda.memory_reserved()
