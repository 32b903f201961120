"""The front door's Ray actor (``server.ingress: resume``): ``cluster/front_door.py`` on its
own event loop, in an actor on the node ``llmfleet up`` runs on. Ray restarts the actor if
its process dies, as Serve restarts its proxy; it stops with the Ray cluster ``up`` started."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import asdict
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster.config import FleetConfig
from cluster.front_door import DoorSettings, serve

NAME = "llmfleet-front-door"
START_TIMEOUT_S = 60.0


@ray.remote(num_cpus=0, max_restarts=-1)
class FrontDoorActor:
    def __init__(self, s: DoorSettings, host: str, port: int) -> None:
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._door: Any = None
        args = (s, host, port)
        threading.Thread(target=self._run, args=args, name="front-door", daemon=True).start()
        self._started.wait(START_TIMEOUT_S)
        if self._error is not None:
            raise RuntimeError(f"front door on {host}:{port}: {self._error!r}")

    def _run(self, s: DoorSettings, host: str, port: int) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            _, self._door = self._loop.run_until_complete(serve(s, host, port))
        except BaseException as err:  # e.g. the port is taken: __init__ raises it
            self._error = err
            return
        finally:
            self._started.set()
        self._loop.run_forever()

    def ready(self) -> bool:
        return self._door is not None

    def counters(self) -> dict[str, int]:
        return asdict(self._door.counters)


def door_settings(cfg: FleetConfig, upstream: str) -> DoorSettings:
    srv = cfg.server
    return DoorSettings(
        upstream=upstream,
        max_body_bytes=srv.max_body_bytes,
        max_header_bytes=srv.max_header_bytes,
        body_timeout_s=srv.body_timeout_s,
    )


def start_front_door(cfg: FleetConfig, upstream: str) -> Any:
    """The front door on this node (the one already there after a redeploy), listening."""
    here = ray.get_runtime_context().get_node_id()
    actor = FrontDoorActor.options(  # type: ignore[attr-defined]
        name=NAME,
        get_if_exists=True,
        lifetime="detached",  # not tied to this handle: it lives as long as the Ray cluster
        scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
    ).remote(door_settings(cfg, upstream), cfg.server.host, cfg.server.port)
    if not ray.get(actor.ready.remote(), timeout=START_TIMEOUT_S):
        raise RuntimeError("the front door did not start")
    return actor


def front_door_counters() -> dict[str, int] | None:
    """The running front door's counters (None without one): for benchmarks and tests."""
    try:
        actor = ray.get_actor(NAME)
    except ValueError:
        return None
    counters: Any = ray.get(actor.counters.remote(), timeout=10)
    return dict(counters)
