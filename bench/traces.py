"""Trace replay datasets.

- Mooncake (JSONL: ``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``): each
  hash id stands for one 512-token block; block ``h`` becomes ``TokenSource.block(("mc", h))``
  so equal ids give identical token blocks (real, measurable prefix sharing) and different
  ids give different blocks. ``length_scale`` shrinks the block size, input and output alike
  (block = round(512·scale)); the prompt is the concatenated blocks cut to the scaled input
  length (padded with fresh tokens when the trace's blocks fall short).
- Azure LLM trace (CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``): fresh random prompts of
  the given lengths; timestamps are absolute datetimes, turned into offsets.
Arrival offsets keep the trace's own spacing, multiplied by ``time_scale`` (0.5 = 2× faster).
"""

from __future__ import annotations

import csv
import json
import random
from datetime import datetime
from pathlib import Path

from bench import arrivals
from bench.tokens import TokenSource
from bench.types import RequestSpec

MOONCAKE_BLOCK = 512


def _scaled(n: float, scale: float) -> int:
    return max(1, round(n * scale))


def _finish(
    raw: list[tuple[float, tuple[int, ...], int, int | None]], time_scale: float
) -> list[RequestSpec]:
    raw.sort(key=lambda r: r[0])
    offs = arrivals.trace([r[0] for r in raw], time_scale)
    return [
        RequestSpec(i, ids, out, arrival_s=t, group=g)
        for i, ((_, ids, out, g), t) in enumerate(zip(raw, offs, strict=True))
    ]


def mooncake(
    path: str,
    src: TokenSource,
    *,
    num_requests: int | None = None,
    length_scale: float = 1.0,
    time_scale: float = 1.0,
) -> list[RequestSpec]:
    block = _scaled(MOONCAKE_BLOCK, length_scale)
    rng = random.Random(f"{src.seed}/mooncake-pad")
    cache: dict[int, list[int]] = {}
    raw: list[tuple[float, tuple[int, ...], int, int | None]] = []
    with open(Path(path)) as f:
        for line in f:
            if num_requests is not None and len(raw) >= num_requests:
                break
            if not line.strip():
                continue
            row = json.loads(line)
            ids: list[int] = []
            for h in row["hash_ids"]:
                if h not in cache:
                    cache[h] = src.block(f"mc-{h}", block)
                ids.extend(cache[h])
            n_in = _scaled(row["input_length"], length_scale)
            ids = ids[:n_in] + src.fresh(rng, max(0, n_in - len(ids)))
            first = row["hash_ids"][0] if row["hash_ids"] else None
            raw.append(
                (
                    row["timestamp"] / 1000.0,
                    tuple(ids),
                    _scaled(row["output_length"], length_scale),
                    first,
                )
            )
    return _finish(raw, time_scale)


def _parse_time(text: str) -> float:
    text = text.strip()
    if "." in text:  # the Azure trace carries 7 fractional digits; datetime takes 6
        head, frac = text.split(".", 1)
        text = f"{head}.{frac[:6]}"
    return datetime.fromisoformat(text).timestamp()


def azure(
    path: str,
    src: TokenSource,
    *,
    num_requests: int | None = None,
    length_scale: float = 1.0,
    time_scale: float = 1.0,
) -> list[RequestSpec]:
    rng = random.Random(f"{src.seed}/azure")
    raw: list[tuple[float, tuple[int, ...], int, int | None]] = []
    with open(Path(path), newline="") as f:
        for row in csv.DictReader(f):
            if num_requests is not None and len(raw) >= num_requests:
                break
            n_in = _scaled(int(row["ContextTokens"]), length_scale)
            n_out = _scaled(int(row["GeneratedTokens"]), length_scale)
            raw.append((_parse_time(row["TIMESTAMP"]), tuple(src.fresh(rng, n_in)), n_out, None))
    return _finish(raw, time_scale)
