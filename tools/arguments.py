"""Argument types for the developer commands: a bad size is a one-line usage error (exit 2), never a traceback
from deep inside a run."""

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit


def int_between(low: int, high: int | None = None) -> Callable[[str], int]:
    """An integer in [low, high] (no upper bound when high is None)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} is not {_range(low, high)}")
        return value

    return parse


def float_above(low: float, high: float | None = None) -> Callable[[str], float]:
    """A finite number greater than low and at most high (no upper bound when high is None)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value <= low or (high is not None and value > high):
            bound = "a positive number" if low == 0 else f"greater than {low:g}"
            bound += "" if high is None else f" no greater than {high:g}"
            raise argparse.ArgumentTypeError(f"{text} is not {bound}")
        return value

    return parse


def http_url(text: str) -> str:
    """An http:// or https:// URL with a host (and, if given, a port that is one)."""
    try:
        parts = urlsplit(text)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http:// or https:// URL with a host")
    return text


def writable_file(text: str) -> Path:
    """A file path that can be written: not a directory, in a directory that exists and may be written (checked
    before a run that would otherwise fail only at its end; a missing directory is refused, never made: a typo
    in it would otherwise leave directories behind)."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a directory")
    directory = path.absolute().parent
    if not directory.exists():
        raise argparse.ArgumentTypeError(f"{text}: no directory {directory}")
    if not directory.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: {directory} is not a directory")
    if not os.access(directory, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"{text} cannot be written (permission denied)")
    return path


def _range(low: int, high: int | None) -> str:
    if high is None:
        return "a positive whole number" if low == 1 else f"at least {low}"
    return f"between {low} and {high}"


positive_int = int_between(1)
positive_float = float_above(0)
