"""The load loop: schedule requests, send them, collect records.

- Open loop: request i is due at ``offsets[i]`` (from ``bench.arrivals``); an optional
  ``max_concurrency`` cap delays sends while that many are in flight (the delay shows up
  as send lag, on purpose).
- Closed loop: ``concurrency`` workers each send their next request as soon as the last ends.
- Multi-turn: a request with a ``session_id`` waits for that session's previous turn.
Bounds: no request is *started* after ``duration_s``; each request is bounded by the
client timeout; ``stop`` (Ctrl-C) cancels what is in flight and keeps every record so far.
``intended_send_s`` vs ``send_s`` measures the generator's own lag.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench import client
from bench.types import RequestRecord, RequestSpec

PayloadFn = Callable[[RequestSpec], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class LoadPlan:
    offsets: list[float] | None = None  # open loop send times; None → closed loop
    concurrency: int | None = None
    max_concurrency: int | None = None
    duration_s: float = 600.0
    progress: bool = False


@dataclass(slots=True)
class RunOutcome:
    records: list[RequestRecord]
    duration_s: float
    interrupted: bool = False


@dataclass(slots=True)
class _Run:
    t0: float
    clock: Callable[[], float]
    sem: asyncio.Semaphore | None
    records: list[RequestRecord] = field(default_factory=list)
    sessions: dict[str, asyncio.Event] = field(default_factory=dict)
    session_end: dict[str, float] = field(default_factory=dict)
    in_flight: int = 0
    sent: int = 0

    def now(self) -> float:
        return self.clock() - self.t0


async def _one(
    run: _Run,
    session: aiohttp.ClientSession,
    target: client.Target,
    spec: RequestSpec,
    body: dict[str, Any],
    due_s: float,
) -> None:
    prev = run.sessions.get(spec.session_id) if spec.session_id else None
    mine = asyncio.Event()
    if spec.session_id:
        run.sessions[spec.session_id] = mine
    try:
        if prev is not None:
            await prev.wait()
            due_s = max(due_s, run.session_end.get(spec.session_id or "", 0.0))
        if run.sem is not None:
            await run.sem.acquire()
        run.in_flight += 1
        run.sent += 1
        try:
            rec = await client.send(
                session, target, spec, body, intended_s=due_s, t0=run.t0, clock=run.clock
            )
        finally:
            run.in_flight -= 1
            if run.sem is not None:
                run.sem.release()
        run.records.append(rec)
    finally:
        if spec.session_id:
            run.session_end[spec.session_id] = run.now()
        mine.set()


async def _open_loop(
    run: _Run,
    session: aiohttp.ClientSession,
    target: client.Target,
    specs: list[RequestSpec],
    payload: PayloadFn,
    plan: LoadPlan,
    tasks: list[asyncio.Task[None]],
) -> None:
    offsets = plan.offsets or []
    for spec, due in zip(specs, offsets, strict=False):
        if due >= plan.duration_s:
            break
        body = payload(spec)  # built before the wait so it adds no send lag
        delay = due - run.now()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_one(run, session, target, spec, body, due)))


async def _closed_loop(
    run: _Run,
    session: aiohttp.ClientSession,
    target: client.Target,
    specs: list[RequestSpec],
    payload: PayloadFn,
    plan: LoadPlan,
) -> None:
    it = iter(specs)

    async def worker() -> None:
        for spec in it:
            if run.now() >= plan.duration_s:
                return
            await _one(run, session, target, spec, payload(spec), run.now())

    await asyncio.gather(*(worker() for _ in range(max(1, plan.concurrency or 1))))


async def _progress(run: _Run, total: int, period_s: float = 1.0) -> None:
    tty = sys.stderr.isatty()
    while True:
        await asyncio.sleep(period_s if tty else 10 * period_s)
        failed = sum(1 for r in run.records if r.error)
        line = (
            f"[bench] {run.now():7.1f}s sent {run.sent}/{total} done {len(run.records)} "
            f"failed {failed} in-flight {run.in_flight}"
        )
        sys.stderr.write(("\r" + line) if tty else line + "\n")
        sys.stderr.flush()


async def run_load(
    specs: list[RequestSpec],
    plan: LoadPlan,
    target: client.Target,
    payload: PayloadFn,
    *,
    stop: asyncio.Event | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> RunOutcome:
    cap = plan.max_concurrency
    run = _Run(t0=clock(), clock=clock, sem=asyncio.Semaphore(cap) if cap else None)
    stop = stop or asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    conn = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(
        connector=conn, timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False
    ) as session:
        if plan.offsets is not None:
            driver = _open_loop(run, session, target, specs, payload, plan, tasks)
        else:
            driver = _closed_loop(run, session, target, specs, payload, plan)
        main = asyncio.create_task(driver)
        bar = asyncio.create_task(_progress(run, len(specs))) if plan.progress else None
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait([main, stopper], return_when=asyncio.FIRST_COMPLETED)
        while not stop.is_set() and not all(t.done() for t in tasks):  # drain in-flight
            await asyncio.wait(
                [stopper, *[t for t in tasks if not t.done()]], return_when=asyncio.FIRST_COMPLETED
            )
        interrupted = stop.is_set()
        for task in (main, stopper, *tasks, *([bar] if bar else [])):
            task.cancel()
        await asyncio.gather(main, *tasks, return_exceptions=True)
        if bar is not None:
            await asyncio.gather(bar, return_exceptions=True)
            sys.stderr.write("\n")
    duration = run.now()
    run.records.sort(key=lambda r: r.index)
    return RunOutcome(run.records, duration, interrupted)
