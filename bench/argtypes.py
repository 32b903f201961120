"""argparse types for counts, rates and scales: a bad number is a usage error (exit 2)
naming the flag, not a traceback or a silently empty run (found by hand: ``llmfleet sim
--replicas 0`` ended in ``StopIteration``, ``--num-requests -3`` ran 0 requests)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _number(kind: type, low: float, inclusive: bool, allow_inf: bool) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"not a{'n integer' if kind is int else ' number'}: {text!r}"
            ) from None
        if math.isnan(value) or (math.isinf(value) and not allow_inf):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if value < low or (value == low and not inclusive):
            raise argparse.ArgumentTypeError(
                f"must be {'≥' if inclusive else '>'} {low:g}, got {text}"
            )
        return value

    return parse


positive_int = _number(int, 1, True, False)
nonneg_int = _number(int, 0, True, False)
positive_float = _number(float, 0, False, False)
nonneg_float = _number(float, 0, True, False)
rate = _number(float, 0, False, True)  # req/s; inf: every request at once
