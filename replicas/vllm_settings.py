"""How llmfleet configures vLLM: the settings a replica's engine is built from, and the
argument lists derived from them (``AsyncLLM``'s engine arguments, the ``vllm serve``
command line of the bare-vLLM baselines, the in-process OpenAI layer's arguments) and the
CPU environment set before vLLM spawns its engine-core process. Pure: nothing here
imports vLLM until ``engine_args`` parses the arguments with vLLM's own parser.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from replicas.engine_args import engine_args_argv, engine_kwargs_of


@dataclass(frozen=True, slots=True)
class VLLMSettings:
    model_path: str
    max_model_len: int = 2048
    enforce_eager: bool = True
    dtype: str = "bfloat16"
    kv_cache_gib: float = 1.0
    block_size: int | None = None
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 512
    enable_prefix_caching: bool = True
    seed: int = 0
    omp_threads: int = 1
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    kv_events_endpoint: str | None = None  # e.g. "ipc:///tmp/llmfleet-kv-<replica>"
    ray_metrics: bool = False  # export vllm:* metrics through Ray (inside Serve replicas)
    # the engine's served model name: vLLM's own metrics label (model_name) and the model
    # its errors name; unset, vLLM uses the model path (found by hand: every vllm:* series
    # was labelled with the replica's filesystem path, and a 400 quoted it to the client)
    served_name: str | None = None
    # s3:// or gs:// weights streamed by vLLM's own loader (runai_streamer); the config and
    # tokenizer still come from ``model_path`` (the ingress tokenizes with them too)
    weights_uri: str | None = None
    # any other engine argument, checked at config load (replicas/engine_args.py)
    engine_args: dict[str, Any] = field(default_factory=dict)


def on_gpu() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def cpu_env(s: VLLMSettings) -> dict[str, str]:
    """Environment the CPU engine reads at spawn time; no effect on GPU. The KV size goes in
    as ``kv_cache_memory_bytes``: VLLM_CPU_KVCACHE_SPACE takes whole GiB only and, when
    set, overrides it."""
    return {
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": str(s.omp_threads),
        "VLLM_LOGGING_LEVEL": "WARNING",
        "TOKENIZERS_PARALLELISM": "false",
    }


def set_cpu_env(s: VLLMSettings) -> None:
    for key, value in cpu_env(s).items():
        os.environ.setdefault(key, value)


def engine_kwargs(s: VLLMSettings, gpu: bool) -> dict[str, Any]:
    """vLLM engine arguments (``AsyncEngineArgs`` fields) for these settings: the one
    translation, used by our replicas and by the bare vLLM server the benchmarks compare
    against (``server_argv``). KV events are added by ``engine_args`` only; the pass-through
    ``s.engine_args`` by ``engine_args`` (as parsed values) and ``server_argv`` (as flags)."""
    kwargs: dict[str, Any] = dict(
        model=s.model_path,
        tokenizer=s.model_path,
        max_model_len=s.max_model_len,
        enforce_eager=s.enforce_eager,
        dtype=s.dtype,
        max_num_seqs=s.max_num_seqs,
        max_num_batched_tokens=s.max_num_batched_tokens,
        enable_chunked_prefill=True,
        enable_prefix_caching=s.enable_prefix_caching,
        seed=s.seed,
        tensor_parallel_size=s.tensor_parallel_size,
        disable_log_stats=False,
    )
    if s.block_size:
        kwargs["block_size"] = s.block_size
    if s.weights_uri:
        kwargs["model"] = s.weights_uri
        kwargs["load_format"] = "runai_streamer"
    if s.tensor_parallel_size > 1:
        kwargs["distributed_executor_backend"] = "ray"
    if gpu:
        kwargs["gpu_memory_utilization"] = s.gpu_memory_utilization
    kwargs["kv_cache_memory_bytes"] = int(s.kv_cache_gib * 2**30)
    return kwargs


def server_argv(s: VLLMSettings, gpu: bool, *, served_name: str, port: int) -> list[str]:
    """``python -m vllm.entrypoints.openai.api_server`` flags with the same engine arguments
    as our replicas (``engine_kwargs`` and the pass-through ``engine_args``), on 127.0.0.1."""
    if s.kv_events_endpoint:
        raise ValueError("the bare vLLM server is started without KV events")
    argv = ["--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port)]
    for key, value in engine_kwargs(s, gpu).items():
        if key == "disable_log_stats":  # the server logs stats unless told not to; no flag
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + key.replace("_", "-"))
        else:
            argv += [flag, str(value)]
    return argv + engine_args_argv(s.engine_args)


def engine_args(s: VLLMSettings, gpu: bool) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs

    kwargs = engine_kwargs(s, gpu) | engine_kwargs_of(s.engine_args)
    if s.served_name:
        kwargs["served_model_name"] = s.served_name
    if s.kv_events_endpoint:
        from vllm.config import KVEventsConfig

        kwargs["kv_events_config"] = KVEventsConfig(
            enable_kv_cache_events=True, publisher="zmq", endpoint=s.kv_events_endpoint, topic="kv"
        )
    return AsyncEngineArgs(**kwargs)


def openai_argv(s: VLLMSettings, gpu: bool, openai: dict[str, Any]) -> list[str]:
    """vLLM server arguments for the OpenAI layer a replica runs in-process: the engine's own
    arguments (so the layer's view of the model matches the engine), the served name, usage
    with ``cached_tokens``, and the tool-call parser / chat template from the config."""
    from dataclasses import replace

    argv = server_argv(
        replace(s, kv_events_endpoint=None),
        gpu,
        served_name=str(openai.get("served_name") or s.model_path),
        port=0,
    )
    argv += ["--model", s.model_path, "--enable-prompt-tokens-details"]
    if openai.get("tool_call_parser"):
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", openai["tool_call_parser"]]
    if openai.get("tool_strict_level", "auto") != "auto":
        argv += ["--tool-strict-level", openai["tool_strict_level"]]
    if openai.get("chat_template"):
        argv += ["--chat-template", openai["chat_template"]]
    return argv
