import sys

from .budget import command_started
from .cli import main

sys.exit(main(started=command_started()))
