"""The ``engine:`` section of the llmfleet YAML: which engine serves (vLLM, the simulated
engine, the null engine) and its arguments."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from cluster.settings_base import Strict as _Strict


class VLLMArgs(_Strict):
    enforce_eager: bool = Field(
        True,
        description="Eager mode: starts ~3x faster on CPU and its greedy output matched HF transformers (compiled bf16 diverged).",
    )
    dtype: str = Field("bfloat16", description="Model dtype passed to vLLM.")
    kv_cache_gib: float = Field(
        1.0,
        gt=0,
        description="KV-cache size per replica in GiB, fractions allowed (passed as kv_cache_memory_bytes on CPU and GPU).",
    )
    block_size: int | None = Field(
        None,
        ge=1,
        description="KV block size in tokens; None keeps vLLM's default (128 on CPU, 16 on GPU).",
    )
    max_num_seqs: int = Field(
        32, ge=1, description="Most sequences in one batch (continuous batching slots)."
    )
    max_num_batched_tokens: int = Field(
        512, ge=16, description="Per-step token budget for chunked prefill + decode."
    )
    enable_prefix_caching: bool = Field(
        True, description="Automatic prefix caching of full KV blocks."
    )
    seed: int = Field(0, description="Engine seed for sampling.")
    omp_threads: int = Field(
        1,
        ge=1,
        description="OMP threads per CPU engine (VLLM_CPU_OMP_THREADS_BIND=nobind); 1 measured best on 2 cores.",
    )
    kv_events: bool = Field(
        False,
        description="Publish vLLM KV-cache events over ZMQ on ipc:///tmp/llmfleet-kv-<replica> (on automatically with routing.policy prefix-precise).",
    )
    gpu_memory_utilization: float = Field(
        0.9, gt=0, le=1, description="GPU only: fraction of GPU memory vLLM may use."
    )
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Any other vLLM engine argument by its snake_case name (quantization, kv_cache_dtype, speculative_config, ...), checked by vLLM's own parser at load; keys llmfleet sets are refused (docs/serving.md).",
    )

    @field_validator("engine_args")
    @classmethod
    def _check_engine_args(cls, args: dict[str, Any]) -> dict[str, Any]:
        from replicas.engine_args import EngineArgsError, check_engine_args

        try:
            return check_engine_args(args)
        except EngineArgsError as err:  # one error per key, located at engine_args.<key>
            details = [
                InitErrorDetails(
                    type=PydanticCustomError("engine_arg", "{reason}", {"reason": reason}),
                    loc=(key,),
                    input=args.get(key),
                )
                for key, reason in err.errors
            ]
            raise ValidationError.from_exception_data("engine_args", details) from None


class SimArgs(_Strict):
    hardware: str = Field(
        "cpu", description="Hardware profile of the simulated engine: h100|h200|a100|l4|cpu."
    )
    model_profile: str = Field(
        "smollm2-135m",
        description="Model profile for the cost model: smollm2-135m|llama-3-8b|llama-3-70b|qwen3-32b.",
    )
    speed: float = Field(
        1.0, gt=0, description="Speed factor: modelled step times are divided by this."
    )
    block_size: int = Field(16, ge=1, description="Simulated KV block size in tokens.")
    kv_capacity_tokens: int = Field(
        46_000, ge=16, description="Simulated KV capacity per replica in tokens."
    )
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        description="Most sequences in one batch; unset: the hardware profile's (256 on the GPU profiles, 32 on cpu).",
    )
    max_num_batched_tokens: int | None = Field(
        None,
        ge=16,
        description="Per-step token budget; unset: the hardware profile's (2048 on l4, vLLM's OpenAI-server default below 70 GiB; 8192 on h100/h200/a100; 512 on cpu).",
    )
    batching: Literal["continuous", "static", "dynamic"] = Field(
        "continuous", description="Batching schedule."
    )


class NullArgs(_Strict):
    step_s: float = Field(
        0.007,
        gt=0,
        description="Null engine step period: every running request gets one token per step.",
    )
    prefill_s: float = Field(
        0.0, ge=0, description="Null engine: fixed delay before a new request joins a step."
    )
    max_num_seqs: int = Field(
        256, ge=1, description="Null engine: most requests running at once (the rest wait)."
    )


class EngineConfig(_Strict):
    type: Literal["vllm", "sim", "null"] = Field(
        "vllm",
        description="Engine: the real vLLM engine, the simulated one, or the null engine (no model; measures the serving layer).",
    )
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        le=64,
        description="GPUs per replica; >1 gives each replica a STRICT_PACK placement group and vLLM's Ray executor.",
    )
    vllm: VLLMArgs = Field(default_factory=VLLMArgs, description="vLLM engine arguments.")
    sim: SimArgs = Field(default_factory=SimArgs, description="Simulated engine arguments.")
    null: NullArgs = Field(default_factory=NullArgs, description="Null engine arguments.")
    fault_injection: bool = Field(
        False,
        description="Testing only: replicas accept inject_fault('hang', 'die', 'fail' or 'recover') through their handle (chaos tests and benchmarks).",
    )
    fail_after_tokens: int | None = Field(
        None,
        ge=0,
        description="Testing only: every request fails after this many tokens (exercises failure paths).",
    )

    @field_validator("type", mode="before")
    @classmethod
    def _yaml_null(cls, value: Any) -> Any:
        """Found by hand: ``type: null`` in YAML is no value, not the null engine, and the
        error said "Input should be 'vllm', 'sim' or 'null'"."""
        if value is None:
            raise ValueError(
                "no engine type: YAML reads a bare `null` as no value; "
                'for the null engine write type: "null" (quoted)'
            )
        return value
