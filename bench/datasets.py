"""Datasets: a spec string → a reproducible list of ``RequestSpec``.

Spec syntax (``NAME[:k=v,k=v,...]``, or ``NAME:PATH`` for traces):
- ``random:input=512,input_dist=normal,output=128,output_dist=exponential,spread=0.25,n=1000``
  Lengths: ``fixed`` (the value), ``uniform`` (value·[1−spread, 1+spread]), ``normal``
  (mean value, std value·spread), ``exponential`` (mean value). Clamped to ≥ 1.
- ``shared-prefix:groups=4,prompts=16,system=512,question=32,output=64`` — G groups share a
  system prompt of exactly S tokens; each request adds Q fresh question tokens. Requests are
  spread over the groups in a seeded shuffle; ``num_requests`` overrides G·P. ``zipf=s``
  (default 0: equal groups) draws each request's group with probability ∝ 1/(g+1)^s, so a
  few system prompts carry most of the traffic (s=1.2 over 16 groups: the hottest ~37 %).
- ``multi-turn:sessions=8,turns=4,system=256,question=64,output=64`` — turn k's prompt is
  turn k−1's prompt + a stand-in answer of ``output`` tokens + a new question. Turns of a
  session share ``session_id``; the runner sends a turn only after the previous one ends.
- ``mooncake:PATH`` and ``azure:PATH`` — trace replay (see ``bench.traces``).
Lengths scale by ``length_scale``; trace timestamps by ``time_scale``. Prompts come from a
``TokenSource`` (the served model's tokenizer, or a fixed id range when tokenizer=None).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from bench import traces
from bench.tokens import TokenSource
from bench.types import RequestSpec

DEFAULTS: dict[str, dict[str, str]] = {
    "random": {
        "input": "512",
        "output": "128",
        "input_dist": "fixed",
        "output_dist": "fixed",
        "spread": "0.25",
        "n": "1000",
    },
    "shared-prefix": {
        "groups": "4",
        "prompts": "16",
        "system": "512",
        "question": "32",
        "output": "64",
        "zipf": "0",
    },
    "multi-turn": {
        "sessions": "8",
        "turns": "4",
        "system": "256",
        "question": "64",
        "output": "64",
    },
}
SYNTHETIC = tuple(DEFAULTS)
TRACES = ("mooncake", "azure")


LENGTH_DISTS = ("fixed", "uniform", "normal", "exponential")
COUNTS = ("n", "groups", "prompts", "sessions", "turns")  # whole numbers ≥ 1; others ≥ 0


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Name and parameters, each checked (found by hand: ``random:input=abc`` and a trace
    path that does not exist were found only after the load generator had connected)."""
    name, _, rest = spec.partition(":")
    name = name.strip()
    if name in TRACES:
        if not rest:
            raise ValueError(f"{name} needs a path: {name}:PATH")
        if not Path(rest).is_file():
            raise ValueError(f"{name}: no such file: {rest}")
        return name, {"path": rest}
    if name not in DEFAULTS:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(SYNTHETIC + TRACES)}")
    params = dict(DEFAULTS[name])
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key not in params:
            raise ValueError(f"bad {name} parameter {item!r}; known: {', '.join(params)}")
        _check_value(name, key, value.strip())
        params[key] = value.strip()
    return name, params


def _check_value(name: str, key: str, value: str) -> None:
    if key.endswith("_dist"):
        if value not in LENGTH_DISTS:
            raise ValueError(f"{name}: {key} must be one of {', '.join(LENGTH_DISTS)}: {value!r}")
        return
    try:
        number = int(value) if key in COUNTS else float(value)
    except ValueError:
        kind = "a whole number" if key in COUNTS else "a number"
        raise ValueError(f"{name}: {key} must be {kind}: {value!r}") from None
    low = 1 if key in COUNTS else 0
    if not number >= low or number == float("inf"):
        raise ValueError(f"{name}: {key} must be ≥ {low} and finite: {value!r}")


def has_timestamps(spec: str) -> bool:
    return parse_spec(spec)[0] in TRACES


def sample_length(rng: random.Random, mean: float, dist: str, spread: float) -> int:
    if dist == "fixed":
        value = mean
    elif dist == "uniform":
        value = rng.uniform(mean * (1 - spread), mean * (1 + spread))
    elif dist == "normal":
        value = rng.gauss(mean, mean * spread)
    elif dist == "exponential":
        value = rng.expovariate(1.0 / mean)
    else:
        raise ValueError(f"unknown length distribution {dist!r}")
    return max(1, round(value))


def _scaled(value: str, length_scale: float) -> int:
    return max(1, round(float(value) * length_scale))


def _random(
    p: dict[str, str], src: TokenSource, n: int, rng: random.Random, scale: float
) -> list[RequestSpec]:
    spread = float(p["spread"])
    i_mean, o_mean = float(p["input"]) * scale, float(p["output"]) * scale
    out = []
    for i in range(n):
        n_in = sample_length(rng, i_mean, p["input_dist"], spread)
        n_out = sample_length(rng, o_mean, p["output_dist"], spread)
        out.append(RequestSpec(i, tuple(src.fresh(rng, n_in)), n_out))
    return out


def _shared_prefix(
    p: dict[str, str], src: TokenSource, n: int, rng: random.Random, scale: float
) -> list[RequestSpec]:
    groups = int(p["groups"])
    system = [src.block(f"system-{g}", _scaled(p["system"], scale)) for g in range(groups)]
    skew = float(p["zipf"])
    if skew < 0:
        raise ValueError(f"shared-prefix zipf must be >= 0, got {skew}")
    if skew == 0:
        order = [i % groups for i in range(n)]
        rng.shuffle(order)
    else:
        weights = [(g + 1) ** -skew for g in range(groups)]
        order = rng.choices(range(groups), weights=weights, k=n)
    n_q, n_out = _scaled(p["question"], scale), _scaled(p["output"], scale)
    return [
        RequestSpec(i, tuple(system[g] + src.fresh(rng, n_q)), n_out, group=g)
        for i, g in enumerate(order)
    ]


def _multi_turn(
    p: dict[str, str], src: TokenSource, n: int, rng: random.Random, scale: float
) -> list[RequestSpec]:
    sessions, turns = int(p["sessions"]), int(p["turns"])
    n_sys, n_q = _scaled(p["system"], scale), _scaled(p["question"], scale)
    n_out = _scaled(p["output"], scale)
    convs = [src.block(f"system-{s}", n_sys) for s in range(sessions)]
    out: list[RequestSpec] = []
    for turn in range(turns):  # interleave sessions so every session's turns overlap in time
        for s in range(sessions):
            if len(out) == n:
                return out
            if turn > 0:
                convs[s] = convs[s] + src.fresh(rng, n_out)  # stand-in for the previous answer
            convs[s] = convs[s] + src.fresh(rng, n_q)
            out.append(RequestSpec(len(out), tuple(convs[s]), n_out, session_id=f"s{s}", group=s))
    return out


def natural_size(spec: str) -> int | None:
    name, p = parse_spec(spec)
    if name == "random":
        return int(p["n"])
    if name == "shared-prefix":
        return int(p["groups"]) * int(p["prompts"])
    if name == "multi-turn":
        return int(p["sessions"]) * int(p["turns"])
    return None


def build_requests(
    spec: str,
    *,
    tokenizer: Any = None,
    num_requests: int | None = None,
    seed: int = 0,
    length_scale: float = 1.0,
    time_scale: float = 1.0,
) -> list[RequestSpec]:
    name, p = parse_spec(spec)
    src = TokenSource(tokenizer, seed)
    if name in TRACES:
        load = traces.mooncake if name == "mooncake" else traces.azure
        return load(
            p["path"],
            src,
            num_requests=num_requests,
            length_scale=length_scale,
            time_scale=time_scale,
        )
    n = num_requests if num_requests is not None else natural_size(spec) or 0
    rng = random.Random(seed)
    build = {"random": _random, "shared-prefix": _shared_prefix, "multi-turn": _multi_turn}[name]
    return build(p, src, n, rng, length_scale)
