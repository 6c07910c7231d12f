"""Which kernels a fuzz example compiled: the kernels a GPU campaign's precompile missed.

A GPU campaign compiles its classes' kernels ahead (fa2check/fuzz/classes.py) so that its
examples run compiled kernels. An example that compiles anyway costs seconds to a minute (a
Triton split-K backward at d=256) and says the compiled classes do not cover what the examples
launch. Triton calls `knobs.compilation.listener` after every compile with `cache_hit`: a miss
is a kernel built from its source in this process, not loaded from the on-disk cache. This
module records the misses, so that a campaign's report names the kernels and their seconds.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Compiled:
    """One kernel built in an example: its name, what it was specialised on, its seconds."""
    kernel: str
    spec: str  # its constexprs and the integer arguments specialised on divisibility by 16
    seconds: float


def describe(src) -> tuple[str, str]:
    """(kernel name, specialisation) of a Triton ASTSource: its constexprs by name and the
    arguments it specialised as divisible by 16 (what tells two compiles of a kernel apart)."""
    fn = getattr(src, "fn", None)
    names = list(getattr(fn, "arg_names", ()))

    def name(key):
        index = key[0] if isinstance(key, tuple) and key else key
        return names[index] if isinstance(index, int) and index < len(names) else str(key)
    constants = ", ".join(f"{name(k)}={v}" for k, v in sorted(
        getattr(src, "constants", {}).items(), key=lambda kv: str(kv[0]))
        if not callable(v))
    divisible = [name(k) for k, attrs in getattr(src, "attrs", {}).items()
                 if any(a and a[0] == "tt.divisibility" for a in attrs)]
    spec = constants + (f"; /16: {', '.join(divisible)}" if divisible else "")
    return getattr(src, "name", type(src).__name__), spec


class CompileWatch:
    """Records the kernels compiled (not loaded from Triton's cache) in this process while
    installed; `take()` returns those since the last take."""

    def __init__(self):
        self._compiled: list[Compiled] = []
        self._previous = None

    def _listener(self, *, src, metadata, metadata_group, times, cache_hit):
        if self._previous is not None:
            self._previous(src=src, metadata=metadata, metadata_group=metadata_group,
                           times=times, cache_hit=cache_hit)
        if cache_hit:
            return
        self._compiled.append(Compiled(*describe(src), times.total / 1e6))  # microseconds

    def install(self) -> "CompileWatch":
        from triton import knobs

        self._previous = knobs.compilation.listener
        knobs.compilation.listener = self._listener
        return self

    def uninstall(self):
        from triton import knobs

        knobs.compilation.listener = self._previous

    def take(self) -> tuple[Compiled, ...]:
        taken, self._compiled = tuple(self._compiled), []
        return taken


@dataclass
class CompileTally:
    """The campaign's examples that compiled kernels, and which kernels, summed over workers."""
    examples: int = 0  # examples that compiled at least one kernel
    seconds: float = 0.0
    kernels: Counter = field(default_factory=Counter)  # "kernel [spec]" -> times compiled

    def add(self, compiled: tuple[Compiled, ...]):
        if not compiled:
            return
        self.examples += 1
        self.seconds += sum(c.seconds for c in compiled)
        self.kernels.update(f"{c.kernel} [{c.spec}]" for c in compiled)

    def merge(self, other: "CompileTally"):
        self.examples += other.examples
        self.seconds += other.seconds
        self.kernels.update(other.kernels)

    def as_dict(self, most: int = 20) -> dict:
        return {"examples": self.examples, "seconds": round(self.seconds, 1),
                "kernels_compiled": sum(self.kernels.values()),
                "kernels": dict(self.kernels.most_common(most))}
