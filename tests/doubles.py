"""Test doubles: attention composed of PyTorch ops with one known bug each.

`double(bug)` returns a callable with flash_attention's signature. Without a bug ("none") it is
correct: scores, softmax and P @ V in float32 (as a flash kernel computes them), the output
rounded to the inputs' dtype, lse in float32, differentiable by autograd. Each bug is one that
FlashAttention kernels have had or could have; every property's tests show at least one of them
failing it, so that no check is one that cannot fail.
"""
from __future__ import annotations

import itertools
import math

import torch

from fa2check.core.oracle import default_scale, visible_mask
from kernels import default_config
from kernels.plan.tiles import block_d

BUGS = {
    "none": "correct float32 composition",
    # masking
    "finite_sentinel": "masked scores are -1e6 instead of -inf (rows that see no key average V)",
    "dropped_last_key": "the last key (at the end of a partial tile) is never read",
    "top_left_causal": "causal mask aligned top-left (j <= i) instead of bottom-right",
    "hidden_v_leaks": "P @ V over all keys: 0 * NaN lets a NaN in V at a hidden key into the row",
    "nan_not_restored": "non-finite V zeroed for the product and never put back: rows that see "
                        "a NaN or inf in V get finite values",
    "nan_whole_row": "non-finite V zeroed for the product and NaN put back into every column of "
                     "a row that sees one, not only the columns that hold it",
    # logsumexp
    "lse_log2": "lse returned in log2 units (L / ln 2), as the kernels keep it internally",
    "no_max_subtraction": "softmax as exp(S) / sum exp(S), without subtracting the row max",
    "dtype_scores": "scores rounded to the input dtype (float16 overflows beyond 65504)",
    "scale_rounded": "softmax_scale * log2(e) rounded to the input dtype (relative error ~1e-4)",
    "tf32": "float32 operands rounded to tf32's 10-bit mantissa",
    # GQA
    "gqa_wrong_order": "query head h reads kv head h % heads_kv instead of h // group",
    "no_group_reduction": "dK/dV take the first query head of each group instead of the sum",
    "unwritten_head": "dK/dV of the last kv head are allocated but never written",
    # variants
    "seqpar_changes_bits": "seq_parallel off rescales o by (1 + eps) before rounding",
    "splitk_drops_key": "split_q off drops the last key",
    # determinism
    "nondeterministic": "o is rescaled by 1 + n eps, n changing from call to call",
    "dq_noise": "dQ gets call-to-call noise of up to 1% of its largest value",
    # memory
    "reads_past_end": "reads one key past seqlen_k (the mask forgets the tail)",
    "ignores_strides": "reads q, k, v as if they were contiguous",
    "mutates_k": "subtracts k's mean over the keys from the caller's k in place after the call "
                 "(as SageAttention 1.0.6 does; the outputs are right)",
    "writes_before_k": "writes 0 into the element just before k's first (padding of the "
                       "caller's buffer, where k is a view that does not start it)",
    # planted for the fuzzer: correct except on a class of shapes that the fixed test shapes
    # (tests/lattice.py, tests/test_lattice.py) do not contain; BLOCK_N is the device's forward
    # key tile, read from kernels.default_config (16 on the interpreter)
    "planted_full_last_tile": "when seqlen_k is a multiple of BLOCK_N (and more than one tile) "
                              "the last key is never read, as an even-length fast path that "
                              "stops one key short would do (Triton specializes lengths divisible "
                              "by 16)",
    "planted_diagonal_off_by_one": "causal, when (seqlen_k - seqlen_q) % BLOCK_N == 1: each row "
                                   "also sees the key just past its diagonal",
    "planted_group_5": "when heads_q / heads_kv == 5, dK and dV leave out the last query head "
                       "of each group",
    "planted_padded_column": "when head_dim is not a tile width (the kernels pad it to "
                             "block_d and mask the rest), the column mask is off by one: the "
                             "last true column of q, k and v is read as padding (0)",
}


_CALLS = itertools.count()


def without_variant(bug: str = "none"):
    """double(bug) as a user would write it: flash_attention's documented signature, less
    `variant` (the harness must call it without one)."""
    impl = double(bug)

    def attention(q, k, v, causal=False, softmax_scale=None, return_lse=False):
        return impl(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=return_lse)

    attention.__name__ = f"attention_{bug}_without_variant"
    return attention


def o_only(bug: str = "none"):
    """double(bug) as many public kernels are: no `variant`, no `return_lse`, o alone."""
    impl = double(bug)

    def attention(q, k, v, causal=False, softmax_scale=None):
        return impl(q, k, v, causal=causal, softmax_scale=softmax_scale)

    attention.__name__ = f"attention_{bug}_o_only"
    return attention


def refusing_lse(bug: str = "none"):
    """double(bug) with a `return_lse` it refuses: NotImplementedError when asked for lse."""
    impl = double(bug)

    def attention(q, k, v, causal=False, softmax_scale=None, return_lse=False):
        if return_lse:
            raise NotImplementedError("this kernel keeps no lse")
        return impl(q, k, v, causal=causal, softmax_scale=softmax_scale)

    attention.__name__ = f"attention_{bug}_refusing_lse"
    return attention


def no_causal(q, k, v, causal=False, softmax_scale=None, return_lse=False):
    """A kernel without a causal mask, which says so (NotImplementedError) when asked for one."""
    if causal:
        raise NotImplementedError("this kernel has no causal mask")
    return double()(q, k, v, softmax_scale=softmax_scale, return_lse=return_lse)


def bshd(bug: str = "none", lse: bool = False):
    """double(bug) taking and returning (batch, seqlen, heads, head_dim), as flash-attention and
    most public kernels do; lse (with `lse`) as (batch, heads, seqlen_q). Refuses (raises
    ValueError) a q that is not (B, S, H, D)-shaped against k, so that a harness passing the
    wrong layout shows."""
    impl = double(bug)

    def attention(q, k, v, causal=False, softmax_scale=None, return_lse=False):
        if q.shape[2] % k.shape[2] or q.shape[0] != k.shape[0]:
            raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} are not (B, S, H, D)")
        out = impl(*(t.transpose(1, 2) for t in (q, k, v)), causal=causal,
                   softmax_scale=softmax_scale, return_lse=lse and return_lse)
        if lse and return_lse:
            return out[0].transpose(1, 2), out[1]
        return out.transpose(1, 2)

    attention.__name__ = f"attention_{bug}_bshd"
    return attention


def double(bug: str = "none"):
    if bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}")

    def impl(q, k, v, *, causal=False, softmax_scale=None, variant=None, return_lse=False,
             config=None):
        o, lse = _attention(q, k, v, causal, softmax_scale, variant, bug)
        return (o, lse) if return_lse else o

    impl.__name__ = f"double_{bug}"
    return impl


def _attention(q, k, v, causal, softmax_scale, variant, bug):
    scale = default_scale(q.shape[-1]) if softmax_scale is None else softmax_scale
    batch, heads_q, seqlen_q, _ = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    group = heads_q // heads_kv
    k_given = k
    if bug == "dq_noise":
        q = _NoisyGrad.apply(q)
    if bug == "planted_padded_column" and q.shape[-1] != block_d(q.shape[-1]):
        q, k, v = (_last_column_zeroed(t) for t in (q, k, v))
    if bug == "ignores_strides":
        q, k, v = (torch.as_strided(t, t.shape, _contiguous_strides(t.shape), t.storage_offset())
                   for t in (q, k, v))
    if bug == "tf32":
        q, k, v = (t + ((t.detach().view(torch.int32) & ~0x1FFF).view(torch.float32) - t.detach())
                   for t in (q, k, v))
    seen = visible_mask(seqlen_q, seqlen_k, causal, q.device)
    block_n = default_config(q.shape[-1], on_gpu=q.is_cuda).block_n
    if bug == "planted_full_last_tile" and seqlen_k % block_n == 0 and seqlen_k > block_n:
        seen = seen.clone()
        seen[:, -1] = False
    if (bug == "planted_diagonal_off_by_one" and causal
            and (seqlen_k - seqlen_q) % block_n == 1):
        seen = visible_mask(seqlen_q, seqlen_k + 1, causal, q.device)[:, :seqlen_k]
    if bug == "top_left_causal" and causal:
        seen = torch.ones_like(seen).tril()
    if bug == "dropped_last_key" or (bug == "splitk_drops_key" and variant is not None
                                     and not variant.split_q):
        seen = seen.clone()
        seen[:, -1] = False
    if bug == "reads_past_end":
        k, v = _one_key_more(k), _one_key_more(v)
        seen = torch.cat([seen, seen[:, -1:]], dim=1)

    k, v = _expand(k, group, bug), _expand(v, group, bug)
    if bug == "scale_rounded":
        log2e = 1.4426950408889634
        scale = float(torch.tensor(scale * log2e, dtype=q.dtype)) / log2e
    # the planted bugs are all there is to find: their composition is float64 (an unnormalised
    # float32 exp(S - lse) is off by eps(float32) |lse| in every P, which the extreme-logit bound
    # rejects at logits of 1e3 in float32 inputs)
    work = torch.float64 if bug.startswith("planted_") else torch.float32
    if bug == "dtype_scores":
        s = ((q @ k.transpose(-1, -2)) * scale).float()
    else:
        s = (q.to(work) @ k.to(work).transpose(-1, -2)) * scale
    s = s.masked_fill(~seen, -1e6 if bug == "finite_sentinel" else float("-inf"))
    if bug == "no_max_subtraction":
        e = torch.exp(s)
        lse, p = torch.log(e.sum(-1)), e / e.sum(-1, keepdim=True)
    else:
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - torch.where(torch.isfinite(lse), lse, 0.0)[..., None])
    if bug == "hidden_v_leaks":
        o = p @ v.to(s.dtype)
    else:
        o = _visible_product(p, v.to(s.dtype), seen, restore=bug != "nan_not_restored",
                             whole_row=bug == "nan_whole_row")
    eps = torch.finfo(q.dtype).eps  # the jitters below are float64, so they survive rounding
    if bug == "nondeterministic":  # a different rounding on every call, as a race would give
        o = o.double() * (1 + eps * (next(_CALLS) % 4 + 1))
    if bug == "seqpar_changes_bits" and variant is not None and not variant.seq_parallel:
        o = o.double() * (1 + eps)
    if bug == "lse_log2":
        lse = lse / math.log(2)
    if bug in ("mutates_k", "writes_before_k"):
        _clobber(k_given, bug)
    return o.to(q.dtype), lse.float()


def _clobber(k, bug):
    """Change the caller's k (its .data: autograd does not see it), or the element before it."""
    if bug == "mutates_k":
        k.data.sub_(k.data.mean(dim=2, keepdim=True))
    elif k.storage_offset() > 0:
        torch.as_strided(k.data, (1,), (1,), k.storage_offset() - 1).zero_()


def _visible_product(p, v, seen, restore=True, whole_row=False):
    """p @ v in which a key's V reaches only the rows that see it: non-finite V is zeroed for
    the product, and (restore) rows that do see a non-finite V[:, d] get NaN in column d
    (whole_row: in every column)."""
    finite = torch.isfinite(v)
    o = p @ torch.where(finite, v, 0.0)
    if not restore:
        return o
    sees_non_finite = (seen.to(v.dtype) @ (~finite).to(v.dtype)) > 0
    if whole_row:
        sees_non_finite = sees_non_finite.any(-1, keepdim=True)
    return torch.where(sees_non_finite, float("nan"), o)


def _last_column_zeroed(t):
    """t with its last head_dim column 0, differentiably (that column gets no gradient)."""
    keep = torch.ones(t.shape[-1], dtype=t.dtype, device=t.device)
    keep[-1] = 0
    return t * keep


def _one_key_more(t):
    """t with one more key: the memory after the last one, or zeros where that memory is not
    in t's storage (reading it would crash instead of reading whatever is there)."""
    shape = (t.shape[0], t.shape[1], t.shape[2] + 1, t.shape[3])
    end = t.storage_offset() + sum((n - 1) * st for n, st in zip(shape, t.stride())) + 1
    if end <= t.untyped_storage().nbytes() // t.element_size():
        return torch.as_strided(t, shape, t.stride(), t.storage_offset())
    return torch.cat([t, torch.zeros_like(t[:, :, :1])], dim=2)


def _contiguous_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _expand(t, group, bug):
    """(B, Hkv, S, D) -> (B, Hq, S, D), correctly or with one of the GQA bugs."""
    if group == 1:
        return t
    if bug == "gqa_wrong_order":
        return t.repeat(1, group, 1, 1)
    if bug == "no_group_reduction":
        return _ExpandFirstHeadGrad.apply(t, group)
    if bug == "unwritten_head":
        return _ExpandUnwrittenHead.apply(t, group)
    if bug == "planted_group_5" and group == 5:
        return _ExpandDropLastHeadGrad.apply(t, group)
    return t.repeat_interleave(group, dim=1)


class _ExpandWrongGrad(torch.autograd.Function):
    """repeat_interleave of kv heads whose backward reduces the group gradient wrongly:
    `reduce` gets the gradient as (B, Hkv, group, S, D)."""

    @staticmethod
    def forward(ctx, t, group):
        ctx.group = group
        return t.repeat_interleave(group, dim=1)

    @classmethod
    def backward(cls, ctx, grad):
        b, h, s, d = grad.shape
        return cls.reduce(grad.reshape(b, h // ctx.group, ctx.group, s, d)), None


class _ExpandFirstHeadGrad(_ExpandWrongGrad):
    @staticmethod
    def reduce(grouped):
        return grouped[:, :, 0].clone()  # no group reduction: the first head's gradient only


class _ExpandDropLastHeadGrad(_ExpandWrongGrad):
    @staticmethod
    def reduce(grouped):
        return grouped[:, :, :-1].sum(2)  # the group's last head left out


class _ExpandUnwrittenHead(_ExpandWrongGrad):
    @staticmethod
    def reduce(grouped):
        summed = grouped.sum(2)
        out = torch.empty_like(summed)  # the last kv head is never written
        out[:, :-1] = summed[:, :-1]
        return out


class _NoisyGrad(torch.autograd.Function):
    """Identity forward; the backward adds fresh noise to the gradient (of q: dQ only)."""

    @staticmethod
    def forward(ctx, t):
        return t.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad + 0.01 * grad.abs().max() * torch.rand_like(grad)


def __getattr__(name: str):
    """`doubles.top_left_causal` etc., so that `--impl doubles:top_left_causal` works."""
    if name in BUGS:
        return double(name)
    raise AttributeError(name)
