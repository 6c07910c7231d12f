"""python -m fa2check.compile_gate: the command lives in fa2check.inspect.compile_gate."""
import sys

from .inspect.compile_gate import main

if __name__ == "__main__":
    sys.exit(main())
