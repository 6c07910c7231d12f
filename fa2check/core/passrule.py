"""The pass rule: an output passes when

    max|impl - oracle| <= c * max|same-dtype PyTorch - oracle| + floor

over the positions where the oracle is finite, and the implementation is non-finite exactly
where the oracle is (same value: lse is -inf for a row that sees no key; NaN never passes).

- c = 2 for forward outputs (o, lse): the rule of flash-attention's own test suite.
- c = 3 for gradients (dq, dk, dv). The kernels recompute P from the float32 statistics instead
  of reusing a stored softmax, round dS to the input dtype before two more products, and sum
  dQ over column blocks in float32, so their gradients take a few more roundings than the
  same-dtype PyTorch composition whose error sets the scale.
- floor = (eps(dtype) / 2 + INTERNAL_ULPS * eps(float32)) * max(1, max|oracle|): the final
  rounding to the output's dtype cannot be beaten, and the kernels compute in float32 whatever
  the input dtype. INTERNAL_ULPS is 4 for forward outputs and 16 for gradients, which pass
  through exp, a cancelling difference (dP - D) and two more products. Measured on the CPU
  interpreter: float32 dQ errors of about 9 float32 ulps of max|dQ| while the same-dtype
  PyTorch error happened to be 1.6 ulps, so c alone would fail a kernel with float32 accuracy.
  The floor still rejects tf32 (about 1e-3 relative) for float32 inputs.

`ratio` = error / allowed is what reports show: 1.0 is the edge of failure.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

C_FORWARD = 2.0
C_GRADIENT = 3.0
INTERNAL_ULPS_FORWARD = 4.0
INTERNAL_ULPS_GRADIENT = 16.0
FORWARD_OUTPUTS = ("o", "lse")
GRADIENT_OUTPUTS = ("dq", "dk", "dv")


@dataclass(frozen=True)
class OutputCheck:
    output: str
    error: float  # max |impl - oracle| where the oracle is finite
    baseline_error: float  # max |same-dtype PyTorch - oracle| there
    allowed: float
    nonfinite_match: bool  # impl non-finite exactly where (and as) the oracle is
    passed: bool

    @property
    def ratio(self) -> float:
        return self.error / self.allowed if self.allowed > 0 else float("inf")

    def as_dict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio}

    def __str__(self) -> str:
        status = "ok" if self.passed else "FAIL"
        extra = "" if self.nonfinite_match else " non-finite mismatch"
        return (f"{self.output}: {status} error {self.error:.3g} allowed {self.allowed:.3g} "
                f"(ratio {self.ratio:.2f}){extra}")


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor, where: torch.Tensor) -> float:
    diff = (a.double() - b.double()).abs()[where]
    return float(diff.max()) if diff.numel() else 0.0


def rounding_floor(name: str, oracle: torch.Tensor, dtype: torch.dtype) -> float:
    """(eps(dtype) / 2 + INTERNAL_ULPS * eps(float32)) * max(1, max|oracle| where finite)."""
    oracle = oracle.detach().double()
    finite = torch.isfinite(oracle)
    internal_ulps = INTERNAL_ULPS_GRADIENT if name in GRADIENT_OUTPUTS else INTERNAL_ULPS_FORWARD
    scale = float(oracle[finite].abs().max()) if finite.any() else 0.0
    return (torch.finfo(dtype).eps / 2 + internal_ulps * torch.finfo(torch.float32).eps) * max(1.0, scale)


def check_output(name: str, impl: torch.Tensor, oracle: torch.Tensor, baseline: torch.Tensor,
                 dtype: torch.dtype) -> OutputCheck:
    """Apply the pass rule to one output. `dtype` is the output's own dtype (for the floor).
    Computed in float64 on the oracle's device: on a GPU, copying a 16k cell's outputs to the
    host took most of the ablation gate's time (0.3-0.6 s a contender)."""
    device = oracle.device
    impl, oracle, baseline = (t.detach().to(device, torch.float64) for t in (impl, oracle, baseline))
    if impl.shape != oracle.shape:
        raise ValueError(f"{name}: shape {tuple(impl.shape)} != oracle {tuple(oracle.shape)}")
    finite = torch.isfinite(oracle)
    impl_finite = torch.isfinite(impl)
    nonfinite_match = bool(torch.equal(impl_finite, finite)) and bool(
        torch.equal(impl[~finite], oracle[~finite]))  # -inf == -inf; NaN never equals
    error = _max_abs_diff(impl, oracle, finite & impl_finite) if nonfinite_match else float("inf")
    baseline_error = _max_abs_diff(baseline, oracle, finite & torch.isfinite(baseline))
    c = C_GRADIENT if name in GRADIENT_OUTPUTS else C_FORWARD
    allowed = c * baseline_error + rounding_floor(name, oracle, dtype)
    return OutputCheck(name, error, baseline_error, allowed, nonfinite_match,
                       nonfinite_match and error <= allowed)
