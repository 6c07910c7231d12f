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


@pytest.fixture(scope="session")
def device():
    return DEVICE


def pytest_collection_modifyitems(config, items):
    if ON_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; run `make test-gpu` on the device machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
