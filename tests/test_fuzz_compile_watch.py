"""The fuzzer's record of kernels compiled in its examples (fa2check/fuzz/compile_watch.py): a
real sm_90 compile through Triton's listener is recorded once, its cache hit not at all."""
import json
import os
import subprocess
import sys
import textwrap

from fa2check.fuzz.compile_watch import CompileTally, Compiled
from fa2check.fuzz.fuzzer import Tally, Tick
from fa2check.core.environment import ROOT
from kernels import Variant
from properties.strategies import Example

# in a process of its own: the tests import triton under the interpreter, which compiles nothing
COMPILE_TWICE = textwrap.dedent("""
    import json, sys
    import triton, triton.language as tl
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from fa2check.fuzz.compile_watch import CompileWatch

    @triton.jit
    def scale(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * 2, mask=offsets < n)

    knobs.cache.dir = sys.argv[1]
    watch = CompileWatch().install()
    taken = []
    for _ in range(2):  # the second compile is a hit in the on-disk cache
        source = ASTSource(scale, {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                           {"BLOCK": 64}, {(0,): [["tt.divisibility", 16]]})
        triton.compile(source, target=GPUTarget("cuda", 90, 32))
        taken.append([c.__dict__ for c in watch.take()])
    watch.uninstall()
    assert knobs.compilation.listener is None
    print(json.dumps(taken))
""")


def test_a_compile_is_recorded_and_a_cache_hit_is_not(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script = tmp_path / "compile_twice.py"  # @triton.jit reads its function's source file
    script.write_text(COMPILE_TWICE)
    run = subprocess.run([sys.executable, str(script), str(tmp_path / "cache")], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    first, second = json.loads(run.stdout.strip().splitlines()[-1])
    assert [c["kernel"] for c in first] == ["scale"], first
    assert "BLOCK=64" in first[0]["spec"] and "/16: x_ptr" in first[0]["spec"], first
    assert first[0]["seconds"] > 0
    assert second == []


def test_the_tally_counts_examples_that_compiled_and_names_their_kernels():
    example = Example.parse(f"{Variant()}:b1-h1/1-q64-k65-d16-float16-full-s0:normal:contiguous")
    built = (Compiled("attn_fwd", "BLOCK_M=64", 12.0), Compiled("attn_bwd", "BLOCK_M=32", 30.0))
    tally, other = Tally(), Tally()
    tally.add(Tick(example, True, 0.1, 42.0, "generate", compiled=built))
    tally.add(Tick(example, True, 0.1, 0.01, "generate"))
    other.add(Tick(example, True, 0.1, 12.0, "generate", compiled=built[:1]))
    other.add(Tick(example, True, 0.1, 12.0, "shrink", compiled=built[:1]))  # not a campaign's
    tally.merge(other)
    assert tally.as_dict()["compiled_in_examples"] == {
        "examples": 2, "seconds": 54.0, "kernels_compiled": 3,
        "kernels": {"attn_fwd [BLOCK_M=64]": 2, "attn_bwd [BLOCK_M=32]": 1}}
    assert CompileTally().as_dict()["examples"] == 0
