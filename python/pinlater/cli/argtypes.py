"""Argument types the ``pinlater`` commands share: numbers that must be finite (``inf`` passed
"> 0" and failed later with a traceback: ``bench --headroom inf``, ``admin --timeout inf``)."""

from __future__ import annotations

import argparse
import math

__all__ = ["non_negative_float", "positive_float"]


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def positive_float(text: str) -> float:
    """A finite number > 0."""
    value = _number(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"it must be > 0 and finite, not {text}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0."""
    value = _number(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"it must be >= 0 and finite, not {text}")
    return value
