"""Step scheduler of the simulated engine, after vLLM V1's unified scheduler.

Each step has a token budget (``max_num_batched_tokens``) and at most ``max_num_seqs``
running sequences:
  1. running sequences first, in admission order: a decode needs 1 token, a partly
     prefilled prompt its next chunk (capped by the remaining budget); when blocks run out
     the most recently admitted running sequence is preempted (blocks freed, recomputed
     later from scratch, put back at the head of the queue);
  2. then, if nothing was preempted, waiting requests FCFS: reuse the longest cached prefix,
     prefill the rest in chunks within the remaining budget (without chunked prefill a prompt
     that does not fit waits for a later step).
A sequence samples its first token only in the step that computes its last prompt token.
Batching modes: ``continuous`` (above), ``static`` (admit only when idle and a full batch
of ``batch_size`` waits, run it to completion), ``dynamic`` (like static but also admit a
partial batch once the oldest request waited ``batch_timeout_s``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from replicas.sim.cost import BatchShape
from replicas.sim.kv_cache import KVCacheManager
from replicas.sim.request import FINISHED, RUNNING, WAITING, SimRequest

BATCHING_MODES = ("continuous", "static", "dynamic")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 8192
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0  # 0 = no per-request chunk cap
    batching: str = "continuous"
    batch_size: int = 0  # static/dynamic batch size; 0 = max_num_seqs
    batch_timeout_s: float = 0.05  # dynamic batching

    def __post_init__(self) -> None:
        if self.batching not in BATCHING_MODES:
            raise ValueError(f"batching must be one of {BATCHING_MODES}")


@dataclass(slots=True)
class Batch:
    items: list[tuple[SimRequest, int]]  # (request, tokens computed this step)
    shape: BatchShape


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv: KVCacheManager) -> None:
        self.config = config
        self.kv = kv
        self.block_size = kv.block_size
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.pending_prefill = 0  # tokens still to prefill across waiting + running
        self.num_preemptions = 0
        self._flush = False
        self._now = 0.0
        self._batch_size = config.batch_size or config.max_num_seqs

    def add(self, req: SimRequest) -> None:
        if req.prompt_len + 1 > self.config.max_model_len:
            raise ValueError(f"prompt of {req.prompt_len} tokens exceeds max_model_len")
        if -(-req.prompt_len // self.block_size) > self.kv.pool.num_blocks:
            raise ValueError(f"prompt of {req.prompt_len} tokens exceeds the KV cache")
        if (
            not self.config.enable_chunked_prefill
            and req.prompt_len > self.config.max_num_batched_tokens
        ):
            raise ValueError("prompt exceeds max_num_batched_tokens and chunked prefill is off")
        req.state = WAITING
        self.waiting.append(req)
        self.pending_prefill += req.prompt_len

    def abort(self, req: SimRequest) -> None:
        if req.state == FINISHED:
            return
        if req.state == RUNNING:
            self.running.remove(req)
        else:
            self.waiting.remove(req)
        self.pending_prefill -= max(0, req.prompt_len - req.num_computed)
        self.kv.free(req)
        req.state = FINISHED
        req.finish_reason = "abort"

    def flush(self) -> None:
        """Let static batching admit a partial batch (e.g. at the end of a workload)."""
        self._flush = True

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def schedule(self, now: float) -> Batch | None:
        self._now = now
        budget = self.config.max_num_batched_tokens
        items: list[tuple[SimRequest, int]] = []
        budget, preempted = self._schedule_running(items, budget)
        if not preempted and self._may_admit(now):
            self._schedule_waiting(items, budget)
        if not items:
            return None
        return Batch(items, self._shape(items))

    def _schedule_running(
        self, items: list[tuple[SimRequest, int]], budget: int
    ) -> tuple[int, bool]:
        running, kv, cap = self.running, self.kv, self.config.long_prefill_token_threshold
        preempted = False
        i = 0
        bs = self.block_size
        while i < len(running) and budget > 0:
            req = running[i]
            done = req.num_computed
            if (
                req.num_output
                and done == req.prompt_len + req.num_output - 1
                and done < len(req.blocks) * bs
            ):
                items.append((req, 1))  # fast path: a decode that fits its last block
                if req.token_ids is not None and (done + 1) % bs == 0:
                    kv.commit(req, 1)  # this token fills the block: cache it (ids known)
                budget -= 1
                i += 1
                continue
            num_new = min(req.num_tokens - done, budget)
            if cap:
                num_new = min(num_new, cap)
            while not kv.allocate(req, num_new):
                preempted = True
                victim = running.pop()
                self._preempt(victim)
                if victim is req:
                    return budget, preempted
            kv.commit(req, num_new)
            items.append((req, num_new))
            budget -= num_new
            i += 1
        return budget, preempted

    def _preempt(self, req: SimRequest) -> None:
        self.kv.free(req)
        self.pending_prefill += min(req.num_computed, req.prompt_len)
        req.num_computed = 0
        req.state = WAITING
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)

    def _may_admit(self, now: float) -> bool:
        mode = self.config.batching
        if mode == "continuous" or not self.waiting:
            return mode == "continuous"
        if self.running:
            return False
        if len(self.waiting) >= self._batch_size or self._flush:
            self._flush = False
            return True
        return mode == "dynamic" and now >= self.waiting[0].arrival + self.config.batch_timeout_s

    def _schedule_waiting(self, items: list[tuple[SimRequest, int]], budget: int) -> None:
        cfg, kv, waiting, running = self.config, self.kv, self.waiting, self.running
        continuous = cfg.batching == "continuous"
        limit = cfg.max_num_seqs if continuous else min(cfg.max_num_seqs, self._batch_size)
        while waiting and (budget > 0 or not continuous) and len(running) < limit:
            req = waiting[0]
            hit = kv.computed_blocks(req) if req.num_computed == 0 else 0
            remaining = req.num_tokens - req.num_computed - hit * self.block_size
            # without chunking a prompt waits for a step with room for all of it (a recompute
            # longer than any budget, prompt + outputs after preemption, is chunked instead)
            if not cfg.enable_chunked_prefill and budget < remaining <= cfg.max_num_batched_tokens:
                break
            num_new = min(remaining, budget)
            if cfg.long_prefill_token_threshold:
                num_new = min(num_new, cfg.long_prefill_token_threshold)
            if not kv.allocate(req, num_new, hit):
                break
            kv.count_lookup(req, hit)
            self.pending_prefill -= min(hit * self.block_size, req.prompt_len)
            kv.commit(req, num_new)
            waiting.popleft()
            req.state = RUNNING
            if req.first_scheduled is None:
                req.first_scheduled = self._now
            running.append(req)
            if num_new:
                items.append((req, num_new))
                budget -= num_new

    def next_wakeup(self) -> float | None:
        """When a dynamic batch's timeout admits a partial batch (None: no timer needed)."""
        if self.config.batching != "dynamic" or self.running or not self.waiting:
            return None
        return self.waiting[0].arrival + self.config.batch_timeout_s

    def _shape(self, items: list[tuple[SimRequest, int]]) -> BatchShape:
        p_tok = p_kv = d_seqs = d_kv = sampled = 0
        pairs = 0.0
        for req, n in items:
            ctx = req.num_computed
            if n == 1 and ctx >= req.prompt_len:
                d_seqs += 1
                d_kv += ctx + 1
                sampled += 1
                continue
            p_tok += n
            p_kv += ctx + n
            pairs += n * (ctx + (n + 1) * 0.5)
            if ctx + n >= req.num_tokens:
                sampled += 1
        return BatchShape(p_tok, pairs, p_kv, d_seqs, d_kv, sampled)

    def complete(self, batch: Batch, now: float) -> list[SimRequest]:
        """Apply a finished step: advance computed tokens, sample, retire finished requests.
        Returns the requests that received a token (finished ones have ``finish_reason``)."""
        out: list[SimRequest] = []
        max_len = self.config.max_model_len
        done = False
        for req, n in batch.items:
            if req.state != RUNNING:
                continue  # aborted or preempted during the step
            if req.num_computed < req.prompt_len:
                self.pending_prefill -= min(n, req.prompt_len - req.num_computed)
            req.num_computed += n
            if req.num_computed < req.num_tokens:
                continue
            req.num_output += 1
            req.token_times.append(now)
            if req.first_token_time is None:
                req.first_token_time = now
            if req.num_output >= req.max_tokens or req.num_tokens >= max_len:
                req.finish_reason = "length"
                req.state = FINISHED
                done = True
            out.append(req)
        if done:
            self._retire()
        return out

    def _retire(self) -> None:
        keep: list[SimRequest] = []
        for req in self.running:
            if req.state == FINISHED:
                self.kv.free(req)
            else:
                keep.append(req)
        self.running = keep
