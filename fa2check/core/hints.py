"""What to change, in one line, when a user's implementation cannot be loaded or a call of it
fails: the words verify, fuzz and the pytest plugin print under its error.

    fix_for(error, impl="mymodule:attention") -> "make mymodule importable: ..." or None

Only for errors whose cause is the way the function meets the harness (its module, its
signature, its layout, a device it needs); a crash inside the kernel gets the general word on
NotImplementedError, and the traceback in --json says the rest.
"""
from __future__ import annotations

import re

SIGNATURE = ("fn(q, k, v, causal=False, softmax_scale=None, variant=None, return_lse=False); "
             "variant, return_lse, softmax_scale and causal may be left out")
REFUSE = ("if it cannot run these inputs, raise NotImplementedError(\"why\") (or "
          "fa2check.Unsupported) there: such cases are reported n/a with its words")


def fix_for(error: BaseException, impl: str = "", layout: str | None = None) -> str | None:
    """One line saying what to change, or None when the error says it already (CallError).
    `layout`: the one the failed call passed (a crash may be the wrong one)."""
    from .calling import LAYOUTS, CallError

    module, _, name = impl.partition(":")
    text = str(error)
    if isinstance(error, CallError):
        return None  # its message is the fix
    if isinstance(error, ModuleNotFoundError) and module and _names_module(error, module):
        return (f"make {module} importable: run from the directory that holds it, or add that "
                f"directory to PYTHONPATH (PYTHONPATH=. python -m fa2check.verify --impl {impl})")
    if isinstance(error, AttributeError) and name and f"attribute '{name}'" in text:
        return f"{module} has no {name}: --impl takes MODULE:FUNC, the function's own name"
    if isinstance(error, TypeError):
        keyword = re.search(r"unexpected keyword argument '(\w+)'", text)
        if keyword:
            return (f"give the function a `{keyword[1]}` keyword parameter (or **kwargs): "
                    f"fa2check calls {SIGNATURE}")
        if re.search(r"missing \d+ required (positional|keyword-only) argument", text) or \
                re.search(r"takes \d+ positional arguments? but \d+ (were|was) given", text):
            return (f"fa2check calls {SIGNATURE}; every other parameter needs a default (wrap "
                    "the kernel in a function of that signature)")
    if _needs_cuda(text):
        return ("it needs a CUDA tensor: run on a GPU; on a CPU only Triton kernels run, in "
                "Triton's interpreter (TRITON_INTERPRET=1, which fa2check sets); " + REFUSE)
    if layout:
        other = next(name for name in LAYOUTS if name != layout)
        return (f"it got q, k, v as {LAYOUTS[layout]} (--layout {layout}); if it takes "
                f"{LAYOUTS[other]}, pass --layout {other}; " + REFUSE)
    return REFUSE


def _names_module(error: ModuleNotFoundError, module: str) -> bool:
    missing = getattr(error, "name", None) or ""
    return bool(missing) and (module == missing or module.startswith(missing + "."))


def _needs_cuda(text: str) -> bool:
    text = text.lower()
    return ("cuda" in text and any(w in text for w in ("must be on", "expected", "need",
                                                        "not available", "requires")))
