"""Layout report: how each kernel variant spreads its matrix products over warps on sm_90.

    python -m fa2check.layouts [--kernel attn_fwd] [--variant fa2] [--head-dim 64] [--causal]

Every case is compiled for Hopper ahead of time, without a GPU, exactly as the compile gate does
(`fa2check.compile_gate.compile_kernel_for_sm90`). Where each number comes from:

- dots: every `tt.dot` / `ttng.warp_group_dot` of the compiled TTGIR (`compiled.asm["ttgir"]`),
  named after the kernel variable that holds the product (S = QK^T is `s`, P V is `pv`, or `o_s`
  for split-K's batched (KEY_SLICES, BLOCK_M, D) product). For each: its result shape and
  element type, and the layout alias it is given (`#mma = #ttg.nvidia_mma<{versionMajor = 3,
  ..., warpsPerCTA = [4, 1], instrShape = [16, 64, 16]}>`): the kind (mma v3 is Hopper's
  warpgroup MMA, mma v2 Ampere's mma.sync, blocked a plain FMA dot), warpsPerCTA and
  instrShape.
- reductions: every `tt.reduce` (the row max and row sum, and split-K's merge of the slices),
  with the number of warps its operand's layout spreads along the reduced axis: 1 means the
  reduction stays inside a warp, more means it crosses warps (Triton then goes through shared
  memory). Linear layouts have no warpsPerCTA; their warps per axis are read from their `warp`
  bases (a zero basis: warps that hold copies).
- copies: when a layout has more warps along an axis than the tensor has warp tiles, the extra
  warps hold (and compute) copies of the others' part; "x2 copies" means half the warps do.
- shared memory (`metadata.shared`), registers and spill bytes (`ptxas -v`), as in the gate.

In plain Triton the compiler chooses warpsPerCTA, not the kernel: the report shows what Triton
chose for each variant, and compares every split-Q variant with its split-K counterpart (the
same flags otherwise), saying plainly when split_q leaves a product's warpsPerCTA unchanged.

Backends: every kernel of the compile gate (`SPECS`) names its backend, `triton` (layouts chosen
by the compiler), `gluon` or `hopper` (layouts written in the kernel), so a new kernel joins
the report by joining the gate. As in the gate, with TRITON_INTERPRET set the kernels are
interpreter objects, so `main` then reruns itself without that variable.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from rich.table import Table
from rich.text import Text

from kernels import Variant

from .compile_gate import (SPECS, Case, CompileReport, _blank_report, _s, add_case_arguments,
                           add_output_arguments, compile_kernel_for_sm90, compile_progress,
                           describe_error, gate_cases, interpreting, report_console,
                           rerun_without_interpreter, run_in_workers, summarize)

DOT_ROLES = {  # kernel variable -> the product it holds
    "s": "S", "pv": "PV", "o_s": "PV",  # forward (o_s: split-K's per-slice P V)
    "pv_s": "PV",  # the Gluon forward's per-slice P V
    "sT": "S^T", "dv": "dV", "dpT": "dP^T", "dk": "dK", "dq": "dQ",  # backward
    "dp": "dP",  # the backward's dQ pass (its S is "s")
}


# --- TTGIR parsing -------------------------------------------------------------------------------

class LayoutParseError(ValueError):
    """The TTGIR has a layout or type this parser cannot read."""


@dataclass(frozen=True)
class Layout:
    """A `#ttg.<kind><{...}>` layout attribute, with the fields the report needs."""
    kind: str  # nvidia_mma, blocked, linear, slice, dot_op, nvmma_shared, ...
    alias: str | None = None  # "mma1" for `#mma1 = ...`; None when written inline
    warps_per_cta: tuple[int, ...] | None = None  # nvidia_mma, blocked
    version: int | None = None  # nvidia_mma: versionMajor (3: wgmma, 2: mma.sync)
    instr_shape: tuple[int, ...] | None = None  # nvidia_mma
    warp_tile: tuple[int, ...] | None = None  # nvidia_mma, blocked: elements one warp covers
    warp_bases: tuple[tuple[int, ...], ...] | None = None  # linear
    parent: Layout | None = None  # slice
    dim: int | None = None  # slice: the axis removed from the parent


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    element: str
    layout: Layout


_ALIAS_LINE = re.compile(r"#([\w$.-]+) = #ttg\.(\w+)<\{(.*)\}>")
_LOC = re.compile(r"\s+loc\(.*\)\s*$")
_DOT = re.compile(r"%([\w$.-]+)(?::\d+)? = (tt\.dot|tt\.dot_scaled|ttng\.warp_group_dot) .*"
                  r"->\s*(tensor<.*>)$")
_REDUCE = re.compile(r'%([\w$.-]+)(?::\d+)? = "tt\.reduce"\(.*\) <\{axis = (\d+) : i32\}>')
_REDUCE_END = re.compile(r"\}\) : \((tensor<.*?>)(?:, tensor<.*>)?\) ->")
_COMBINE = re.compile(r"= (\w+\.\w+) ")


def parse_layout_aliases(ttgir: str) -> dict[str, Layout]:
    """The `#name = #ttg.kind<{...}>` definitions at the top of a TTGIR module, by name."""
    aliases = {}
    for line in ttgir.splitlines():
        if not re.match(r"#[\w$.-]+ = #ttg\.\w+<", line):
            continue  # #loc aliases, `#smem = #ttg.shared_memory`, the module body
        m = _ALIAS_LINE.fullmatch(line.strip())
        if not m:
            raise LayoutParseError(f"malformed layout alias: {line.strip()}")
        name, kind, body = m.groups()
        aliases[name] = _layout(kind, body, name, aliases)
    return aliases


def _layout(kind: str, body: str, alias: str | None, aliases: dict[str, Layout]) -> Layout:
    where = f"#{alias}" if alias else f"#ttg.{kind}"
    if kind == "nvidia_mma":
        version = _required(re.search(r"\bversionMajor = (\d+)", body), where, "versionMajor")
        warps = _int_list(body, "warpsPerCTA", where)
        instr = _int_list(body, "instrShape", where)
        # v3's instrShape is [16, N, K]: one warp of a warpgroup covers 16 rows, N columns;
        # v2's has the tensor's rank ([16, 8], or [1, 16, 8] for a batched 3-D dot)
        return Layout(kind, alias, warps, int(version.group(1)), instr, instr[:len(warps)])
    if kind == "blocked":
        warps = _int_list(body, "warpsPerCTA", where)
        tile = tuple(a * b for a, b in zip(_int_list(body, "sizePerThread", where),
                                           _int_list(body, "threadsPerWarp", where)))
        return Layout(kind, alias, warps, warp_tile=tile)
    if kind == "linear":
        bases = _required(re.search(r"\bwarp = \[((?:\[[\d,\s]*\],?\s*)*)\]", body), where,
                          "warp bases")
        return Layout(kind, alias, warp_bases=tuple(
            tuple(int(x) for x in b.split(",") if x.strip())
            for b in re.findall(r"\[([\d,\s]*)\]", bases.group(1))))
    if kind == "slice":
        m = _required(re.fullmatch(r"dim = (\d+), parent = (.+)", body), where, "dim, parent")
        return Layout(kind, alias, parent=parse_layout(m.group(2), aliases), dim=int(m.group(1)))
    return Layout(kind, alias)  # shared-memory and operand layouts: nothing to report


def _int_list(body: str, key: str, where: str) -> tuple[int, ...]:
    m = _required(re.search(rf"\b{key} = \[(\d+(?:,\s*\d+)*)\]", body), where, key)
    return tuple(int(x) for x in m.group(1).split(","))


def _required(match, where: str, what: str):
    if match is None:
        raise LayoutParseError(f"{where}: no readable {what}")
    return match


def parse_layout(text: str, aliases: dict[str, Layout]) -> Layout:
    """A layout as written in a type: `#mma1` or inline `#ttg.slice<{dim = 1, parent = ...}>`."""
    text = text.strip()
    if m := re.fullmatch(r"#([\w$.-]+)", text):
        if m.group(1) not in aliases:
            raise LayoutParseError(f"unknown layout alias {text}")
        return aliases[m.group(1)]
    m = _required(re.fullmatch(r"#ttg\.(\w+)<\{(.*)\}>", text), text, "layout")
    return _layout(m.group(1), m.group(2), None, aliases)


def parse_tensor_type(text: str, aliases: dict[str, Layout]) -> TensorType:
    """`tensor<4x128x64xf32, #mma1>` -> shape (4, 128, 64), element f32 and its layout."""
    m = _required(re.fullmatch(r"tensor<((?:\d+x)+)([^,]+), (.+)>", text.strip()), text,
                  "tensor type with a layout")
    shape = tuple(int(d) for d in m.group(1).split("x") if d)
    return TensorType(shape, m.group(2), parse_layout(m.group(3), aliases))


def warp_split(layout: Layout, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Warps holding distinct data along each axis of a `shape` tensor; None if not per-axis."""
    if layout.warp_tile is not None:  # nvidia_mma, blocked: warps beyond the warp tiles repeat
        return tuple(min(w, max(1, s // t))
                     for w, s, t in zip(layout.warps_per_cta, shape, layout.warp_tile))
    if layout.warp_bases is not None:  # linear: each basis doubles the warps along one axis
        split = [1] * len(shape)
        for basis in layout.warp_bases:
            axes = [i for i, x in enumerate(basis) if x]
            if len(axes) > 1:
                return None  # warps mix axes
            if axes:
                split[axes[0]] *= 2
        return tuple(split)
    if layout.kind == "slice":  # the parent's split without the removed axis
        parent = warp_split(layout.parent, shape[:layout.dim] + (1,) + shape[layout.dim:])
        return None if parent is None else parent[:layout.dim] + parent[layout.dim + 1:]
    return None


def num_warps(layout: Layout) -> int | None:
    if layout.warps_per_cta is not None:
        return math.prod(layout.warps_per_cta)
    if layout.warp_bases is not None:
        return 2 ** len(layout.warp_bases)
    return num_warps(layout.parent) if layout.kind == "slice" else None


def copies(layout: Layout, shape: tuple[int, ...]) -> int | None:
    """How many warps hold each part of the tensor (1: no copies)."""
    split, total = warp_split(layout, shape), num_warps(layout)
    return None if split is None or total is None else total // math.prod(split)


def _fmt(xs) -> str:
    return "-" if xs is None else "[" + ",".join(map(str, xs)) + "]"


def describe_layout(layout: Layout) -> str:
    """`mma v3 warps [4,1] instr [16,64,16]`, `slice(2) of linear warp bases [...]`, ..."""
    if layout.kind == "nvidia_mma":
        return (f"mma v{layout.version} warps {_fmt(layout.warps_per_cta)} "
                f"instr {_fmt(layout.instr_shape)}")
    if layout.kind == "blocked":
        return f"blocked warps {_fmt(layout.warps_per_cta)}"
    if layout.kind == "linear":
        return f"linear warp bases {_fmt(_fmt(b) for b in layout.warp_bases)}"
    if layout.kind == "slice":
        return f"slice({layout.dim}) of {describe_layout(layout.parent)}"
    return layout.kind


@dataclass
class DotLayout:
    """The result (accumulator) of one matrix product in the TTGIR."""
    name: str  # the kernel variable (SSA value name without Triton's _N suffix)
    op: str  # tt.dot or ttng.warp_group_dot
    shape: list[int]
    element: str
    kind: str  # nvidia_mma, blocked, ...
    mma_version: int | None
    warps_per_cta: list[int] | None
    instr_shape: list[int] | None
    copies: int | None  # warps holding each part (2: half the warps compute copies)
    layout: str  # describe_layout

    @property
    def role(self) -> str:
        return DOT_ROLES.get(self.name, self.name)

    def describe(self) -> str:
        """`mma v2 warps [8,1,1] instr [1,16,8] 4x64x128 x2 copies`"""
        shape = "x".join(map(str, self.shape))
        dup = f" x{self.copies} copies" if self.copies and self.copies > 1 else ""
        return f"{self.layout} {shape}{dup}"

    def summary(self) -> str:
        return f"{self.role}: {self.describe()}"


@dataclass
class ReductionLayout:
    """One `tt.reduce` and how its operand is spread over warps."""
    name: str
    combine: str  # the combining op, e.g. arith.maxnumf, arith.addf
    axis: int
    shape: list[int]  # of the operand
    layout: str  # describe_layout of the operand's layout
    warps_on_axis: int | None  # distinct warps along the reduced axis (1: within a warp)


def _ssa_name(name: str) -> str:
    """The kernel variable an SSA value was named after (`pv_176` -> `pv`); `%32` if none."""
    return f"%{name}" if name.isdigit() else re.sub(r"_\d+$", "", name)


def _code_lines(ttgir: str) -> list[str]:
    return [_LOC.sub("", line).strip() for line in ttgir.splitlines()]


def _list(xs):
    return None if xs is None else list(xs)


def parse_dots(ttgir: str, aliases: dict[str, Layout] | None = None) -> list[DotLayout]:
    """The distinct matrix products, in program order (the kernels' two K/V loops repeat them)."""
    aliases = parse_layout_aliases(ttgir) if aliases is None else aliases
    dots = []
    for line in _code_lines(ttgir):
        if m := _DOT.fullmatch(line):
            name, op, result = m.groups()
            t = parse_tensor_type(result, aliases)
            lay = t.layout
            dot = DotLayout(_ssa_name(name), op, list(t.shape), t.element, lay.kind, lay.version,
                            _list(lay.warps_per_cta), _list(lay.instr_shape),
                            copies(lay, t.shape), describe_layout(lay))
            if dot not in dots:
                dots.append(dot)
    return dots


def parse_reductions(ttgir: str, aliases: dict[str, Layout] | None = None
                     ) -> list[ReductionLayout]:
    """The distinct `tt.reduce` ops, in program order, with their operand's layout."""
    aliases = parse_layout_aliases(ttgir) if aliases is None else aliases
    lines, found = _code_lines(ttgir), []
    for i, line in enumerate(lines):
        if not (m := _REDUCE.match(line)):
            continue
        name, axis = _ssa_name(m.group(1)), int(m.group(2))
        region = lines[i + 1:]
        end = next((j for j, text in enumerate(region) if _REDUCE_END.match(text)), None)
        if end is None:
            raise LayoutParseError(f"tt.reduce %{m.group(1)} has no `}}) : (...) ->` line")
        operand = parse_tensor_type(_REDUCE_END.match(region[end]).group(1), aliases)
        combine = next((c.group(1) for text in region[:end] if (c := _COMBINE.search(text))),
                       "?")
        split = warp_split(operand.layout, operand.shape)
        reduction = ReductionLayout(name, combine, axis, list(operand.shape),
                                    describe_layout(operand.layout),
                                    None if split is None else split[axis])
        if reduction not in found:
            found.append(reduction)
    return found


FORWARDS = ["attn_fwd", "gluon_attn_fwd"]

# --- compiling: every kernel spec names its backend -----------------------------------------------

BACKENDS = {name: tuple(k for k, spec in SPECS.items() if spec.backend == name)
            for name in ("triton", "gluon", "hopper")}  # backend -> its kernels (gate specs)


@dataclass
class LayoutReport:
    backend: str
    compile: CompileReport
    dots: list[DotLayout] = field(default_factory=list)
    reductions: list[ReductionLayout] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.compile.ok


def layout_report(kernel: str, case: Case) -> LayoutReport:
    """Compile one case as the gate does and read its layouts; raises on a compile or parse
    error."""
    report, compiled = compile_kernel_for_sm90(kernel, case.variant, case.dtype, case.head_dim,
                                               case.causal, case.config, case.length_one)
    ttgir = compiled.asm["ttgir"]
    aliases = parse_layout_aliases(ttgir)
    return LayoutReport(SPECS[kernel].backend, report, parse_dots(ttgir, aliases),
                        parse_reductions(ttgir, aliases))


def _report_or_error(kernel: str, case: Case) -> LayoutReport:
    try:
        return layout_report(kernel, case)
    except Exception as e:  # noqa: BLE001 - every failure becomes a report
        report = _blank_report(kernel, case)
        report.error = describe_error(e)
        return LayoutReport(SPECS[kernel].backend, report)


def layout_cases(backends, kernels, variants, dtypes, head_dims, causals) -> list[tuple]:
    """(kernel, case) for every combination the selected backends' kernels provide."""
    chosen = [k for k in kernels if any(k in BACKENDS[b] for b in backends)]
    return gate_cases(variants, dtypes, head_dims, causals, chosen)


def run_layouts(backends, kernels, variants, dtypes, head_dims, causals, jobs: int = 1,
                progress: Callable[[LayoutReport], None] | None = None) -> list[LayoutReport]:
    """Every combination each backend provides; failures come back with compile.error set."""
    cases = layout_cases(backends, kernels, variants, dtypes, head_dims, causals)
    return run_in_workers(_report_or_error, cases, jobs, progress)


# --- what split_q changes ------------------------------------------------------------------------

SOFTMAX_REDUCTIONS = ("m_new", "l_tile", "pv")  # a tile's row max, row sum, merge of P V


def warp_partition(report: LayoutReport) -> str:
    """How a forward's warps share the S tile: "rows" (split-Q: every warp owns whole query
    rows and no softmax reduction crosses warps), "keys" (split-K: every warp owns a share of
    the keys and the tile's softmax reductions cross warps), or "mixed". S is (rows, keys), or
    (slices, rows, keys per slice) where the kernel holds the key slices on an axis of their
    own. (The causal Gluon kernel's scan of a diagonal tile's V for non-finite values,
    `first_bad`, is not a softmax reduction.)"""
    s = next((d for d in report.dots if d.role == "S"), None)
    if s is None or s.warps_per_cta is None:
        return "mixed"
    warps = math.prod(s.warps_per_cta)
    on_rows = s.warps_per_cta[-2]
    crosses = any(r.warps_on_axis and r.warps_on_axis > 1 for r in report.reductions
                  if r.name in SOFTMAX_REDUCTIONS)
    if on_rows == warps and not crosses:
        return "rows"
    if on_rows == 1 and crosses:
        return "keys"
    return "mixed"



def split_q_findings(reports: list[LayoutReport]) -> list[str]:
    """Each split-Q report against its split-K counterpart (same flags otherwise): one header
    line per group of flags that give the same comparison, then one line per product."""
    by_case = {_case_key(r, r.compile.variant): r for r in reports if r.ok}
    grouped: dict[tuple, list[str]] = {}
    for key, on in by_case.items():
        variant = Variant.parse(key[-1])
        if not variant.split_q or variant.hopper_switches:  # a switch variant has no split-K
            continue
        off = by_case.get(key[:-1] + (str(dataclasses.replace(variant, split_q=False)),))
        if off is None:
            continue
        c = on.compile
        where = f"{on.backend} {c.kernel} {c.dtype} D={c.head_dim} " \
                f"{'causal' if c.causal else 'non-causal'}"
        other_flags = str(variant).replace("+splitq", "")
        grouped.setdefault((where, *_compare_dots(on, off)), []).append(other_flags)
    lines = []
    for (where, *roles), flags in grouped.items():
        lines.append(f"split_q on vs off, {where} ({', '.join(flags)}):")
        lines += [f"  {role}" for role in roles]
    return lines


def _case_key(r: LayoutReport, variant: str) -> tuple:
    c = r.compile
    return r.backend, c.kernel, c.dtype, c.head_dim, c.causal, variant


def _compare_dots(on: LayoutReport, off: LayoutReport) -> list[str]:
    """Per product: the same layout, the same warpsPerCTA in another layout, or different."""
    lines = []
    for role in dict.fromkeys(d.role for d in on.dots + off.dots):
        with_q = [d for d in on.dots if d.role == role]
        without = [d for d in off.dots if d.role == role]
        text_on, text_off = _dots_text(with_q), _dots_text(without)
        warps_on, warps_off = _warps_text(with_q), _warps_text(without)
        if text_on == text_off:
            lines.append(f"{role}: the same with and without split_q: {text_on}")
        elif warps_on == warps_off:
            lines.append(f"{role}: the same warpsPerCTA {warps_on} with and without split_q; "
                         f"with: {text_on}; without: {text_off}")
        else:
            lines.append(f"{role}: warpsPerCTA {warps_on} with split_q, {warps_off} without; "
                         f"with: {text_on}; without: {text_off}")
    return lines


def _warps_text(dots: list[DotLayout]) -> str:
    return " / ".join(_fmt(d.warps_per_cta) for d in dots) or "none"


def _dots_text(dots: list[DotLayout]) -> str:
    return " / ".join(d.describe() for d in dots) or "no such product"


# --- CLI -----------------------------------------------------------------------------------------

def _reductions_text(reductions: list[ReductionLayout]) -> str:
    """Reductions grouped by whether they stay in a warp: `m_new,l_tile: in-warp`."""
    groups: dict[str, list[str]] = {}
    for r in reductions:
        where = ("? warps" if r.warps_on_axis is None else
                 "in-warp" if r.warps_on_axis == 1 else f"across {r.warps_on_axis} warps")
        groups.setdefault(where, [])
        if r.name not in groups[where]:
            groups[where].append(r.name)
    return "\n".join(f"{','.join(names)}: {where}" for where, names in groups.items())


def _table(reports: list[LayoutReport]):
    table = Table(title="sm_90 layouts (warpsPerCTA as Triton chose them; gluon: as the kernel "
                  "states them)", show_lines=True)
    for column in ("backend", "kernel", "variant", "dtype", "D", "causal", "products",
                   "reductions", "smem", "regs", "spill st/ld", "status"):
        table.add_column(column, justify="right" if column in ("D", "smem", "regs",
                                                               "spill st/ld") else "left",
                         min_width=62 if column == "products" else None)
    for r in reports:
        c = r.compile
        status = Text("ok", "green") if r.ok else Text(c.error.splitlines()[0][:60], "red")
        spills = Text("" if c.spill_stores is None else f"{c.spill_stores}/{c.spill_loads}",
                      "yellow" if c.spill_stores else "")
        table.add_row(r.backend, c.kernel, c.variant, c.dtype, str(c.head_dim),
                      "y" if c.causal else "n", "\n".join(d.summary() for d in r.dots),
                      _reductions_text(r.reductions), _s(c.shared_bytes), _s(c.registers),
                      spills, status)
    return table


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m fa2check.layouts", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", action="append", choices=sorted(BACKENDS), help="default: all")
    add_case_arguments(p, "the forwards, attn_fwd and gluon_attn_fwd", "bfloat16", "64 and 128")
    p.add_argument("--causal", action=argparse.BooleanOptionalAction, default=False,
                   help="causal or not (default: not)")
    add_output_arguments(p)
    return p.parse_args(argv)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if interpreting():
        return rerun_without_interpreter("fa2check.layouts", argv)
    args = parse_args(argv)
    selection = dict(backends=args.backend or list(BACKENDS), kernels=args.kernel or FORWARDS,
                     variants=args.variant or Variant.all(), dtypes=args.dtype or ["bfloat16"],
                     head_dims=args.head_dim or [64, 128], causals=[args.causal])
    total = len(layout_cases(**selection))
    console = report_console(240)
    start = time.perf_counter()
    with compile_progress(console, total) as advance:
        def progress(r):
            c = r.compile
            advance(f"{r.backend} {c.kernel} {c.variant} {c.dtype} D={c.head_dim}")
        reports = run_layouts(**selection, jobs=args.jobs, progress=progress)
    console.print(_table(reports))
    for line in split_q_findings(reports):
        console.print(line, markup=False, highlight=False)
    for r in reports:
        if r.ok and r.compile.kernel in FORWARDS:
            console.print(f"{r.backend} {r.compile.variant} {r.compile.dtype} D={r.compile.head_dim}:"
                          f" the warps split S along its {warp_partition(r)}", markup=False,
                          highlight=False)
    failed = [r for r in reports if not r.ok]
    for r in failed:
        c = r.compile
        console.print(f"FAILED {r.backend} {c.kernel} {c.variant} {c.dtype} D={c.head_dim} "
                      f"causal={c.causal}:\n{c.error}", style="red", markup=False,
                      highlight=False)
    return summarize(console, reports, len(failed), start, args.json)


if __name__ == "__main__":
    sys.exit(main())
