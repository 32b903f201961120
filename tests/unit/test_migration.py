"""Migration: the stream log, the continuation body and the rewritten events."""

from __future__ import annotations

import json

from cluster.migration import CHAT, COMPLETIONS, Rewriter, StreamLog, continuation, migratable


def _ev(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _chat_chunk(content: str | None, finish: str | None = None, role: bool = False) -> bytes:
    delta: dict[str, object] = {"content": content}
    if role:
        delta["role"] = "assistant"
    return _ev(
        {
            "id": "chatcmpl-a",
            "object": "chat.completion.chunk",
            "created": 7,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def test_only_single_plain_streams_migrate() -> None:
    msgs = [{"role": "user", "content": "hi"}]
    assert migratable(CHAT, {"stream": True, "messages": msgs})
    assert not migratable(CHAT, {"stream": False, "messages": msgs})
    assert not migratable(CHAT, {"stream": True, "messages": msgs, "n": 2})
    assert not migratable(CHAT, {"stream": True, "messages": msgs, "tools": [{}]})
    assert not migratable(
        CHAT, {"stream": True, "messages": msgs, "response_format": {"type": "json_object"}}
    )
    assert migratable(COMPLETIONS, {"stream": True, "prompt": "x"})
    assert migratable(COMPLETIONS, {"stream": True, "prompt": [1, 2]})
    assert not migratable(COMPLETIONS, {"stream": True, "prompt": ["a", "b"]})


def test_log_folds_text_and_state() -> None:
    log = StreamLog(CHAT)
    log.add(_chat_chunk("", role=True) + _chat_chunk("Hel"))
    log.add(_chat_chunk("lo"))
    log.fold()
    assert (log.text, log.id, log.created, log.finished, log.done) == (
        "Hello",
        "chatcmpl-a",
        7,
        False,
        False,
    )
    log.add(_chat_chunk(None, "stop") + b"data: [DONE]\n\n")
    log.fold()
    assert log.finished
    assert log.done


def test_chat_continuation_appends_the_assistant_text() -> None:
    log = StreamLog(CHAT)
    log.text = "Once upon"
    body = {"messages": [{"role": "user", "content": "story"}], "max_tokens": 10, "stream": True}
    out = continuation(CHAT, body, log, [1, 2, 3])
    assert out is not None
    assert out["messages"][-1] == {"role": "assistant", "content": "Once upon"}
    assert out["continue_final_message"] is True
    assert out["add_generation_prompt"] is False
    assert out["max_tokens"] == 7
    assert body["messages"] == [{"role": "user", "content": "story"}]  # original untouched


def test_completion_continuation_extends_text_or_ids() -> None:
    log = StreamLog(COMPLETIONS)
    log.text = " there"
    out = continuation(COMPLETIONS, {"prompt": "hi", "max_tokens": 5, "echo": True}, log, [9])
    assert out == {"prompt": "hi there", "max_tokens": 4, "echo": False}
    out = continuation(COMPLETIONS, {"prompt": [1, 2], "max_tokens": 5}, log, [9])
    assert out is not None
    assert out["prompt"] == [1, 2, 9]
    assert continuation(COMPLETIONS, {"prompt": "hi", "max_tokens": 1}, log, [9]) is None


def test_rewriter_keeps_one_stream_identity() -> None:
    log = StreamLog(CHAT)
    log.add(_chat_chunk("a"))
    log.fold()
    rw = Rewriter(CHAT, log, emitted_tokens=4)
    other = {
        "id": "chatcmpl-b",
        "created": 9,
        "model": "m",
        "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
        ],
    }
    assert rw.events(_ev(other)) == b""  # the continuation's role chunk is dropped
    text = {**other, "choices": [{"index": 0, "delta": {"content": "b"}, "finish_reason": None}]}
    out = json.loads(rw.events(_ev(text))[6:])
    assert (out["id"], out["created"]) == ("chatcmpl-a", 7)
    usage = {
        **other,
        "choices": [],
        "usage": {"prompt_tokens": 14, "completion_tokens": 6, "total_tokens": 20},
    }
    out = json.loads(rw.events(_ev(usage))[6:])
    assert out["usage"] == {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}
    assert rw.events(b"data: [DONE]\n\n") == b"data: [DONE]\n\n"


def test_closing_events_finish_and_usage_when_the_replica_died_at_the_end() -> None:
    from cluster.migration import closing_events

    log = StreamLog(CHAT)
    log.add(_chat_chunk("all of it", "length"))
    log.fold()
    body = {"stream": True, "stream_options": {"include_usage": True}}
    out = closing_events(CHAT, body, log, prompt_tokens=5, emitted=3)
    events = [e for e in out.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    usage = json.loads(events[0][6:])
    assert usage["id"] == "chatcmpl-a"
    assert usage["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    # no budget left and no finish streamed yet: a finish chunk first, no usage unasked
    log2 = StreamLog(COMPLETIONS)
    out2 = closing_events(COMPLETIONS, {"stream": True}, log2, 5, 3)
    first = json.loads(out2.split(b"\n\n")[0][6:])
    assert first["choices"][0]["finish_reason"] == "length"
    assert out2.endswith(b"data: [DONE]\n\n")
