"""Bad input raises ValueError or TypeError naming the argument and what was expected."""
import pytest
import torch

from kernels import TileConfig, Variant, flash_attention


def _qkv(device, shape_q=(1, 4, 8, 32), shape_kv=(1, 2, 8, 32), dtype=torch.float16):
    return (torch.randn(shape_q, device=device, dtype=dtype),
            torch.randn(shape_kv, device=device, dtype=dtype),
            torch.randn(shape_kv, device=device, dtype=dtype))


def _widen(t, head_dim):
    """t with head_dim columns (its own, then random ones)."""
    extra = torch.randn(*t.shape[:3], head_dim - t.shape[3], device=t.device, dtype=t.dtype)
    return torch.cat([t, extra], -1)


CASES = [
    ("q not a tensor", lambda q, k, v: ([1.0], k, v, {}), TypeError, "q must be a torch.Tensor"),
    ("q rank 3", lambda q, k, v: (q[0], k, v, {}), ValueError, "q must have 4 dimensions"),
    ("k rank 5", lambda q, k, v: (q, k[None], v, {}), ValueError, "k must have 4 dimensions"),
    ("int dtype", lambda q, k, v: (q.to(torch.int32), k, v, {}), TypeError, "q must be float16"),
    ("float64", lambda q, k, v: (q, k, v.double(), {}), TypeError, "v must be float16"),
    ("mixed dtypes", lambda q, k, v: (q, k.float(), v, {}), TypeError, "share one dtype"),
    ("k v shapes", lambda q, k, v: (q, k, v[:, :, :4], {}), ValueError,
     "k and v must have the same batch, heads and seqlen"),
    ("batch", lambda q, k, v: (q, torch.cat([k, k]), torch.cat([v, v]), {}), ValueError, "batch"),
    ("head_dim mismatch", lambda q, k, v: (q, k[..., :16], v[..., :16], {}), ValueError, "head_dim"),
    ("heads not divisible", lambda q, k, v: (q[:, :3], k, v, {}), ValueError, "multiple of heads_kv"),
    ("head_dim 257", lambda q, k, v: (*(_widen(t, 257) for t in (q, k, v)), {}), ValueError,
     "q has head_dim 257; head_dim must be from 1 to 256"),
    ("head_dim 0", lambda q, k, v: (q[..., :0], k[..., :0], v[..., :0], {}), ValueError,
     "q has head_dim 0; head_dim must be from 1 to 256"),
    ("k head_dim 0", lambda q, k, v: (q, k[..., :0], v, {}), ValueError, "k has head_dim 0"),
    ("v head_dim 0", lambda q, k, v: (q, k, v[..., :0], {}), ValueError, "v has head_dim 0"),
    ("v head_dim 257", lambda q, k, v: (q, k, _widen(v, 257), {}), ValueError,
     "v has head_dim 257; head_dim must be from 1 to 256"),
    ("head_dim 32 vs 40", lambda q, k, v: (q, _widen(k, 40), _widen(v, 40), {}), ValueError,
     "k has head_dim 40 but q has head_dim 32"),
    ("tma head_dim 44", lambda q, k, v: (*(_widen(t, 44) for t in (q, k, v)),
                                         {"config": TileConfig(32, 16, tma=True)}),
     ValueError, "config.tma needs k's rows a multiple of 16 bytes .* head_dim 44 of float16: "
                 "88 bytes"),
    ("tma v head_dim 44", lambda q, k, v: (q, k, _widen(v, 44),
                                           {"config": TileConfig(32, 16, tma=True)}),
     ValueError, "config.tma needs v's rows a multiple of 16 bytes"),
    ("empty seqlen", lambda q, k, v: (q[:, :, :0], k, v, {}), ValueError, "empty"),
    ("causal not bool", lambda q, k, v: (q, k, v, {"causal": 1}), TypeError, "causal must be a bool"),
    ("scale string", lambda q, k, v: (q, k, v, {"softmax_scale": "0.1"}), TypeError, "softmax_scale"),
    ("scale nan", lambda q, k, v: (q, k, v, {"softmax_scale": float("nan")}), ValueError, "softmax_scale"),
    ("variant string", lambda q, k, v: (q, k, v, {"variant": "fa2"}), TypeError, "variant must be"),
    ("block not pow2", lambda q, k, v: (q, k, v, {"config": TileConfig(48, 16)}), ValueError, "block_m"),
    ("slices", lambda q, k, v: (q, k, v, {"config": TileConfig(32, 16, key_slices=3),
                                          "variant": Variant(split_q=False)}), ValueError, "key_slices"),
    ("backward slices", lambda q, k, v: (q, k, v, {"config": TileConfig(32, 16, bwd_key_slices=3),
                                                   "variant": Variant(split_q=False)}),
     ValueError, "bwd_key_slices"),
    ("backend", lambda q, k, v: (q, k, v, {"backend": "cuda"}), ValueError, "backend must be one of"),
    ("tma strides", lambda q, k, v: (q, k, v.transpose(2, 3).contiguous().transpose(2, 3),
                                     {"config": TileConfig(32, 16, tma=True)}),
     ValueError, "config.tma needs v with head_dim stride 1"),
    ("tma not bool", lambda q, k, v: (q, k, v, {"config": TileConfig(32, 16, tma=1)}), TypeError,
     "config.tma must be a bool"),
    ("nan_flags not bool", lambda q, k, v: (q, k, v, {"config": TileConfig(32, 16, nan_flags=0)}),
     TypeError, "config.nan_flags must be a bool"),
    *[(f"register cap {cap!r}", lambda q, k, v, cap=cap: (
        q, k, v, {"config": TileConfig(32, 16, max_registers=cap)}), ValueError,
       "config.max_registers must be 0") for cap in (-1, 16, 256, True, 128.0)],
]


@pytest.mark.parametrize("name,make,error,message", CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises(name, make, error, message, device):
    q, k, v, kwargs = make(*_qkv(device))
    with pytest.raises(error, match=message):
        flash_attention(q, k, v, **kwargs)


def test_cpu_tensor_without_interpreter_is_refused(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    q, k, v = _qkv("cpu")
    with pytest.raises(ValueError, match="CUDA device"):
        flash_attention(q, k, v)


def test_variant_names_round_trip():
    names = [str(v) for v in Variant.all()]
    assert len(set(names)) == 8
    assert all(Variant.parse(n) == v for n, v in zip(names, Variant.all()))
    assert Variant.all()[0] == Variant() and Variant.all()[-1] == Variant(False, False, False)
    assert Variant.parse("fa1") == Variant(False, False, False)
    with pytest.raises(ValueError, match="cannot parse"):
        Variant.parse("+defer+defer+splitq")
    with pytest.raises(TypeError):
        Variant(defer_norm=1)


def test_gluon_backend_refuses_what_it_cannot_run(device):
    from kernels.gluon_forward import check_gluon_call

    q, k, v = _qkv(device)
    if device == "cpu":
        with pytest.raises(ValueError, match="needs a CUDA GPU"):
            flash_attention(q, k, v, backend="gluon")
    else:
        with pytest.raises(ValueError, match="float16 or bfloat16"):
            flash_attention(q.float(), k.float(), v.float(), backend="gluon")
    fa2, split_k = Variant(), Variant(split_q=False)
    for dtype, head_dim, variant, config, message in [
            (torch.float32, 64, fa2, TileConfig(64, 32), "float16 or bfloat16"),
            (torch.bfloat16, 256, fa2, TileConfig(64, 32), "head_dim in"),
            (torch.bfloat16, 64, fa2, TileConfig(32, 32, num_warps=4), "16 rows per warp"),
            (torch.bfloat16, 64, split_k, TileConfig(16, 32, num_warps=4), "16 keys per warp")]:
        with pytest.raises(ValueError, match=message):
            check_gluon_call(dtype, head_dim, variant, config)
    with pytest.raises(ValueError, match="takes v with q's head_dim"):
        check_gluon_call(torch.bfloat16, 64, fa2, TileConfig(64, 32), head_dim_v=32)
    check_gluon_call(torch.bfloat16, 64, split_k, TileConfig(16, 64, num_warps=4))


# on a CPU without TRITON_INTERPRET, a bad call is told about its arguments before the device
ARGUMENTS_BEFORE_DEVICE = [case for case in CASES if case[0] in (
    "k v shapes", "batch", "head_dim mismatch", "heads not divisible", "head_dim 32 vs 40",
    "causal not bool", "scale string", "scale nan", "variant string")]


@pytest.mark.parametrize("name,make,error,message", ARGUMENTS_BEFORE_DEVICE,
                         ids=[c[0] for c in ARGUMENTS_BEFORE_DEVICE])
def test_argument_errors_come_before_the_device_error(name, make, error, message, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # a CPU tensor without the interpreter
    q, k, v, kwargs = make(*_qkv("cpu"))
    with pytest.raises(error, match=message):
        flash_attention(q, k, v, **kwargs)


def test_a_good_call_on_the_cpu_without_the_interpreter_names_the_device(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="q is on cpu: the kernels need a CUDA device, or "
                                         "Triton's interpreter"):
        flash_attention(*_qkv("cpu"))
