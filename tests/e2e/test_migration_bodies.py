"""End to end: the bodies a migration sends are what real vLLM accepts and continues.

A replica that dies mid-stream is replaced by a continuation on another replica
(``cluster/migration.py``); the component test kills simulated replicas. Here the
continuation goes to real vLLM (CPU, SmolLM2): a greedy stream is cut after a few tokens as
if its replica had died, and the continuation built from what was streamed must be
accepted, keep the request's limits (``max_completion_tokens``, ``min_tokens``), not repeat
an echo, and go on where the stream stopped.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from cluster.migration import CHAT, COMPLETIONS, Rewriter, StreamLog, continuation, echo_prefix
from tests.serve_fixtures import TEST_URL

pytestmark = [pytest.mark.e2e]
N = 16  # output tokens of each request
CUT = 6  # events streamed before the "death"

MSGS = [{"role": "user", "content": "Write a short story about a red fox."}]
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "completion-min-tokens-echo": (
        COMPLETIONS,
        {"prompt": "The history of the printing press", "min_tokens": N, "echo": True},
    ),
    "chat-both-limits": (CHAT, {"messages": MSGS, "max_tokens": N + 30}),
    "chat-assistant-prefix-echo": (
        CHAT,
        {
            "messages": [*MSGS, {"role": "assistant", "content": "Once upon a time, a"}],
            "continue_final_message": True,
            "add_generation_prompt": False,
            "echo": True,
        },
    ),
    "chat-min-tokens": (CHAT, {"messages": MSGS, "min_tokens": N}),
}


def _stream(path: str, body: dict[str, Any]) -> tuple[int, list[bytes]]:
    events: list[bytes] = []
    with httpx.stream("POST", f"{TEST_URL}{path}", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line.encode() + b"\n\n")
    return r.status_code, events


def _text(path: str, events: list[bytes]) -> str:
    log = StreamLog(path)
    for e in events:
        log.add(e)
    log.fold()
    return log.text


def _usage(events: list[bytes]) -> dict[str, int]:
    parsed = [json.loads(e[6:]) for e in events if not e.startswith(b"data: [DONE]")]
    return [p["usage"] for p in parsed if p.get("usage")][-1]


@pytest.mark.parametrize("case", list(CASES))
def test_a_cut_stream_continues_on_vllm(vllm_app: str, case: str) -> None:
    path, extra = CASES[case]
    body: dict[str, Any] = {
        "model": vllm_app,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_completion_tokens" if path == CHAT else "max_tokens": N,
        **extra,
    }
    status, full = _stream(path, body)
    assert status == 200
    echo = echo_prefix(path, body)
    assert echo is not None
    whole = _text(path, full)
    assert whole.startswith(echo)
    assert _usage(full)["completion_tokens"] == N

    log = StreamLog(path, echo=echo)
    for e in [e for e in full if b'"content":""' not in e][:CUT]:  # skip the chat role chunk
        log.add(e)
    log.fold()
    r = httpx.post(
        f"{TEST_URL}/tokenize",
        json={"model": vllm_app, "prompt": log.generated, "add_special_tokens": False},
        timeout=30,
    )
    more_ids = r.json()["tokens"]
    cont = continuation(path, body, log, more_ids)
    assert cont is not None
    status, rest = _stream(path, cont)
    assert status == 200, rest[:1]
    rw = Rewriter(path, log, len(more_ids))
    rest = [out for out in (rw.events(e) for e in rest) if out]  # the role chunk dropped
    assert not any(b'"error"' in e for e in rest), rest[:2]
    assert rest[-1] == b"data: [DONE]\n\n"
    added = _text(path, rest)
    assert not added.startswith(echo or "\0")  # not echoed a second time
    # the request's limits hold over both parts: N tokens in all (min_tokens = max = N)
    assert _usage(rest)["completion_tokens"] == N
    # greedy: the continuation goes on where the stream stopped (the first few tokens; a
    # near tie further on may fall the other way after a prefill instead of a decode)
    merged = log.generated + added
    want = whole[len(echo) :]
    assert merged[: len(log.generated) + 12] == want[: len(log.generated) + 12], (merged, want)
