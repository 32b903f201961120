"""Build an engine from the plain dict a replica is deployed with (picklable, no pydantic)."""

from __future__ import annotations

from typing import Any

from replicas.engine import Engine


def build_engine(spec: dict[str, Any]) -> Engine:
    kind = spec.get("type", "vllm")
    if kind == "vllm":
        from replicas.vllm_engine import VLLMEngine, VLLMSettings

        return VLLMEngine(VLLMSettings(**spec["settings"]))
    if kind == "sim":
        from replicas.sim.engine import SimEngine

        return SimEngine(**spec["settings"])
    raise ValueError(f"unknown engine type {kind!r}")
