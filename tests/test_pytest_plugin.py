"""fa2check as a pytest plugin (fa2check/pytest_plugin.py) in a kernel author's own test
suite: the `fa2check` fixture and `pytest --fa2check-impl`, each (property, case) a test with
the reproduce command in its failure, n/a cases skipped with the implementation's words. Run as
a user would: pytest in a directory of its own (the entry point's autoload off, the plugin
named with -p, so that an installed entry point does not load it twice)."""
import os
import subprocess
import sys

from fa2check.core.environment import ROOT

TESTS = os.path.dirname(os.path.abspath(__file__))
MINE = '''
import sys
sys.path.insert(0, {tests!r})
from doubles import bshd, o_only

attention = bshd("none")          # a correct kernel in (B, S, H, D), returning o alone
leaky = o_only("hidden_v_leaks")  # NaN in V at keys a row cannot see reaches that row
'''


def _pytest(directory, *args):
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
           "PYTHONPATH": os.pathsep.join([ROOT, str(directory)])}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "fa2check.pytest_plugin",
                           "-p", "no:cacheprovider", "-rsfE", *args], cwd=directory, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_fixture_gives_a_subtest_per_case_with_its_command(tmp_path):
    (tmp_path / "mykernel.py").write_text(MINE.format(tests=TESTS))
    (tmp_path / "test_mine.py").write_text(
        "def test_attention(fa2check):\n"
        "    fa2check.verify('mykernel:attention', tier='quick', layout='bshd',\n"
        "                    properties=['lse_bounds', 'causal_masking'])\n\n"
        "def test_leaky(fa2check):\n"
        "    fa2check.verify('mykernel:leaky', tier='quick', properties=['causal_masking'])\n")
    run = _pytest(tmp_path, "-q")
    out = run.stdout
    assert run.returncode == 1, out
    assert "test_mine.py::test_attention PASSED" in _pytest(tmp_path, "-v", "-k",
                                                            "attention").stdout
    assert "n/a: lse_bounds checks lse alone" in out  # skipped, in words, not passed
    failed = [line for line in out.splitlines() if line.startswith("SUBFAILED")]
    assert len(failed) == 5 and all("causal_masking[" in line for line in failed), out
    assert "reproduce: python -m fa2check.verify --tier=quick --property=causal_masking " \
           "--impl=mykernel:leaky" in out
    assert "invisible_nan: expected o of the" in out


def test_fa2check_impl_makes_one_test_per_property_and_case(tmp_path):
    (tmp_path / "mykernel.py").write_text(MINE.format(tests=TESTS))
    run = _pytest(tmp_path, "-v", "--fa2check-impl", "mykernel:leaky", "--fa2check-property",
                  "lse_bounds", "--fa2check-property", "causal_masking")
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    items = [line for line in out.splitlines() if line.startswith("fa2check::mykernel:leaky::")]
    assert len(items) == 4 + 5, out  # lse_bounds' and causal_masking's quick cases
    assert sum(" SKIPPED" in line for line in items) == 4
    assert sum(" FAILED" in line for line in items) == 5
    assert "reproduce: python -m fa2check.verify --tier=quick --property=causal_masking" in out


def test_loading_the_plugin_imports_neither_torch_nor_triton():
    """pytest loads it before a suite's conftest can set TRITON_INTERPRET; importing triton
    there would make the interpreter unreachable for the whole session."""
    code = ("import sys, fa2check.pytest_plugin; "
            "print([m for m in ('torch', 'triton', 'kernels') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.stdout.strip() == "[]", out.stderr
