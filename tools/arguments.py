"""Argument types for the developer commands: a bad size is a one-line usage error (exit 2), never a traceback
from deep inside a run."""

import argparse
import math
from collections.abc import Callable


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


def _range(low: int, high: int | None) -> str:
    if high is None:
        return "a positive whole number" if low == 1 else f"at least {low}"
    return f"between {low} and {high}"


positive_int = int_between(1)
positive_float = float_above(0)
