"""Host side of the TMA tile choice (TileConfig.tma): which tensors a tensor descriptor can
address, and descriptors whose box is a block of rows of one (batch, head)."""


def tma_ready(t) -> bool:
    """Tensor descriptors need a unit last stride and 16-byte aligned data and strides."""
    size = t.element_size()
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and not any(
        s * size % 16 for s in t.stride()[:-1])


def row_descriptors(tensors, rows: int):
    """One descriptor per (B, H, S, D) tensor, with (1, 1, rows, D) boxes."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    return tuple(TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, t.shape[-1]])
                 for t in tensors)
