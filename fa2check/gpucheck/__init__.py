"""`make gpu-check` (python -m fa2check.gpucheck): the one command a kernel change passes on a GPU
before it lands. See cli.py."""
