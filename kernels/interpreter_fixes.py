"""Fixes for Triton 3.6's CPU interpreter, applied only when TRITON_INTERPRET is set, so that
the CPU runs the kernels with the GPU's bfloat16 arithmetic. Kernel code is unchanged.

1. The interpreter stores bfloat16 tiles as their uint16 bit patterns and hands them to
np.matmul as integers, so `tl.dot` of bfloat16 operands returns garbage there (seen: 2.5e10
off for a 16x16 product of standard normals). The GPU multiplies the bfloat16 values and
accumulates in float32; this patch does the same on the CPU by widening the bit patterns to
float32 (exact) before the product.
2. It converts float32 to bfloat16 by truncating the mantissa (`x.to(tl.bfloat16)` passes no
rounding mode), where the GPU rounds to nearest even: stored bfloat16 results were one ulp off
(seen as a failing dV for a one-key problem). The patch rounds to nearest even through torch.
"""
import numpy as np


def _bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    import torch

    f32 = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32))
    return f32.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).reshape(values.shape)


def patch_bf16() -> None:
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_dot, "_fa2check_bf16_fix", False):
        return
    original = builder.create_dot
    original_cast = builder.cast_impl
    original_fp_to_fp = builder.create_fp_to_fp

    def rounds_to_bf16(src, dst_type):
        return src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16

    def cast_impl(self, src, dst_type):
        if rounds_to_bf16(src, dst_type):
            return interpreter.TensorHandle(_f32_to_bf16_bits(src.data), tl.bfloat16)
        return original_cast(self, src, dst_type)

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        if rounds_to_bf16(src, dst_type) and rounding_mode != interpreter._ir.ROUNDING_MODE.RTZ:
            return interpreter.TensorHandle(_f32_to_bf16_bits(src.data), tl.bfloat16)
        return original_fp_to_fp(self, src, dst_type, rounding_mode)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype.scalar == tl.bfloat16 or b.dtype.scalar == tl.bfloat16:
            a = interpreter.TensorHandle(_bf16_bits_to_f32(a.data), tl.float32)
            b = interpreter.TensorHandle(_bf16_bits_to_f32(b.data), tl.float32)
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    create_dot._fa2check_bf16_fix = True
    builder.create_dot = create_dot
    builder.cast_impl = cast_impl
    builder.create_fp_to_fp = create_fp_to_fp
