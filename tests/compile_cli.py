"""Run a command that compiles for sm_90 (fa2check.compile_gate, fa2check.layouts) as a user
would: in a subprocess, optionally started under TRITON_INTERPRET (the command must then rerun
itself without it), with --json; returns (process, the JSON it wrote or []). run_probe: a
probe's source, run the same way."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_cli(module: str, tmp_path, *args, interpret=False):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    out = tmp_path / "reports.json"
    cmd = [sys.executable, "-m", module, *args, "--json", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    return proc, json.loads(out.read_text()) if out.exists() else []


def run_probe(source: str, timeout: int = 600):
    """Run the Python `source` (a probe that compiles for sm_90 and prints JSON as its last
    line) in a subprocess, off Triton's interpreter; returns that JSON. A probe that fails
    fails the test with the tail of its stderr."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", source], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
