"""Would one more request have to queue? Shared, in one process, by the ingress that sends
requests and the router that places them (the router runs in the caller's process).

The ingress sheds load before the 200: a request that would wait for a replica slot beyond
``max_queued`` others is refused at once with 429. Counting every request not yet accepted
by a replica as queued over-sheds a burst: requests on their way to a free slot are not
queued (16 sent at once to 2 × 4 slots with a queue of 8 got 9 200s). So the two sides
keep one ledger:

- the ingress: ``sent(rid)`` before it calls the deployment, ``done(rid)`` once a replica
  accepted the call or it failed or was cancelled;
- the router: ``routed(rid)`` when a replica accepted it (``on_request_routed``), and a
  capacity function (``attach``) returning ``(free, reserved)``: ``free`` slots no request
  holds and ``reserved``, the requests routed-to-be: decided onto a replica that had room
  at the decision, not yet accepted there (they hold a slot, so they are not queued).

``queued_with_one_more() = unrouted − reserved + 1 − free`` (at least 0): the requests
that would be left without a slot if one more arrived. Every step of a request keeps it
consistent: a decision with room moves one request from unrouted-unreserved to reserved
and one slot out of ``free``; acceptance takes it out of both ``unrouted`` and
``reserved``; a completion frees a slot. A request the router decided onto a full replica
counts as queued, as it is. With no capacity function yet (the router is created on the
first call) or an answer it could not give, ``None``: the caller falls back to counting
every unaccepted request. Slots taken through other ingresses are seen as late as the
replicas' reports of them (``FleetBook.slots``); a request admitted on a stale count waits
at most the admission timeout.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

Capacity = Callable[[], "tuple[int, int] | None"]  # (free slots, reserved requests)


class AdmissionLedger:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # the router may run on its own loop thread
        # a request's calls are sequential: at most one unrouted call per request id
        self._unrouted: set[str] = set()
        self._capacity: Capacity | None = None
        self._replicas: Callable[[], int | None] | None = None

    @property
    def unrouted(self) -> int:
        return len(self._unrouted)

    def attach(
        self, capacity: Capacity | None, replicas: Callable[[], int | None] | None = None
    ) -> None:
        """``replicas``: how many replicas the router can send to now (Serve's running set,
        less those it saw die), or None while it cannot tell."""
        self._capacity = capacity
        self._replicas = replicas

    def replicas(self) -> int | None:
        """The router's replica count (``attach``), None when unknown."""
        count = self._replicas
        return None if count is None else count()

    def sent(self, request_id: str) -> None:
        with self._lock:
            self._unrouted.add(request_id)

    def routed(self, request_id: str) -> None:
        with self._lock:
            self._unrouted.discard(request_id)

    def done(self, request_id: str) -> None:
        """The call was accepted or ended (a no-op when ``routed`` already counted it)."""
        with self._lock:
            self._unrouted.discard(request_id)

    def queued_with_one_more(self) -> int | None:
        capacity = self._capacity
        if capacity is None:
            return None
        try:
            answer = capacity()
        except RuntimeError:  # the router's state changed under a read from another thread
            return None
        if answer is None:
            return None
        free, reserved = answer
        return max(0, self.unrouted - reserved + 1 - free)


_LEDGERS: dict[str, AdmissionLedger] = {}
_LEDGERS_LOCK = threading.Lock()


def ledger_for(deployment: str) -> AdmissionLedger:
    """This process's ledger for calls to ``deployment`` (created on first use)."""
    with _LEDGERS_LOCK:
        ledger = _LEDGERS.get(deployment)
        if ledger is None:
            ledger = _LEDGERS[deployment] = AdmissionLedger()
        return ledger
