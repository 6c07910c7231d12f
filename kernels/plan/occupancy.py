"""How many programs of a compiled kernel an SM holds: the occupancy question FA1's launcher
asked CUDA before choosing its grid (kernels/plan/fa1_launch.py), answered from the kernel's
registers, shared memory and warps and the device's limits."""
import triton

from ..launch_cache import _argument_key
from .fa1_launch import INTERPRETER_SMS

_CTAS_PER_SM = {}  # (kernel, device, specialization) -> resident CTAs an SM


def sms_and_ctas_per_sm(jit_fn, device, args, kwargs) -> tuple[int, int]:
    """(SMs, CTAs of jit_fn an SM can hold), as FA1 asked CUDA's occupancy calculator: from the
    compiled kernel's registers, shared memory and warps and the device's limits."""
    import torch

    if device.type != "cuda" or not isinstance(jit_fn, triton.runtime.JITFunction):
        return INTERPRETER_SMS, 1
    props = torch.cuda.get_device_properties(device)
    # what Triton specializes on (kernels/launch_cache.py), with ints in its classes
    key = (jit_fn, device, tuple((a == 1, a % 16 == 0) if type(a) is int else _argument_key(a)
                                 for a in args), tuple(kwargs.items()))
    if key not in _CTAS_PER_SM:
        kernel = jit_fn.warmup(*args, grid=(1,), **kwargs)
        if hasattr(kernel, "result"):  # compiled asynchronously
            kernel = kernel.result()
        kernel._init_handles()  # n_regs is read when the cubin is loaded
        warps = kernel.metadata.num_warps
        regs_per_warp = -(-kernel.n_regs * 32 // 256) * 256  # allocated 256 at a time
        by_regs = getattr(props, "regs_per_multiprocessor", 65536) // regs_per_warp // warps
        smem_per_sm = getattr(props, "shared_memory_per_multiprocessor", 233472)
        by_smem = smem_per_sm // (kernel.metadata.shared + 1024)  # 1 KB reserved a block
        by_threads = getattr(props, "max_threads_per_multi_processor", 2048) // (warps * 32)
        _CTAS_PER_SM[key] = max(1, min(by_regs, by_smem, by_threads, 32))  # 32 blocks an SM
    return props.multi_processor_count, _CTAS_PER_SM[key]
