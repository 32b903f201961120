"""Build an engine from the plain dict a replica is deployed with (picklable, no pydantic)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from replicas.engine import Engine


def light_detokenizer(model_dir: str) -> Callable[[list[int]], str] | None:
    """Decode with the Rust ``tokenizers`` library only (no transformers import): cheap enough
    for dozens of simulated replicas on one machine."""
    path = Path(model_dir) / "tokenizer.json"
    if not path.exists():
        return None
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    return lambda ids: tok.decode(ids, skip_special_tokens=True)


def build_engine(spec: dict[str, Any]) -> Engine:
    from replicas.faults import wrap

    return wrap(_build(spec), spec.get("faults"))


def _build(spec: dict[str, Any]) -> Engine:
    kind = spec.get("type", "vllm")
    settings = dict(spec["settings"])
    if kind == "vllm":
        from replicas.vllm_engine import VLLMEngine
        from replicas.vllm_settings import VLLMSettings

        return VLLMEngine(VLLMSettings(**settings))
    if kind == "sim":
        from replicas.sim.engine import SimEngine

        tok_path = settings.pop("tokenizer_path", None)
        if tok_path:
            settings["detokenize"] = light_detokenizer(tok_path)
        return SimEngine(**settings)
    if kind == "null":
        from replicas.null_engine import NullEngine

        return NullEngine(**settings)
    raise ValueError(f"unknown engine type {kind!r}")
