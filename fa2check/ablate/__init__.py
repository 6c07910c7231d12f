"""The ablate front end (python -m fa2check.ablate); the command itself is in cli.py."""
from .cli import main, parse_args

__all__ = ["main", "parse_args"]
