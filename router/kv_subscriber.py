"""ZMQ subscriber for one replica's vLLM KV event stream (a daemon thread).

``KVEventSubscriber(endpoint, replica_id, on_event)`` connects a SUB socket to the
publisher's endpoint (vLLM binds for ``ipc://``/``tcp://*`` endpoints), translates each
multipart message with ``KVEventTranslator`` and calls ``on_event`` for every resulting
``KVBlocksStored``/``KVBlocksRemoved`` — on the subscriber thread: callers that own an event
loop hand events over with ``loop.call_soon_threadsafe``. ``stop()`` ends the thread
within ``poll_ms``. ``KVSubscriptions`` keeps one per replica for the router.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable

import zmq

from router.kv_events import DEFAULT_MAP_ENTRIES, KVEventTranslator
from router.types import KVBlocksRemoved, KVBlocksStored, RouterEvent

log = logging.getLogger(__name__)
KVEventCallback = Callable[[KVBlocksStored | KVBlocksRemoved], None]


class KVEventSubscriber:
    def __init__(
        self,
        endpoint: str,
        replica_id: str,
        on_event: KVEventCallback,
        *,
        block_size: int = 16,
        topic: str = "",
        clock: Callable[[], float] = time.monotonic,
        poll_ms: int = 100,
        max_map_entries: int = DEFAULT_MAP_ENTRIES,
    ) -> None:
        self.endpoint = endpoint
        self.translator = KVEventTranslator(replica_id, block_size, max_map_entries)
        self.on_event = on_event
        self.topic = topic
        self.clock = clock
        self.poll_ms = poll_ms
        self.messages = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"kv-events-{replica_id}", daemon=True
        )

    def start(self) -> KVEventSubscriber:
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt_string(zmq.SUBSCRIBE, self.topic)
        sock.connect(self.endpoint)
        try:
            while not self._stop.is_set():
                if sock.poll(self.poll_ms, zmq.POLLIN):
                    self._handle(sock.recv_multipart())
        finally:
            sock.close()

    def _handle(self, frames: list[bytes]) -> None:
        self.messages += 1
        try:
            events = self.translator.translate_message(frames, self.clock())
        except (ValueError, KeyError, TypeError) as exc:
            self.errors += 1
            log.warning("bad KV event message from %s: %s", self.endpoint, exc)
            return
        for ev in events:
            self.on_event(ev)


class KVSubscriptions:
    """A precise-mode router's subscribers, one per replica. ``ensure(replica_ids)`` (on the
    router's event loop) starts those missing, their events handed to ``on_event`` on that
    loop; ``drop(replica_id)`` stops one without waiting for its thread."""

    def __init__(
        self, template: str, on_event: Callable[[RouterEvent], None], block_size: int = 16
    ) -> None:
        self.template = template
        self.on_event = on_event
        self.block_size = block_size
        self.subscribers: dict[str, KVEventSubscriber] = {}

    def ensure(self, replica_ids: Iterable[str]) -> None:
        loop = asyncio.get_running_loop()
        for rid in replica_ids:
            if rid not in self.subscribers:
                self.subscribers[rid] = KVEventSubscriber(
                    self.template.format(replica_id=rid),
                    rid,
                    lambda ev: _hand_over(loop, self.on_event, ev),
                    block_size=self.block_size,
                ).start()

    def drop(self, replica_id: str) -> None:
        sub = self.subscribers.pop(replica_id, None)
        if sub is not None:
            sub.stop(timeout=0)


def _hand_over(
    loop: asyncio.AbstractEventLoop, fn: Callable[[RouterEvent], None], ev: RouterEvent
) -> None:
    if not loop.is_closed():
        loop.call_soon_threadsafe(fn, ev)
