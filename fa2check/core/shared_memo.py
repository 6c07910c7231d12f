"""A value computed once per verify run and shared by its worker processes.

`make verify` on the GPU runs one group of tasks per (column, dtype, head dim, mask), so a case
is judged in as many processes as there are columns, and whatever a property derives from the
case alone (lse_bounds' mpmath rows: 11-18 s a case at 16k keys) would be derived in each. The
runner names a directory for the run in FA2CHECK_SHARED_DIR; `shared(key, compute)` computes
the value in the first process that asks and pickles it there; a process asking meanwhile
waits on the key's file lock and reads it. Without the variable (one process), it computes.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import pickle

ENV = "FA2CHECK_SHARED_DIR"


def shared(key: str, compute):
    root = os.environ.get(ENV)
    if not root:
        return compute()
    path = os.path.join(root, hashlib.sha256(key.encode()).hexdigest()[:32])
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if os.path.exists(path):
            with open(path, "rb") as stored:
                return pickle.load(stored)
        value = compute()
        with open(path + ".part", "wb") as stored:
            pickle.dump(value, stored)
        os.replace(path + ".part", path)
        return value
