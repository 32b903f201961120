"""Ray Serve LLM's default serving path with a null engine in place of vLLM's engine.

A ceiling for the serving layer: ``python -m experiments.ceiling.rayllm --port 8131`` serves
``smollm2-135m-instruct`` the way ``ray.serve.llm.build_openai_app`` (Ray 2.60.0) does by
default, but nothing computes tokens: every running request gets one token per step of a fixed
period (``--step-s``, 7 ms by default), at most ``--max-num-seqs`` requests run at once (the
rest wait in arrival order and join at the next step after a slot frees), and every request runs
to its ``max_tokens`` (finish_reason ``length``). What a client measures beyond the step period
is the cost of the serving layer.

What runs, unmodified (Ray 2.60.0 and vLLM 0.32.0 as installed):

* Ray Serve's Python HTTP proxy (``serve.start(http_options=...)``, no direct ingress, no
  HAProxy, no direct streaming: the env vars that switch those on are removed before Ray
  starts), and Serve's handle streaming between the proxy, the ingress and the server.
* ``build_openai_app`` → ``OpenAiIngress`` (Ray Serve LLM's FastAPI OpenAI ingress: request
  parsing, ``/v1/models``, ``/v1/completions``, ``/v1/chat/completions``, its SSE response
  wrapping) → the ``LLMServer`` deployment, built by ``build_llm_deployment`` with Ray's
  default deployment options, including ``LLMServer``'s streaming ``Batcher``.
* ``VLLMEngine`` (Ray's vLLM engine wrapper): ``start()`` runs as written: node
  initialization (a no-op for a local model dir), vLLM's engine config from the model dir
  (``AsyncEngineArgs.create_engine_config``), vLLM's ``init_app_state`` that builds vLLM's
  ``OpenAIServingModels`` / ``OpenAIServingCompletion`` / ``OpenAIServingChat`` (the objects
  Ray Serve LLM's default path calls), and ``VLLMEngine.chat`` / ``.completions`` as written.
  So the OpenAI chunk objects, the SSE ``data:`` lines, the final usage chunk, prompt
  rendering and tokenization (chat template, HF tokenizer of the model dir) are Ray's and
  vLLM's own code.

What is replaced (the engine only):

* ``VLLMEngine._start_async_llm_engine``, which would create vLLM's ``AsyncLLM`` (engine core
  process, scheduler, model, detokenizer), is overridden in ``NullVLLMEngine`` to return a
  ``NullEngineClient`` (``rayllm_client.py``): a ``vllm.engine.protocol.EngineClient`` whose ``generate()`` yields
  ``vllm.outputs.RequestOutput`` deltas from the clock described above (one token per step,
  token id 1000, text " x", no detokenization, no logprobs; ``n`` > 1 is not modelled: one
  output per request). It carries the real ``VllmConfig``, ``ModelConfig``, renderer and
  ``InputProcessor`` built from the model dir exactly as ``AsyncLLM.__init__`` builds them,
  because vLLM's serving objects read them. It honours the request's output kind as
  ``AsyncLLM`` does (deltas when streaming, one final output when not). Everything else of
  ``EngineClient`` is a no-op.
* The engine is plugged in through Ray Serve LLM's own hooks, no patching: ``LLMConfig``
  ``server_cls=NullEngineLLMServer``, a subclass of ``LLMServer`` that changes only the class
  attribute ``_default_engine_cls`` (the hook ``LLMServer._get_default_engine_class`` reads);
  the step period travels in ``LLMConfig.experimental_configs["null_engine_step_s"]`` and the
  run limit in vLLM's own ``engine_kwargs["max_num_seqs"]``. ``accelerator_config`` is
  ``{"kind": "cpu"}`` so the replica's placement group needs no GPU.

Ray's default ``LLMServer`` batches a stream's SSE lines every 50 ms
(``RAYLLM_MODEL_RESPONSE_BATCH_TIMEOUT_MS``), so a client sees tokens in bursts of about
50 ms / step; ``--stream-batching-interval-ms`` sets Ray's own per-model knob
(``experimental_configs["stream_batching_interval_ms"]``; 0 = one message per token) and is
left unset by default.

Start: ``.venv/bin/python -m experiments.ceiling.rayllm --port 8131`` (foreground; it prints
``ready`` when ``GET /v1/models`` answers). Stop: SIGINT or SIGTERM, which shuts Serve and the
local Ray down. Serve's HTTP proxy listens on 127.0.0.1 only and Ray runs with node address
127.0.0.1 (as ``cluster/runtime.py`` starts it), but Ray's own gRPC servers (GCS, raylet,
workers) bind every interface: Ray 2.60 has no setting for that.
"""

# Ray's engine hook keeps its signature; the null engine ignores most arguments.
# ruff: noqa: ARG002

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray.llm._internal.serve.core.server.llm_server import LLMServer
from ray.llm._internal.serve.engines.vllm.vllm_engine import VLLMEngine
from vllm.engine.protocol import EngineClient

from experiments.ceiling.rayllm_client import NullEngineClient

if TYPE_CHECKING:
    from vllm.config import VllmConfig

MODEL_ID = "smollm2-135m-instruct"
APP_NAME = "rayllm-ceiling"
STEP_S_KEY = "null_engine_step_s"
# Env vars that would take Serve or Ray Serve LLM off the default path (direct streaming,
# direct ingress, HAProxy, a swapped engine class); removed before Ray starts.
OFF_PATH_ENV = (
    "RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING",
    "RAY_SERVE_ENABLE_DIRECT_INGRESS",
    "RAY_SERVE_ENABLE_HA_PROXY",
    "RAYLLM_VLLM_ENGINE_CLS",
)


class NullVLLMEngine(VLLMEngine):
    """Ray's ``VLLMEngine`` with ``AsyncLLM`` swapped for ``NullEngineClient``; all else as is."""

    def _start_async_llm_engine(
        self, vllm_engine_args: Any, vllm_engine_config: VllmConfig, placement_group: Any
    ) -> EngineClient:
        step_s = float(self.llm_config.experimental_configs.get(STEP_S_KEY, 0.007))
        return NullEngineClient(vllm_engine_config, step_s)


class NullEngineLLMServer(LLMServer):
    """Ray's ``LLMServer``, defaulting to ``NullVLLMEngine`` (its ``_default_engine_cls`` hook)."""

    _default_engine_cls = NullVLLMEngine  # type: ignore[assignment]  # Ray infers it as None


def default_model_dir() -> str:
    from replicas.model_prep import ensure_default_model

    return str(ensure_default_model())


def build_app(
    model_dir: str, step_s: float, max_num_seqs: int, stream_batching_interval_ms: float | None
) -> Any:
    """The app ``build_openai_app`` builds for one model, on the null engine."""
    from ray.serve.llm import LLMConfig, build_openai_app

    # By reference (importable in the replicas), also when this file runs as __main__.
    from experiments.ceiling.rayllm import NullEngineLLMServer as server_cls

    experimental: dict[str, Any] = {STEP_S_KEY: step_s}
    if stream_batching_interval_ms is not None:  # else Ray's default (50 ms)
        experimental["stream_batching_interval_ms"] = stream_batching_interval_ms
    llm_config = LLMConfig(
        model_loading_config={"model_id": MODEL_ID, "model_source": model_dir},
        accelerator_config={"kind": "cpu"},
        engine_kwargs={"max_num_seqs": max_num_seqs},
        server_cls=server_cls,
        experimental_configs=experimental,
    )
    return build_openai_app({"llm_configs": [llm_config]})


def _wait_ready(url: str, stop: threading.Event, timeout_s: float = 600.0) -> bool:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not stop.is_set():
        with contextlib.suppress(httpx.HTTPError):
            r = httpx.get(f"{url}/v1/models", timeout=5.0)
            if r.status_code == 200 and MODEL_ID in r.text:
                return True
        stop.wait(1.0)
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8131)
    ap.add_argument("--step-s", type=float, default=0.007)
    ap.add_argument("--max-num-seqs", type=int, default=1024)
    ap.add_argument("--model-dir", default=None, help="tokenizer/config dir (default: ours)")
    ap.add_argument("--num-cpus", type=int, default=8, help="CPUs Ray may schedule")
    ap.add_argument(
        "--stream-batching-interval-ms",
        type=float,
        default=None,
        help="LLMServer's stream batching interval (LLMConfig experimental_configs; "
        "default: Ray's, RAYLLM_MODEL_RESPONSE_BATCH_TIMEOUT_MS = 50 ms)",
    )
    args = ap.parse_args(argv)
    if args.step_s <= 0 or args.max_num_seqs < 1:
        ap.error("need --step-s > 0 and --max-num-seqs >= 1")
    model_dir = args.model_dir or default_model_dir()

    root = str(Path(__file__).resolve().parents[2])
    for name in OFF_PATH_ENV:
        os.environ.pop(name, None)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [root, *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    import ray
    from ray import serve

    ray.init(
        num_cpus=args.num_cpus,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        logging_level=logging.WARNING,
        log_to_driver=False,
    )
    # After ray.init, which installs its own SIGTERM handler (sys.exit) in the driver.
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": args.port})
        serve.run(
            build_app(model_dir, args.step_s, args.max_num_seqs, args.stream_batching_interval_ms),
            name=APP_NAME,
            route_prefix="/",
            blocking=False,
        )
        url = f"http://127.0.0.1:{args.port}"
        if not _wait_ready(url, stop):
            print("not ready", file=sys.stderr, flush=True)
            return 0 if stop.is_set() else 1
        print(f"ready {url} step_s={args.step_s} max_num_seqs={args.max_num_seqs}", flush=True)
        stop.wait()
        return 0
    finally:
        with contextlib.suppress(Exception):
            serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
