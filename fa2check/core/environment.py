"""Where a run happens: device choice (CPU interpreter or CUDA) and provenance for results."""
from __future__ import annotations

import datetime
import glob
import hashlib
import os
import platform
import subprocess

import numpy
import torch

# the repository: fa2check/core/ is two levels below it
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def select_device() -> str:
    """'cuda' when a GPU is usable and the interpreter was not asked for, else 'cpu' with
    TRITON_INTERPRET=1 set (which must happen before triton is imported)."""
    if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        return "cuda"
    os.environ["TRITON_INTERPRET"] = "1"
    return "cpu"


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else "unknown"
    except OSError:
        return "unknown"


def kernels_sha256() -> str:
    """Hash of the kernel sources: identifies the code that ran even where git is absent (the
    device machine receives the working tree without .git)."""
    digest = hashlib.sha256()
    kernels = os.path.join(ROOT, "kernels")  # and its subpackages (kernels/plan)
    for path in sorted(glob.glob(os.path.join(kernels, "**", "*.py"), recursive=True)):
        digest.update(os.path.relpath(path, kernels).encode())
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def describe_environment(device: str, commit: str | None = None) -> dict:
    """The versions, device and code a result came from; `commit` is recorded instead of the
    checkout's where its .git is absent or stale (the device's copy of the tree)."""
    import triton

    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "git_commit": commit or git_commit(),
        "kernels_sha256": kernels_sha256(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET", ""),
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, sms=props.multi_processor_count,
                   cuda=torch.version.cuda, driver=_driver_version())
    return env


def _driver_version() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
