"""Real-time simulated engine: the ``replicas.engine.Engine`` protocol on ``EngineCore``.

One asyncio task per engine runs the step loop: schedule a batch, sleep its modelled time
divided by ``speed``, apply it and stream one pseudo-random token per sampled sequence
(ids from a per-request RNG seeded by ``seed`` and the request id, so runs repeat). Idle
engines park on an event, so dozens fit in one process. Rates and TTFTs in ``stats()`` and the
dynamic-batching timeout are wall-clock (step times already divided by ``speed``). Static
batching waits for a full batch indefinitely.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import zlib
from collections.abc import AsyncIterator, Callable

from contracts.hashing import block_hashes
from contracts.stats import ReplicaStats
from replicas.engine import FINISH_ABORT, Delta, GenerateRequest, LoopEngine, take_merged
from replicas.sim.core import CoreConfig, EngineCore
from replicas.sim.kv_cache import KVEventCallback
from replicas.sim.request import FINISHED, SimRequest

VOCAB_RANGE = (1000, 30000)


class SimEngine(LoopEngine):
    _loop_name = "sim-engine-loop"

    def __init__(
        self,
        *,
        model: str = "smollm2-135m",
        hardware: str = "cpu",
        tp: int = 1,
        block_size: int = 16,
        num_gpu_blocks: int | None = None,
        kv_capacity_tokens: int | None = None,
        max_num_seqs: int | None = None,
        max_num_batched_tokens: int | None = None,
        max_model_len: int | None = None,
        speed: float = 1.0,
        batching: str = "continuous",
        seed: int = 0,
        enable_chunked_prefill: bool = True,
        enable_prefix_caching: bool = True,
        detokenize: Callable[[list[int]], str] | None = None,
        on_kv_event: KVEventCallback | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        super().__init__()
        cfg = CoreConfig(
            model=model, hardware=hardware, tp=tp, block_size=block_size,
            num_gpu_blocks=num_gpu_blocks, kv_capacity_tokens=kv_capacity_tokens,
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=max_model_len, enable_chunked_prefill=enable_chunked_prefill,
            enable_prefix_caching=enable_prefix_caching, batching=batching,
        )  # fmt: skip
        self.core = EngineCore(cfg, on_kv_event, speed=speed)
        self.block_size = self.core.block_size
        self.max_model_len = self.core.max_model_len
        self.speed = speed
        self.seed = seed
        self._detokenize = detokenize
        self._clock = clock
        self._requests: dict[str, SimRequest] = {}
        self._wake = asyncio.Event()

    def _live_ids(self) -> list[str]:
        return list(self._requests)

    def stats(self) -> ReplicaStats:
        return self.core.stats(self._clock())

    async def abort(self, request_id: str) -> None:
        req = self._requests.pop(request_id, None)
        if req is None or req.state == FINISHED:
            return
        self.core.abort(req)
        queue: asyncio.Queue[Delta] = req.payload[0]  # type: ignore[index]
        queue.put_nowait(self._delta(req, [], [], FINISH_ABORT))

    async def generate(self, request: GenerateRequest) -> AsyncIterator[Delta]:
        if self._task is None:
            await self.start()
        if request.request_id in self._requests:
            raise ValueError(f"duplicate request id {request.request_id}")
        prompt = list(request.prompt_token_ids)
        queue: asyncio.Queue[Delta] = asyncio.Queue()
        rng = random.Random(zlib.crc32(f"{self.seed}:{request.seed}:{request.request_id}".encode()))
        hashes = list(block_hashes(prompt, self.block_size))
        req = SimRequest(
            request.request_id,
            len(prompt),
            hashes,
            request.max_tokens,
            payload=(queue, rng),
            token_ids=prompt,
        )
        self.core.add(req, self._clock())  # raises ValueError beyond max_model_len
        self._requests[request.request_id] = req
        self._wake.set()
        try:
            while True:
                delta = take_merged(queue, await queue.get())
                yield delta
                if delta.finish_reason is not None:
                    return
        finally:
            if req.state != FINISHED:
                await self.abort(request.request_id)
            self._requests.pop(request.request_id, None)

    def _text(self, ids: list[int]) -> str:
        if self._detokenize is not None:
            return self._detokenize(ids)
        return "".join(f" tok{i}" for i in ids)

    def _delta(
        self, req: SimRequest, ids: list[int], times: list[float], finish: str | None
    ) -> Delta:
        return Delta(
            request_id=req.request_id, token_ids=ids, text=self._text(ids) if ids else "", token_times=times,
            finish_reason=finish, prompt_tokens=req.prompt_len,
            completion_tokens=req.num_output, cached_tokens=req.cached_tokens,
            queue_s=None if req.first_scheduled is None else req.first_scheduled - req.arrival,
        )  # fmt: skip

    async def _loop(self) -> None:
        core = self.core
        deadline = 0.0  # modelled end of the previous step; steps chain on it, so sleep
        while True:  # overshoot does not accumulate while the engine stays busy
            await self._maybe_hang()
            if not core.scheduler.has_work():
                self._wake.clear()
                await self._wake.wait()
            start = self._clock()
            batch, seconds = core.begin_step(start)
            if batch is None:
                await self._idle_wait()
                continue
            deadline = max(deadline, start - 0.002) + seconds / self.speed
            await asyncio.sleep(max(0.0, deadline - self._clock()))
            end = self._clock()
            for req in core.end_step(batch, start, end):
                handle: tuple[asyncio.Queue[Delta], random.Random] = req.payload  # type: ignore[assignment]
                queue, rng = handle
                tid = rng.randrange(*VOCAB_RANGE)
                req.token_ids.append(tid)  # type: ignore[union-attr]
                queue.put_nowait(self._delta(req, [tid], [end], req.finish_reason))
                if req.state == FINISHED:
                    self._requests.pop(req.request_id, None)

    async def _idle_wait(self) -> None:
        """Work is queued but not schedulable (static/dynamic batching, full cache)."""
        wake = self.core.scheduler.next_wakeup()
        self._wake.clear()
        timeout = None if wake is None else max(0.0, wake - self._clock())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=timeout)
