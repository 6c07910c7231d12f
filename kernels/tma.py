"""Host side of the TMA tile choice (TileConfig.tma): which tensors a tensor descriptor can
address, and descriptors whose box is a block of rows of one (batch, head)."""


def tma_ready(t) -> bool:
    """Tensor descriptors need a unit last stride and 16-byte aligned data and strides."""
    size = t.element_size()
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and not any(
        s * size % 16 for s in t.stride()[:-1])


def row_descriptors(tensors, rows: int):
    """One descriptor per (B, H, S, D) tensor, with (1, 1, rows, D) boxes."""
    return tuple(_box(t, rows, t.shape[-1]) for t in tensors)


def chunk_descriptors(t, rows: int, width: int, width1: int):
    """Descriptors over a (B, H, S, D) tensor for the forward's column chunks (D60, D62):
    (1, 1, rows, width) boxes, and (1, 1, rows, width1) boxes for the second chunk (None
    where width1 is 0). Both span the whole tensor: the kernel loads the second at column
    `width`, and columns past D (a padded chunk) arrive as zeros, as keys past S do."""
    return _box(t, rows, width), _box(t, rows, width1) if width1 else None


def _box(t, rows: int, width: int):
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, width])
