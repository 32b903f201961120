"""The fleet's share of first tokens over the TTFT SLO, from the engines' tail counters. Pure.

Each replica reports cumulative counts (``contracts.stats``): its first tokens, and those
whose TTFT exceeded each edge of ``TTFT_TAIL_EDGES_S`` (0.25 ... 8 s, doubling). The policy
keeps each replica's last counts and adds what grew since into bins of ``BIN_S``; the
window is the bins of the last ``WINDOW_S``::

    per replica   last counts ──(report - last)──┐   a replica gone: dropped; a count that
                                                 ▼   went back (restart): new baseline
    bins          [t0: n, over×6] [t0+10: ...] ... [open bin]
                  └──────────── WINDOW_S = 120 s ────────────┘ → TailCounts → share_over(SLO)

The share at the SLO is exact at an edge (the default SLO, 2 s, is one) and linear
between two edges, as Prometheus interpolates inside a histogram bucket (from share 1 at
0 s below the first edge; the last edge's share above it, a lower bound). Why 120 s: at a
1 % target and the benchmark's 2.5-8 first tokens per second, it holds 3-10 late ones at
the goal. Telling the cheapest fleet that meets 1 % from one replica more took 40-840 s
of first tokens there, at any edge (``docs/results/autoscale-sim.md``, "The tail,
counted"): the share is a slow signal, read over minutes.

Counted by the engine, from a request's arrival there to its first token: the time a
request waits in the router or the ingress is not in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from autoscaler.types import MetricsSnapshot
from contracts.stats import TTFT_TAIL_EDGES_S, ttft_tail

WINDOW_S = 120.0
BIN_S = 10.0
_ZERO = (0.0,) * len(TTFT_TAIL_EDGES_S)


@dataclass(frozen=True, slots=True)
class TailCounts:
    first_tokens: float = 0.0
    over: tuple[float, ...] = _ZERO  # first tokens over each edge of TTFT_TAIL_EDGES_S

    def plus(self, other: TailCounts) -> TailCounts:
        over = tuple(a + b for a, b in zip(self.over, other.over, strict=True))
        return TailCounts(self.first_tokens + other.first_tokens, over)

    def minus(self, earlier: TailCounts) -> TailCounts:
        """What grew since ``earlier`` (a count that went back reads as 0 grown)."""
        over = tuple(max(0.0, a - b) for a, b in zip(self.over, earlier.over, strict=True))
        return TailCounts(max(0.0, self.first_tokens - earlier.first_tokens), over)

    def share_over(self, slo_s: float) -> float | None:
        """The share of these first tokens whose TTFT exceeded ``slo_s``; None if none."""
        n = self.first_tokens
        if n <= 0:
            return None
        lo_t, lo_share = 0.0, 1.0
        for edge, count in zip(TTFT_TAIL_EDGES_S, self.over, strict=True):
            share = count / n
            if slo_s <= edge:
                f = (slo_s - lo_t) / (edge - lo_t)
                return lo_share + f * (share - lo_share)
            lo_t, lo_share = edge, share
        return lo_share


@dataclass(frozen=True, slots=True)
class TailWindow:
    last: Mapping[str, TailCounts] = field(default_factory=dict)  # replica id -> counts
    bins: tuple[tuple[float, TailCounts], ...] = ()  # (bin start, counts), oldest first

    def counts(self, now: float) -> TailCounts:
        """The first tokens of the last ``WINDOW_S`` (whole bins) before ``now``."""
        total = TailCounts()
        for start, c in self.bins:
            if start > now - WINDOW_S:
                total = total.plus(c)
        return total


def track_tail(snapshot: MetricsSnapshot, window: TailWindow) -> TailWindow:
    """Add what each replica's counters grew since the last decision into the open bin."""
    last: dict[str, TailCounts] = {}
    grown = TailCounts()
    for m in snapshot.replicas:
        now_c = TailCounts(m.first_tokens, ttft_tail(m))
        before = window.last.get(m.replica_id)
        last[m.replica_id] = now_c
        if before is None or now_c.first_tokens < before.first_tokens:
            continue  # first report (or a restart): a baseline, nothing counted
        grown = grown.plus(now_c.minus(before))
    t = snapshot.now
    bins = tuple(b for b in window.bins if b[0] > t - WINDOW_S - BIN_S)
    if bins and t - bins[-1][0] < BIN_S:
        bins = (*bins[:-1], (bins[-1][0], bins[-1][1].plus(grown)))
    elif grown.first_tokens > 0 or bins:
        bins = (*bins, (t, grown))
    return TailWindow(last, bins)
