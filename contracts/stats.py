"""``ReplicaStats``: the one record a replica reports about its engine, and its wire form.

Who produces and who reads it
- Produced by both engines' ``stats()``: ``replicas/vllm_engine.py`` (vLLM) and
  ``replicas/sim/core.py`` (the simulated core, behind ``SimEngine`` and the virtual-time
  cluster twin, which reads the record directly, without the wire).
- Carried by ``LLMReplica`` (``replicas/replica.py``) as ``to_wire()`` through Serve's
  ``record_routing_stats`` (router), ``record_autoscaling_stats`` (autoscaler) and the
  status actor (``replicas/status_registry.py``, read by ``llmfleet status`` and
  ``GET /health``).
- Read back with ``from_wire`` by ``router/serve_router.py`` (→ ``router/views.py``
  ``ReplicaView``) and ``autoscaler/serve_autoscaling.py`` (→ ``autoscaler/types.py``
  ``ReplicaMetrics``), and by ``cluster/cli.py`` (``llmfleet status``).

Contract
- Every field is always present; an engine that cannot measure a number reports its
  neutral value (0, or ``healthy=True``) on purpose, and says so in its module header.
- ``to_wire()`` is ``{field: float}`` for every field plus ``"version": STATS_VERSION``.
  Serve's autoscaling metrics must be ``dict[str, float]`` and Serve averages each key over
  its look-back window, hence: counts are floats here too (the autoscaler sees window
  means, e.g. ``waiting == 2.5``); booleans travel as 1.0/0.0 and decode as "true for at
  least half of the window"; a mean of equal versions is that version, and a mix during a
  rolling upgrade is not an integer, so it is rejected like any unknown version.
- ``from_wire(d)`` (``strict=True``, for tests) raises ``StatsWireError`` on a missing or
  unknown version, a missing field or a value that is not a number. With ``strict=False``
  (the adapters in production) it logs the first error of each kind at WARNING, counts
  every one in ``WIRE_ERRORS[kind]`` and returns ``UNKNOWN``: neutral stats (healthy, idle)
  with ``reported=False``. A bad report never turns into a silent 0 in one field.
- An empty dict or ``None`` means "not reported yet" (Serve's routing stats before a
  replica's first report): ``UNREPORTED``, counted under ``"empty"``, not logged.
- Keys not in the record are ignored (Serve adds its own, e.g. ``running_requests``).
- Change ``STATS_VERSION`` whenever a field is added, removed or changes meaning.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

STATS_VERSION = 3
VERSION_KEY = "version"

# The one prefill rate (uncached prompt tokens per second) every component assumes before a
# replica has measured its own: the engines' load tracker starts from it, the router's and
# the autoscaler's estimates fall back to it. 500 is vLLM-CPU's cold prefill of the default
# model on two cores; on a GPU the first measured samples replace it within seconds.
PRIOR_PREFILL_TOKENS_PER_S = 500.0


log = logging.getLogger(__name__)

# errors seen by from_wire(strict=False) in this process, by kind:
# "empty", "version", "missing", "type"
WIRE_ERRORS: Counter[str] = Counter()


class StatsWireError(ValueError):
    """A wire dict that is not a ``ReplicaStats`` of this ``STATS_VERSION``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class ReplicaStats:
    waiting: float = 0.0  # requests queued in the engine, not yet scheduled
    running: float = 0.0  # requests holding a batch slot
    # uncached prompt tokens still to prefill (waiting + partially prefilled); a request
    # counts its whole prompt until the scheduler has looked it up in the prefix cache
    waiting_prefill_tokens: float = 0.0
    kv_usage: float = 0.0  # fraction of KV blocks in use, 0..1
    kv_capacity_tokens: int = 0  # total KV capacity in tokens
    prefix_hits: float = 0.0  # cumulative prompt tokens found in the prefix cache
    prefix_queries: float = 0.0  # cumulative prompt tokens looked up in the prefix cache
    block_size: int = 16  # KV block size in tokens
    prefill_tokens_per_s: float = 0.0  # measured (smoothed) prefill rate; 0 if unknown
    decode_tokens_per_s: float = 0.0  # measured output tokens per busy second; 0 if unknown
    queue_delay_s: float = 0.0  # estimated wait to first token for the newest waiting request
    ttft_p95_s: float = 0.0  # recent TTFT P95 observed by this engine; 0 if no sample
    busy_fraction: float = 0.0  # share of recent time the engine was busy, 0..1
    prefill_load_tokens_per_s: float = 0.0  # uncached tokens prefilled per second, recently
    ongoing: float = 0.0  # requests in the engine (added, not finished)
    arrived_prompt_tokens: float = 0.0  # cumulative prompt tokens of requests added
    arrived_requests: float = 0.0  # cumulative requests added
    num_preemptions: float = 0.0  # cumulative requests preempted by the scheduler
    steps: float = 0.0  # cumulative engine steps
    # TTFT tail counters (cumulative): first tokens, and those whose TTFT (added to the
    # engine -> first token) exceeded each edge of ``TTFT_TAIL_EDGES_S`` (see there)
    first_tokens: float = 0.0
    ttft_over_250ms: float = 0.0
    ttft_over_500ms: float = 0.0
    ttft_over_1s: float = 0.0
    ttft_over_2s: float = 0.0
    ttft_over_4s: float = 0.0
    ttft_over_8s: float = 0.0
    healthy: bool = True
    draining: bool = False
    reported: bool = True  # False: neutral stand-in (UNKNOWN / UNREPORTED); not on the wire

    def to_wire(self) -> dict[str, float]:
        out = {name: float(getattr(self, name)) for name in WIRE_FIELDS}
        out[VERSION_KEY] = float(STATS_VERSION)
        return out


# The TTFT tail counters' edges (seconds), a doubling ladder: the share of first tokens
# over a TTFT SLO is exact at an edge (the default SLO, 2 s, is one) and interpolated
# between two, so any SLO a user picks can be read, and the lower edges show the tail's
# shape (they are not a faster estimate of the share at the SLO: measured in
# ``docs/results/autoscale-sim.md``, "The tail, counted"). Engines count them with
# ``LoadTracker.tail()`` (``replicas/load_stats.py``); ``ttft_tail_fields`` sets them,
# ``ttft_tail`` reads them back.
TTFT_TAIL_EDGES_S: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
TTFT_TAIL_FIELDS: tuple[str, ...] = (
    "ttft_over_250ms",
    "ttft_over_500ms",
    "ttft_over_1s",
    "ttft_over_2s",
    "ttft_over_4s",
    "ttft_over_8s",
)


def ttft_tail(stats: Any) -> tuple[float, ...]:
    """The counts over each edge of ``TTFT_TAIL_EDGES_S``, from any record that carries the
    ``TTFT_TAIL_FIELDS`` (``ReplicaStats``, the autoscaler's ``ReplicaMetrics``)."""
    return tuple(float(getattr(stats, name)) for name in TTFT_TAIL_FIELDS)


def ttft_tail_fields(first_tokens: float, over: tuple[float, ...]) -> dict[str, Any]:
    """The tail counters as keyword arguments of ``ReplicaStats`` (or of any record with the
    same fields), ``over`` aligned with ``TTFT_TAIL_EDGES_S``."""
    if len(over) != len(TTFT_TAIL_FIELDS):
        raise ValueError(f"{len(over)} tail counts for {len(TTFT_TAIL_FIELDS)} edges")
    counts = {name: float(n) for name, n in zip(TTFT_TAIL_FIELDS, over, strict=True)}
    return {"first_tokens": float(first_tokens), **counts}


WIRE_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(ReplicaStats) if f.name != "reported"
)
# Cumulative counters: a consumer that averages reports over a window (Ray Serve's
# ``look_back_period_s``) must read these at their latest value instead: the mean of a
# counter over a window lags it by half the window and spreads a burst over the window,
# so the work of a burst would look slower than it arrived.
CUMULATIVE_FIELDS: tuple[str, ...] = (
    "prefix_hits",
    "prefix_queries",
    "arrived_prompt_tokens",
    "arrived_requests",
    "num_preemptions",
    "steps",
    "first_tokens",
    *TTFT_TAIL_FIELDS,
)
# Backlog gauges: such a consumer reads these at the larger of their latest value and the
# window mean. A growing queue is seen at its length now (the mean lags it by half the
# window, so a burst's queue looked half as long as it was); a draining one at its recent
# mean, so a queue that empties for a moment does not read as none (fast attack, slow
# release: reading them raw both ways made the fleet follow every transient queue).
BACKLOG_FIELDS: tuple[str, ...] = ("queue_delay_s", "waiting_prefill_tokens")
UNKNOWN = ReplicaStats(reported=False)
UNREPORTED = ReplicaStats(reported=False)


def _as_bool(value: Any) -> bool:
    return float(value) >= 0.5


def _as_int(value: Any) -> int:
    return round(float(value))


_DECODE_BY_TYPE: dict[str, Callable[[Any], Any]] = {
    "bool": _as_bool,
    "int": _as_int,
    "float": float,
}


def _decoder(f: dataclasses.Field[Any]) -> Callable[[Any], Any]:
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
    return _DECODE_BY_TYPE[kind]


_DECODERS: tuple[tuple[str, Callable[[Any], Any]], ...] = tuple(
    (f.name, _decoder(f)) for f in dataclasses.fields(ReplicaStats) if f.name in WIRE_FIELDS
)


def from_wire(data: Mapping[str, Any] | None, *, strict: bool = True) -> ReplicaStats:
    """Decode ``to_wire()`` output (possibly averaged by Serve); see the module contract."""
    if not data:
        return _fail("empty", "no stats reported yet", strict, UNREPORTED)
    version = data.get(VERSION_KEY)
    try:
        known = version is not None and float(version) == STATS_VERSION
    except (TypeError, ValueError):
        known = False
    if not known:
        return _fail("version", f"stats version {version!r}, expected {STATS_VERSION}", strict)
    try:
        values = [decode(data[name]) for name, decode in _DECODERS]
    except KeyError as err:
        return _fail("missing", f"stats field {err.args[0]!r} missing", strict)
    except (TypeError, ValueError) as err:
        return _fail("type", f"stats value not a number: {err}", strict)
    return ReplicaStats(*values)


def _fail(kind: str, message: str, strict: bool, fallback: ReplicaStats = UNKNOWN) -> ReplicaStats:
    if strict:
        raise StatsWireError(kind, message)
    WIRE_ERRORS[kind] += 1
    if kind != "empty":
        level = logging.WARNING if WIRE_ERRORS[kind] == 1 else logging.DEBUG
        log.log(level, "bad replica stats (%s, %d so far): %s", kind, WIRE_ERRORS[kind], message)
    return fallback
