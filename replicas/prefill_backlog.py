"""``PrefillBacklog``: vLLM's uncached prompt tokens still to prefill, as its front end sees it.

vLLM's scheduler runs in another process; the front end learns what it did from the
per-step ``SchedulerStats`` (through a stat logger) and from each request's outputs. The
scheduler looks a request up in the prefix cache when it *admits* it, and counts that
lookup in the step's ``PrefixCacheStats`` (``requests``, ``queries`` = their prompt tokens,
``hits`` = their cached tokens; preempted requests are counted apart). With vLLM's default
FCFS policy, the requests admitted in a step are the oldest not yet admitted, so:

    queued (not admitted) ──on_lookups(k, queries, hits)──► one group: k requests,
      counts its whole prompt          its uncached total = prompt tokens − hits
                                           │ on_first_token(rid, cached): that member leaves,
                                           ▼ taking exactly prompt − cached from the group

``tokens`` = Σ queued prompts + Σ group totals. Once the scheduler has looked a request up,
its share is exactly prompt − cached blocks (for a group of k, the group total is exact and
each member leaving with its first token takes its own exact number). Before admission a
request counts its whole prompt, as the simulated engine counts it. Partial prefill
progress is invisible here (no per-chunk outputs), so a chunked prompt counts in full until
its first token. Checks and repairs: a first token seen before its step's stats (vLLM
awaits between the two only when aborting on a stop string) is remembered and matched to
the next lookup; if the oldest ``k`` prompts do not add up to ``queries`` (an abort racing
the step), the hits are spread over them pro rata and ``mismatches`` counts it; an abort takes a member's pro-rata share; with nothing in flight
the backlog is 0 by definition and every count resets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_EARLY = 256


@dataclass(slots=True)
class _Group:
    prompts: dict[str, int] = field(default_factory=dict)  # members still prefilling
    uncached: int = 0  # their uncached tokens in total


class PrefillBacklog:
    def __init__(self) -> None:
        self._queued: dict[str, int] = {}  # not yet admitted, arrival order -> prompt tokens
        self._group_of: dict[str, _Group] = {}
        # (prompt, cached) of requests whose first token came before their lookup's stats
        self._early: list[tuple[int, int]] = []
        self.mismatches = 0

    @property
    def tokens(self) -> int:
        groups = {id(g): g.uncached for g in self._group_of.values()}
        return sum(self._queued.values()) + sum(groups.values())

    def add(self, request_id: str, prompt_tokens: int) -> None:
        self._queued[request_id] = int(prompt_tokens)

    def on_lookups(self, requests: int, queries: int, hits: int) -> None:
        """One engine step's prefix-cache lookups of newly admitted requests."""
        early, self._early = self._early[:requests], self._early[requests:]
        take = requests - len(early)
        queries -= sum(p for p, _ in early)
        hits -= sum(c for _, c in early)
        if take <= 0:
            return
        members = {rid: self._queued.pop(rid) for rid in list(self._queued)[:take]}
        total = sum(members.values())
        if total != queries or len(members) != take:
            self.mismatches += 1
            hits = round(hits * total / queries) if queries > 0 else 0
        group = _Group(members, max(0, total - hits))
        for rid in members:
            self._group_of[rid] = group

    def on_first_token(self, request_id: str, cached_tokens: int) -> None:
        """The request's prefill is done: its exact uncached count leaves the backlog."""
        prompt = self._queued.pop(request_id, None)
        if prompt is not None:  # its lookup is in stats not yet recorded
            self._early.append((prompt, int(cached_tokens)))
            del self._early[:-MAX_EARLY]  # bounded if lookups never come (cache off)
            return
        group = self._group_of.pop(request_id, None)
        if group is not None:
            prompt = group.prompts.pop(request_id)
            group.uncached = max(0, group.uncached - (prompt - int(cached_tokens)))
            if not group.prompts:
                group.uncached = 0

    def remove(self, request_id: str) -> None:
        """The request finished or was aborted (before its first token: a pro-rata share)."""
        self._queued.pop(request_id, None)
        group = self._group_of.pop(request_id, None)
        if group is not None:
            total = sum(group.prompts.values())
            prompt = group.prompts.pop(request_id)
            share = group.uncached * prompt // total if total else 0
            group.uncached = max(0, group.uncached - share) if group.prompts else 0
        if not self._queued and not self._group_of:
            self._early.clear()
