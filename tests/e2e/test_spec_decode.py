"""End to end: speculative decoding (n-gram prompt lookup) passed through
``engine.vllm.engine_args``, served on CPU by the real vLLM engine through ``llmfleet up``.

The speculative fleet runs as its own ``llmfleet up`` (its own Ray cluster and port, so the
package's shared app keeps its config); the same requests to the shared app, which runs
without speculation, give the reference. Greedy output must match token for token, and
vLLM's own counters (exported through Ray) must show accepted drafts.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from experiments import serverproc
from tests.serve_fixtures import TEST_URL

pytestmark = [pytest.mark.e2e]

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
PORT, METRICS_PORT = 8141, 18141
URL = f"http://127.0.0.1:{PORT}"
# Answers that repeat text (from the prompt or their own), so prompt-lookup drafts get
# accepted. No ignore_eos: past the end of an answer the model picks among near-ties, where
# verifying several tokens in one bf16 step can flip one (docs/serving.md).
PROMPTS = [
    "Write the numbers from one to thirty in words, separated by commas.",
    "Copy this list twice: apples, oranges, pears, plums, grapes, cherries, lemons, limes.",
    "Repeat this text exactly, twice:\nThe committee met on Monday to discuss the budget for"
    " the new library, the repairs to the old bridge, and the plans for the summer festival.",
]


@pytest.fixture(scope="module")
def spec_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work: Path = tmp_path_factory.mktemp("spec-decode")
    cfg = {
        "server": {"port": PORT, "metrics_export_port": METRICS_PORT},
        "replicas": {"num_replicas": 1},
        "engine": {"vllm": {"kv_cache_gib": 0.5, "engine_args": {"speculative_config": SPEC}}},
    }
    (work / "spec.yaml").write_text(yaml.safe_dump(cfg))
    log = work / "llmfleet.log"
    proc = serverproc.start_llmfleet(work / "spec.yaml", work / "home", log)
    try:
        try:
            serverproc.wait_http(f"{URL}/health", proc, timeout_s=480)
        except (RuntimeError, TimeoutError) as err:
            raise AssertionError(f"{err}\n{log.read_text()[-4000:]}") from None
        yield URL
    finally:
        serverproc.stop(proc)


def _greedy(url: str, prompt: str, model: str) -> tuple[str, int]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 64,
        "temperature": 0,
    }
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    out = r.json()
    return out["choices"][0]["message"]["content"], out["usage"]["completion_tokens"]


def _spec_counters(timeout_s: float = 45.0) -> dict[str, float]:
    """vLLM's spec-decode counters from the fleet's Ray metrics port (exported ~10 s late)."""
    deadline = time.monotonic() + timeout_s
    counters: dict[str, float] = {}
    while time.monotonic() < deadline:
        text = httpx.get(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10).text
        for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
            pat = rf"^\S*spec_decode_{name}(?:_total)?(?:\{{[^}}]*\}})? (\S+)$"
            values = [float(v) for v in re.findall(pat, text, re.MULTILINE)]
            if values:
                counters[name] = sum(values)
        if counters.get("num_accepted_tokens", 0) > 0:
            return counters
        time.sleep(2.0)
    return counters


def test_ngram_speculation_keeps_greedy_output_and_accepts_drafts(
    spec_url: str, vllm_app: str
) -> None:
    lengths = []
    for prompt in PROMPTS:
        reference = _greedy(TEST_URL, prompt, vllm_app)
        assert _greedy(spec_url, prompt, vllm_app) == reference
        lengths.append(reference[1])
    assert max(lengths) == 64, lengths  # one answer compared over all 64 tokens
    assert min(lengths) >= 16, lengths
    counters = _spec_counters()
    assert counters.get("num_draft_tokens", 0) > 0, counters
    assert 0 < counters["num_accepted_tokens"] <= counters["num_draft_tokens"], counters
