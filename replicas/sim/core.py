"""Clock-free engine core: scheduler + paged KV cache + cost model + statistics.

The real-time ``SimEngine`` and the virtual-time cluster simulator drive the same core:
``begin_step(now) -> (batch, seconds)`` picks the work and prices it; ``end_step(batch,
end)`` applies it. KV events are flushed to ``on_kv_event(kind, hashes)`` after each
scheduling decision ("stored" / "removed", parent first).

Busy fraction and recent TTFT P95 come from the real engine's ``LoadTracker`` fed with the
core's own (real or virtual) times: busy = completed engine steps within the last
``BUSY_WINDOW_S``; TTFT P95 over the first tokens of the last ``TTFT_WINDOW_S``, so a burst
ages out of it; prefill load = uncached tokens whose first token came in the last
``BUSY_WINDOW_S``, per second. ``stats(now)`` reads them at ``now`` (default: the latest
time seen). Prefill and decode rates are the core's own per-step EWMAs (``EWMA_ALPHA``);
``waiting_prefill_tokens`` is the scheduler's exact count (whole prompt while waiting, less
the cache hit once scheduled, less each prefilled chunk). Every ``ReplicaStats`` field is
measured; ``healthy``/``draining`` keep their defaults (the core cannot fail or drain).
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.stats import ReplicaStats, ttft_tail_fields
from replicas.load_stats import LoadTracker
from replicas.sim import profiles
from replicas.sim.cost import CostModel
from replicas.sim.kv_cache import BlockPool, KVCacheManager, KVEventCallback
from replicas.sim.request import SimRequest
from replicas.sim.scheduler import Batch, Scheduler, SchedulerConfig

EWMA_ALPHA = 0.2
TTFT_WINDOW_S = 60.0  # same defaults as the real engine's LoadTracker
BUSY_WINDOW_S = 10.0


@dataclass(frozen=True, slots=True)
class CoreConfig:
    model: str = "smollm2-135m"
    hardware: str = "cpu"
    tp: int = 1
    block_size: int | None = None  # None = the hardware default (16 GPU, 128 CPU)
    num_gpu_blocks: int | None = None
    kv_capacity_tokens: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    batching: str = "continuous"
    batch_size: int = 0
    batch_timeout_s: float = 0.05


class EngineCore:
    def __init__(
        self, config: CoreConfig, on_kv_event: KVEventCallback | None = None, speed: float = 1.0
    ) -> None:
        hw = profiles.hardware(config.hardware)
        mp = profiles.model(config.model)
        self.cost = CostModel(mp, hw, config.tp)
        self.block_size = config.block_size or hw.default_block_size
        self.max_model_len = config.max_model_len or mp.max_model_len
        blocks = config.num_gpu_blocks
        if blocks is None:
            cap = config.kv_capacity_tokens or self.cost.kv_capacity_tokens()
            blocks = cap // self.block_size
        pool = BlockPool(blocks, self.block_size, config.enable_prefix_caching)
        self.kv = KVCacheManager(pool)
        self.scheduler = Scheduler(
            SchedulerConfig(
                max_num_seqs=config.max_num_seqs or hw.default_max_num_seqs,
                max_num_batched_tokens=config.max_num_batched_tokens
                or hw.default_max_num_batched_tokens,
                max_model_len=self.max_model_len,
                enable_chunked_prefill=config.enable_chunked_prefill,
                batching=config.batching,
                batch_size=config.batch_size,
                batch_timeout_s=config.batch_timeout_s,
            ),
            self.kv,
        )
        self.on_kv_event = on_kv_event
        self.steps = 0
        self.busy_s = 0.0
        chunk = min(2048, self.scheduler.config.max_num_batched_tokens)
        self._prefill_rate = speed * self.cost.nominal_prefill_tokens_per_s(chunk)
        self._decode_rate = 0.0
        self._now = 0.0  # latest time seen (arrival or step end)
        self.recent = LoadTracker(
            ttft_window_s=TTFT_WINDOW_S, busy_window_s=BUSY_WINDOW_S, clock=lambda: self._now
        )

    @property
    def kv_capacity_tokens(self) -> int:
        return self.kv.pool.num_blocks * self.block_size

    @property
    def prefill_tokens_per_s(self) -> float:
        """Smoothed measured prefill rate (the nominal rate until the first prefill step)."""
        return self._prefill_rate

    def add(self, req: SimRequest, now: float) -> None:
        req.arrival = now
        self._now = max(self._now, now)
        self.scheduler.add(req)
        self.recent.on_request_added(req.request_id, req.prompt_len, now)

    def abort(self, req: SimRequest) -> None:
        self.scheduler.abort(req)
        self.recent.on_finished(req.request_id, self._now)
        self.kv.pool.drain_events(self.on_kv_event)

    def begin_step(self, now: float) -> tuple[Batch | None, float]:
        batch = self.scheduler.schedule(now)
        self.kv.pool.drain_events(self.on_kv_event)
        if batch is None:
            return None, 0.0
        return batch, self.cost.step_time(batch.shape)

    def end_step(self, batch: Batch, start: float, end: float) -> list[SimRequest]:
        dt = end - start
        self.steps += 1
        self.busy_s += dt
        self._now = max(self._now, end)
        self.recent.on_step(dt, end)
        out = self.scheduler.complete(batch, end)
        if dt > 0:
            shape = batch.shape
            if shape.prefill_tokens:
                rate = shape.prefill_tokens / dt
                self._prefill_rate += EWMA_ALPHA * (rate - self._prefill_rate)
            self._decode_rate += EWMA_ALPHA * (shape.sampled / dt - self._decode_rate)
        for req in out:
            if req.num_output == 1 and req.first_token_time is not None:
                self.recent.on_first_token(req.request_id, req.cached_tokens, req.first_token_time)
            if req.finish_reason is not None:
                self.recent.on_finished(req.request_id, end)
        return out

    def stats(self, now: float | None = None) -> ReplicaStats:
        t = self._now if now is None else max(now, self._now)
        sch = self.scheduler
        pending = max(0, sch.pending_prefill)
        rate = self._prefill_rate
        return ReplicaStats(
            waiting=len(sch.waiting),
            running=len(sch.running),
            waiting_prefill_tokens=pending,
            kv_usage=self.kv.pool.usage(),
            kv_capacity_tokens=self.kv_capacity_tokens,
            prefix_hits=self.kv.hit_tokens,
            prefix_queries=self.kv.query_tokens,
            block_size=self.block_size,
            prefill_tokens_per_s=rate,
            decode_tokens_per_s=self._decode_rate,
            queue_delay_s=pending / rate if rate > 0 else 0.0,
            ttft_p95_s=self.recent.ttft_p95(t),
            busy_fraction=self.recent.busy_fraction(t),
            prefill_load_tokens_per_s=self.recent.prefill_load(t),
            ongoing=self.recent.ongoing,
            arrived_prompt_tokens=self.recent.arrived_tokens,
            arrived_requests=self.recent.arrived_requests,
            num_preemptions=sch.num_preemptions,
            steps=self.steps,
            **ttft_tail_fields(*self.recent.tail()),
        )
