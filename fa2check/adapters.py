"""--impl fa2check.adapters:NAME, the documented path of the adapters in fa2check.core.adapters."""
from .core.adapters import gluon, hopper, sdpa_cudnn, sdpa_efficient, sdpa_flash, sdpa_math

__all__ = ["gluon", "hopper", "sdpa_cudnn", "sdpa_efficient", "sdpa_flash", "sdpa_math"]
