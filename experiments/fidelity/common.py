"""What both parts of the fidelity study share: the repository root, the request set, a
scratch folder."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from bench.datasets import build_requests
from bench.tokens import TokenSource

ROOT = Path(__file__).resolve().parents[2]


def same_specs(tokenizer: Any, n: int, input_len: int, output_len: int) -> tuple[list, list[str]]:
    """The shared request set: our specs and their prompt texts (exact token counts)."""
    specs = build_requests(
        f"random:input={input_len},output={output_len}", tokenizer=tokenizer, num_requests=n
    )
    src = TokenSource(tokenizer)
    return specs, [src.text(s.prompt_token_ids) for s in specs]


def tmpdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="llmfleet-fidelity-"))
