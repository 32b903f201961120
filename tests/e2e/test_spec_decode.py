"""End to end: speculative decoding (n-gram prompt lookup) passed through
``engine.vllm.engine_args``, served on CPU by the real vLLM engine through ``llmfleet up``.

The speculative fleet runs as its own ``llmfleet up`` (its own Ray cluster and port, so the
package's shared app keeps its config); the same requests to the shared app, which runs
without speculation, give the reference. Greedy output must match token for token wherever
the model is decisive: up to the first token whose two likeliest choices in the reference
are closer than ``NEAR_TIE`` (log-probability). The weights are bf16: a logit between 16
and 32 moves in steps of 0.125, so two computations of the same step (another kernel shape,
a verification step of several tokens) can swap tokens closer than about two steps. Found
in the suite: the chat prompt "Copy this list twice: ..." began with "The" in the reference
and "I" with speculation; vLLM gave them log-probabilities -2.845 and -2.970. vLLM's own
counters (exported through Ray) must show accepted drafts.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from experiments import serverproc
from tests.serve_fixtures import TEST_URL

pytestmark = [pytest.mark.e2e]

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
PORT, METRICS_PORT = 8141, 18141
URL = f"http://127.0.0.1:{PORT}"
# Text that continues what it repeats, so prompt-lookup drafts get accepted. The count is
# decisive all the way (the two likeliest tokens at least 1.75 apart here, 64 tokens); the
# others have near-ties, where the comparison stops.
COMMITTEE = (
    "The committee met on Monday to discuss the budget for the new library, the repairs to"
    " the old bridge, and the plans for the summer festival.\n"
)
PROMPTS = [
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
    COMMITTEE * 2 + "The committee",
    "one, two, three, four, five, six, seven, eight, nine, ten,",
]
MAX_TOKENS = 64
NEAR_TIE = 0.5  # log-probability: about four bf16 steps of a logit between 16 and 32


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


def _greedy(url: str, prompt: str, model: str, top: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
    }
    if top:
        body["logprobs"] = top
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return dict(r.json()["choices"][0])


def decisive_prefix(choice: dict[str, Any], near_tie: float = NEAR_TIE) -> str:
    """The answer's text up to its first token whose two likeliest choices were closer than
    ``near_tie`` (the whole text when there is none)."""
    lp = choice["logprobs"]
    out = []
    for token, top in zip(lp["tokens"], lp["top_logprobs"], strict=True):
        best = sorted(top.values(), reverse=True)
        if len(best) > 1 and best[0] - best[1] < near_tie:
            break
        out.append(token)
    return "".join(out)


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
    whole = []
    for prompt in PROMPTS:
        reference = _greedy(TEST_URL, prompt, vllm_app, top=2)
        answer = _greedy(spec_url, prompt, vllm_app)["text"]
        same = decisive_prefix(reference)
        assert answer.startswith(same), (prompt, same, answer)
        whole.append(same == reference["text"])
        if whole[-1]:  # decisive all the way: the whole answer, all MAX_TOKENS of it
            assert answer == reference["text"], (prompt, reference["text"], answer)
    assert whole[0], "the count (' 13, 14, ... 28,') was not compared over all its tokens"
    counters = _spec_counters()
    assert counters.get("num_draft_tokens", 0) > 0, counters
    assert 0 < counters["num_accepted_tokens"] <= counters["num_draft_tokens"], counters


def test_the_comparison_stops_at_the_first_near_tie() -> None:
    def choice(margins: list[float]) -> dict[str, Any]:
        tokens = [f"t{i}" for i in range(len(margins))]
        tops = [{t: -1.0, "other": -1.0 - m} for t, m in zip(tokens, margins, strict=True)]
        return {"logprobs": {"tokens": tokens, "top_logprobs": tops}}

    assert decisive_prefix(choice([2.0, 1.0, 0.6])) == "t0t1t2"
    assert decisive_prefix(choice([2.0, 0.125, 3.0])) == "t0"  # the "The" / "I" case
    assert decisive_prefix(choice([0.0])) == ""
    assert decisive_prefix({"logprobs": {"tokens": ["a"], "top_logprobs": [{"a": -0.1}]}}) == "a"
