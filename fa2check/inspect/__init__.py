"""The inspect front end: what the compiler makes of the kernels, without a GPU (the compile
gate: python -m fa2check.compile_gate; the layout report: python -m fa2check.layouts)."""
