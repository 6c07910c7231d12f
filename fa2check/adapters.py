"""--impl fa2check.adapters:NAME, the documented path of the adapters in fa2check.core.adapters
and fa2check.core.flex."""
from .core.adapters import gluon, hopper, sdpa_cudnn, sdpa_efficient, sdpa_flash, sdpa_math
from .core.flex import flex, flex_eager

__all__ = ["flex", "flex_eager", "gluon", "hopper", "sdpa_cudnn", "sdpa_efficient", "sdpa_flash",
           "sdpa_math"]
