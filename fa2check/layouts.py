"""python -m fa2check.layouts: the command lives in fa2check.inspect.layouts."""
import sys

from .inspect.layouts import main

if __name__ == "__main__":
    sys.exit(main())
