"""Paths of the public traces the studies replay (the repository's own copy, ``data/traces``)."""

from pathlib import Path

TRACE_DIR = Path(__file__).resolve().parents[1] / "data" / "traces"
MOONCAKE_TRACE = TRACE_DIR / "mooncake_synthetic.jsonl"
AZURE_TRACE = TRACE_DIR / "azure_llm_2023_code.csv"
