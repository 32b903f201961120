"""``VLLMEngine``: vLLM's V1 ``AsyncLLM`` in-process, behind the ``Engine`` protocol.

- Requests arrive as token ids (the ingress applied the chat template) and stream back as
  DELTA outputs, one ``Delta`` per engine step with the step's wall-clock time.
- Scheduler numbers (waiting, running, KV usage, prefix-cache hits, steps, preemptions)
  come from a stat logger vLLM calls after every step; rates, queue delay, TTFT P95, busy
  fraction and prefill load come from ``LoadTracker`` (decode rate: tokens streamed per
  busy second); uncached waiting prefill tokens from ``PrefillBacklog`` (a request's whole
  prompt until the scheduler admits it and looks it up, then exactly prompt − cached
  blocks, until its first token). ``draining`` is never set here (Serve drains replicas).
- Settings and the argument lists derived from them live in ``vllm_settings.py``.
- The KV cache is sized by ``kv_cache_memory_bytes`` on CPU and GPU alike (the CPU-only
  ``VLLM_CPU_KVCACHE_SPACE`` takes whole GiB, and would override it). Worker
  threads are left unbound (``VLLM_CPU_OMP_THREADS_BIND=nobind``), measured best for two
  engines on two cores; these are set before vLLM spawns its engine-core process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from contracts.stats import ReplicaStats, ttft_tail_fields
from replicas.engine import Delta, GenerateRequest, RequestDone
from replicas.load_stats import LoadTracker
from replicas.prefill_backlog import PrefillBacklog
from replicas.vllm_settings import VLLMSettings, engine_args, on_gpu, set_cpu_env


class _SchedulerView:
    """Latest scheduler numbers, written by the stat logger after every engine step."""

    def __init__(self) -> None:
        self.running = 0
        self.waiting = 0
        self.kv_usage = 0.0
        self.prefix_hits = 0
        self.prefix_queries = 0
        self.steps = 0
        self.num_preemptions = 0
        self.backlog = PrefillBacklog()


def _stat_logger_factory(view: _SchedulerView) -> Any:
    from vllm.v1.metrics.loggers import StatLoggerBase

    class _Capture(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            pass

        def record(
            self,
            scheduler_stats: Any,
            iteration_stats: Any,
            mm_cache_stats: Any = None,  # noqa: ARG002 (vLLM's logger signature)
            engine_idx: int = 0,  # noqa: ARG002
        ) -> None:
            if iteration_stats is not None:
                view.num_preemptions += iteration_stats.num_preempted_reqs
            if scheduler_stats is None:
                return
            view.steps += 1
            view.running = scheduler_stats.num_running_reqs
            view.waiting = scheduler_stats.num_waiting_reqs
            view.kv_usage = scheduler_stats.kv_cache_usage
            pcs = scheduler_stats.prefix_cache_stats
            if pcs is not None:
                view.prefix_hits += pcs.hits
                view.prefix_queries += pcs.queries
                view.backlog.on_lookups(pcs.requests, pcs.queries, pcs.hits)

        def log_engine_initialized(self) -> None:
            pass

    return _Capture


def _prompt_len(prompt: Any) -> int:
    ids = prompt.get("prompt_token_ids") if isinstance(prompt, dict) else None
    ids = ids if ids is not None else getattr(prompt, "prompt_token_ids", None)
    return len(ids) if ids is not None else 0


class TrackedClient:
    """Everything of ``AsyncLLM`` unchanged, except that ``generate`` is tracked."""

    def __init__(self, engine: VLLMEngine) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine._llm, name)

    def generate(self, prompt: Any, sampling_params: Any, request_id: str, **kw: Any) -> Any:
        return self._engine.tracked(prompt, sampling_params, request_id, **kw)


class VLLMEngine:
    def __init__(self, settings: VLLMSettings) -> None:
        self.settings = settings
        self.max_model_len = settings.max_model_len
        self.block_size = settings.block_size or 0
        self._llm: Any = None
        self._view = _SchedulerView()
        self._tracker = LoadTracker(clock=time.monotonic)
        self._kv_capacity_tokens = 0
        self._dead: str | None = None
        self.on_request_done: Callable[[RequestDone], None] | None = None

    async def start(self) -> None:
        # Off the event loop: importing vLLM and its constructor (which waits until the engine
        # core has loaded the model and sized the KV cache) block for 15-30 s, minutes on a
        # busy CPU. On the loop they held the replica's destructor, so Serve could not stop a
        # replica still starting: `llmfleet down` then took 17-61 s instead of 4 (found by a
        # failed CI run). vLLM starts its output handler on the first request when built
        # outside a loop.
        self._llm = await asyncio.to_thread(self._build)
        cache = self._llm.vllm_config.cache_config
        self.block_size = int(cache.block_size)
        self._kv_capacity_tokens = int((cache.num_gpu_blocks or 0) * cache.block_size)

    def _build(self) -> Any:
        gpu = on_gpu()
        if not gpu:
            set_cpu_env(self.settings)
        from vllm.v1.engine.async_llm import AsyncLLM

        loggers: list[Any] = [_stat_logger_factory(self._view)]
        if self.settings.ray_metrics:
            from vllm.v1.metrics.ray_wrappers import RayPrometheusStatLogger

            loggers.append(RayPrometheusStatLogger)
        return AsyncLLM.from_engine_args(engine_args(self.settings, gpu), stat_loggers=loggers)

    @property
    def tokenizer(self) -> Any:
        return self._llm.tokenizer

    @property
    def client(self) -> Any:
        """The ``AsyncLLM`` as vLLM's OpenAI layer should see it: every ``generate`` is
        counted in this engine's load statistics (``replicas/vllm_openai.py``)."""
        return TrackedClient(self)

    async def tracked(
        self, prompt: Any, params: Any, rid: str, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """``AsyncLLM.generate`` with the load tracker and prefill backlog fed per step;
        ``on_request_done(RequestDone)`` once at the end (TTFT and E2E from here, ITL is
        vLLM's own ``vllm:inter_token_latency_seconds``)."""
        plen = _prompt_len(prompt)
        start = time.monotonic()
        self._tracker.on_request_added(rid, plen, start)
        self._view.backlog.add(rid, plen)
        produced, first, reason = 0, 0.0, None
        queue_s: float | None = None
        try:
            async for out in self._llm.generate(prompt, params, rid, **kwargs):
                n = 0
                for comp in out.outputs:
                    n += len(comp.token_ids)
                    reason = comp.finish_reason or reason
                if n:
                    mono = time.monotonic()
                    if produced == 0:
                        first = mono
                        plen = plen or len(out.prompt_token_ids or ())
                        cached = int(out.num_cached_tokens or 0)
                        queue_s = _queue_s(out)
                        self._view.backlog.on_first_token(rid, cached)
                        self._tracker.on_first_token(rid, cached, mono)
                    self._tracker.on_output_tokens(n, mono)
                    produced += n
                yield out
        finally:
            end = time.monotonic()
            self._view.backlog.remove(rid)
            self._tracker.on_finished(rid, end)
            if self.on_request_done is not None:
                ttft = first - start if produced else None
                done = RequestDone(ttft, end - start, plen, produced, reason or "abort", queue_s)
                self.on_request_done(done)

    def _sampling(self, req: GenerateRequest) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        return SamplingParams(
            max_tokens=req.max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            seed=req.seed,
            stop=list(req.stop) or None,
            ignore_eos=req.ignore_eos,
            output_kind=RequestOutputKind.DELTA,
        )

    async def generate(self, request: GenerateRequest) -> AsyncIterator[Delta]:
        from vllm.inputs import TokensPrompt

        rid = request.request_id
        prompt_len = len(request.prompt_token_ids)
        now = time.monotonic()
        self._tracker.on_request_added(rid, prompt_len, now)
        self._view.backlog.add(rid, prompt_len)
        finished = False
        produced = 0
        try:
            stream = self._llm.generate(
                TokensPrompt(prompt_token_ids=list(request.prompt_token_ids)),
                self._sampling(request),
                request_id=rid,
            )
            async for out in stream:
                t = time.time()
                comp = out.outputs[0]
                new_ids = list(comp.token_ids)
                cached = int(out.num_cached_tokens or 0)
                mono = time.monotonic()
                if produced == 0 and new_ids:
                    self._view.backlog.on_first_token(rid, cached)
                    self._tracker.on_first_token(rid, cached, mono)
                self._tracker.on_output_tokens(len(new_ids), mono)
                produced += len(new_ids)
                finished = out.finished
                yield Delta(
                    request_id=rid,
                    token_ids=new_ids,
                    text=comp.text,
                    token_times=[t] * len(new_ids),
                    finish_reason=comp.finish_reason if out.finished else None,
                    prompt_tokens=prompt_len,
                    completion_tokens=produced,
                    cached_tokens=cached,
                )
        finally:
            self._view.backlog.remove(rid)
            self._tracker.on_finished(rid, time.monotonic())
            if not finished and self._llm is not None:
                await self._llm.abort(rid)

    async def abort(self, request_id: str) -> None:
        if self._llm is not None:
            await self._llm.abort(request_id)

    def _counts(self) -> tuple[int, int]:
        """Running/waiting from the scheduler, bounded by the front end's unfinished count: the
        scheduler reports only after a step, so an abort on an idle engine would look stale."""
        v = self._view
        unfinished = self._llm.output_processor.get_num_unfinished_requests() if self._llm else 0
        running = min(v.running, unfinished)
        return running, min(v.waiting, unfinished - running)

    def stats(self) -> ReplicaStats:
        v = self._view
        running, waiting = self._counts()
        waiting_tokens = v.backlog.tokens
        load = self._tracker.snapshot(waiting_tokens, time.monotonic())
        return ReplicaStats(
            waiting=waiting,
            running=running,
            waiting_prefill_tokens=waiting_tokens,
            kv_usage=float(v.kv_usage),
            kv_capacity_tokens=self._kv_capacity_tokens,
            prefix_hits=v.prefix_hits,
            prefix_queries=v.prefix_queries,
            block_size=self.block_size,
            prefill_tokens_per_s=load.prefill_tokens_per_s,
            decode_tokens_per_s=load.decode_tokens_per_s,
            queue_delay_s=load.queue_delay_s,
            ttft_p95_s=load.ttft_p95_s,
            busy_fraction=load.busy_fraction,
            prefill_load_tokens_per_s=load.prefill_load_tokens_per_s,
            ongoing=load.ongoing,
            arrived_prompt_tokens=self._tracker.arrived_tokens,
            arrived_requests=self._tracker.arrived_requests,
            num_preemptions=v.num_preemptions,
            steps=v.steps,
            healthy=self._llm is not None and self.dead() is None,
            **ttft_tail_fields(*self._tracker.tail()),
        )

    def dead(self) -> str | None:
        """Why this engine can serve nothing more: its engine core process exited (vLLM's
        client then fails every request in flight and every new one), else None."""
        if self._dead is None and self._llm is not None and self._llm.errored:
            self._dead = "the engine core died"
        return self._dead

    async def ping(self) -> None:
        await self._llm.is_sleeping()  # a utility call: answered by the engine core process

    async def check_health(self) -> None:
        if self._llm is None:
            raise RuntimeError("engine not started")
        try:
            await self._llm.check_health()
        except Exception as err:
            self._dead = str(err)
            raise

    async def shutdown(self) -> None:
        if self._llm is not None:
            self._llm.shutdown()
            self._llm = None


def _queue_s(out: Any) -> float | None:
    """Queued to first scheduled, from the engine core's own timestamps (present when vLLM
    keeps request stats)."""
    stats = getattr(out, "metrics", None)
    queued = getattr(stats, "queued_ts", 0.0) or 0.0
    scheduled = getattr(stats, "scheduled_ts", 0.0) or 0.0
    return scheduled - queued if queued > 0 and scheduled >= queued else None
