"""Tests run compiled on a CUDA GPU when there is one, else through Triton's CPU interpreter.

TRITON_INTERPRET must be set before triton is imported; importing torch does not import it.
"""
import os

import torch

ON_GPU = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
if not ON_GPU:
    os.environ["TRITON_INTERPRET"] = "1"

import atexit  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402
from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402

# hypothesis keeps a cache (and, when asked, its example database) under .hypothesis/ in the
# working directory; the tests keep it in a temporary directory instead
_HYPOTHESIS_HOME = tempfile.mkdtemp(prefix="fa2check-hypothesis-")
set_hypothesis_home_dir(_HYPOTHESIS_HOME)
atexit.register(shutil.rmtree, _HYPOTHESIS_HOME, ignore_errors=True)

DEVICE = "cuda" if ON_GPU else "cpu"
GPU_SKIP_REASON = ("needs a CUDA GPU, and there is none here; on a machine with one, "
                   "`make test-gpu` runs it")

# pytest-xdist (make test runs `-n auto`): each worker process gets its share of the cores for
# torch's own threads, so that the workers do not oversubscribe the machine
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(max(1, (os.cpu_count() or 1)
                              // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


@pytest.fixture(scope="session")
def device():
    return DEVICE


def pytest_collection_modifyitems(config, items):
    # under pytest-xdist's --dist loadgroup, the tests that share a module-scoped fixture (a
    # compile of every variant, say) run in one worker, which builds it once
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        if fixtures and any(d.scope == "module" for defs in fixtures.name2fixturedefs.values()
                            for d in defs):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    if ON_GPU:
        return
    skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
