"""Roofline step-time model for one engine step (one forward pass over a mixed batch).

    step = overhead + per_seq * seqs + max(compute, memory) + tp_comm

compute = FLOPs / (tp * peak * compute_eff) with FLOPs = 2 * matmul_params * tokens
          + 2 * vocab * hidden * sampled + 4 * layers * heads * head_dim * attended_pairs
memory  = (weights + KV read) / (tp * bandwidth * bw_eff)
tp_comm = 2 all-reduces per layer of tokens * hidden * dtype bytes (ring: 2(tp-1)/tp of the
          payload over the per-direction link) plus a per-all-reduce latency.
Decode is memory-bound (weights re-read every step), long prefill compute-bound, so
throughput grows with batch size until the compute term overtakes the memory term.
"""

from __future__ import annotations

from dataclasses import dataclass

from replicas.sim.profiles import HardwareProfile, ModelProfile


@dataclass(frozen=True, slots=True)
class BatchShape:
    prefill_tokens: int = 0  # tokens computed for prompts this step (sum of chunks)
    prefill_pairs: float = 0.0  # attended (query, key) pairs of those tokens
    prefill_kv_tokens: int = 0  # KV tokens read by prefill chunks (context + chunk)
    decode_seqs: int = 0
    decode_kv_tokens: int = 0  # sum of decode sequences' context lengths
    sampled: int = 0  # sequences that produce a token this step


def step_features(m: ModelProfile, b: BatchShape) -> tuple[float, float, float]:
    """(FLOPs, bytes read, sequences) of one engine step: the quantities the step time is
    built from, shared with the CPU-profile fit so the two cannot drift apart."""
    tokens = b.prefill_tokens + b.decode_seqs
    pairs = b.prefill_pairs + b.decode_kv_tokens
    flops = (
        2.0 * m.matmul_params * tokens
        + 2.0 * m.vocab * m.hidden * b.sampled
        + 4.0 * m.layers * m.heads * m.head_dim * pairs
    )
    kv_bytes = (b.prefill_kv_tokens + b.decode_kv_tokens) * m.kv_bytes_per_token
    seqs = b.decode_seqs + (1 if b.prefill_tokens else 0) + max(0, b.sampled - b.decode_seqs)
    return flops, m.weight_bytes + kv_bytes, float(seqs)


@dataclass(frozen=True, slots=True)
class CostModel:
    model: ModelProfile
    hw: HardwareProfile
    tp: int = 1

    def step_time(self, b: BatchShape) -> float:
        hw, tp = self.hw, self.tp
        tokens = b.prefill_tokens + b.decode_seqs
        if tokens == 0:
            return 0.0
        flops, nbytes, seqs = step_features(self.model, b)
        compute = flops / (tp * hw.peak_flops * hw.compute_eff)
        memory = nbytes / (tp * hw.mem_bandwidth * hw.bw_eff)
        return (
            hw.step_overhead_s
            + hw.per_seq_overhead_s * seqs
            + max(compute, memory)
            + self._comm(tokens)
        )

    def _comm(self, tokens: int) -> float:
        if self.tp <= 1:
            return 0.0
        m, hw = self.model, self.hw
        payload = tokens * m.hidden * m.dtype_bytes
        per_reduce = 2.0 * (self.tp - 1) / self.tp * payload / hw.link_bandwidth + hw.link_latency_s
        return 2 * m.layers * per_reduce

    def decode_step(self, batch: int, context: int) -> float:
        return self.step_time(
            BatchShape(decode_seqs=batch, decode_kv_tokens=batch * context, sampled=batch)
        )

    def prefill_step(self, tokens: int, context: int = 0) -> float:
        pairs = tokens * (context + (tokens + 1) / 2)
        return self.step_time(
            BatchShape(
                prefill_tokens=tokens,
                prefill_pairs=pairs,
                prefill_kv_tokens=context + tokens,
                sampled=1,
            )
        )

    def kv_capacity_tokens(self) -> int:
        m, hw = self.model, self.hw
        if hw.default_kv_bytes > 0:
            kv = hw.default_kv_bytes
        else:
            kv = (
                self.tp * (hw.mem_bytes * hw.mem_util - hw.activation_reserve_bytes)
                - m.weight_bytes
            )
        if kv <= 0:
            raise ValueError(f"{m.name} does not fit on {self.tp} x {hw.name}")
        return int(kv // m.kv_bytes_per_token)

    def nominal_prefill_tokens_per_s(self, chunk: int = 2048) -> float:
        return chunk / self.prefill_step(chunk)
