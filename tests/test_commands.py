"""The commands a newcomer copies: every command line in the README's shell blocks names a
make target that exists and passes options through ARGS (make has no --impl), and each
option parses in the module it reaches; make test runs the tests in parallel; nothing tells
a user about machines that are not theirs."""
import os
import re
import shlex
import subprocess
import sys

import pytest

from conftest import GPU_SKIP_REASON

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = {"verify": "fa2check.verify", "fuzz": "fa2check.fuzz"}  # make target -> module


def _read(name):
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


def readme_commands():
    blocks = re.findall(r"```sh\n(.*?)```", _read("README.md"), flags=re.S)
    lines = [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if line]


def _parser(module):
    import importlib

    return importlib.import_module(module).parse_args


def test_readme_command_lines_run_as_written():
    targets = set(re.findall(r"^([a-z][a-z-]*):", _read("Makefile"), flags=re.M))
    commands = readme_commands()
    assert any(c.startswith("make verify ARGS=") for c in commands)
    for command in commands:
        words = shlex.split(command)
        if words[0] == "make":
            assert words[1] in targets, command
            settings = words[2:]
            assert all(re.match(r"^[A-Z_]+=", w) for w in settings), (
                f"{command}: make takes options as ARGS=\"...\", not as its own arguments")
            args = [shlex.split(w.split("=", 1)[1]) for w in settings if w.startswith("ARGS=")]
            if args and words[1] in MODULES:
                _parser(MODULES[words[1]])(args[0])
        else:
            assert words[:3] in ([".venv/bin/python", "-m", words[2]], ["python", "-m", words[2]]), command
            assert words[2].startswith("fa2check."), command
            _parser(words[2])(words[3:])


def test_make_test_runs_the_tests_in_parallel():
    pytest.importorskip("xdist", reason="pytest-xdist: the test extra of pyproject.toml")
    assert re.search(r'test = \[[^\]]*"pytest-xdist', _read("pyproject.toml"))
    dry = subprocess.run(["make", "-n", "test", f"PYTHON={sys.executable}"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert f"{sys.executable} -m pytest -n auto --dist loadgroup" in dry
    assert "make test" in _read(".ci/run").splitlines()[-1]


def test_no_word_about_machines_that_are_not_the_users():
    assert "make test-gpu" in GPU_SKIP_REASON
    for name in ("README.md", "Makefile", "pyproject.toml", "tests/conftest.py",
                 "fa2check/fuzz/cli.py", "fa2check/verify/cli.py"):
        assert "device machine" not in _read(name), name
