"""Triton FlashAttention-2 kernels whose three implementation changes can be switched off.

    from kernels import flash_attention, Variant
"""
from .plan.config import default_config
from .plan.tiles import TileConfig
from .interface import SUPPORTED_HEAD_DIMS, TILE_HEAD_DIMS, flash_attention
from .variant import Variant

__all__ = ["flash_attention", "Variant", "TileConfig", "default_config", "SUPPORTED_HEAD_DIMS",
           "TILE_HEAD_DIMS"]
