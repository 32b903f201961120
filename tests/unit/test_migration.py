"""Migration: the stream log, the continuation body and the rewritten events."""

from __future__ import annotations

import json

import pytest

from cluster.migration import (
    CHAT,
    COMPLETIONS,
    RESUME_FIELD,
    Rewriter,
    StreamLog,
    continuation,
    echo_prefix,
    migratable,
    resume_plan,
    take_resume,
)
from contracts.http import APIError


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
    assert "echo" not in out  # not added: the simulated engine's chat model forbids it
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


def test_continuation_keeps_what_was_asked_of_the_whole_output() -> None:
    """Found by hand against vLLM 0.32: ``min_tokens`` left as it was made the continuation
    a 400 (above its shrunk ``max_tokens``); with both output limits given, vLLM reads
    ``max_completion_tokens``, so that is the one to shrink; an echoed prefix is not output."""
    log = StreamLog(COMPLETIONS)
    log.text = " there"
    body = {"prompt": "hi", "max_tokens": 10, "min_tokens": 10, "ignore_eos": True}
    out = continuation(COMPLETIONS, body, log, [7, 8])
    assert out is not None
    assert (out["max_tokens"], out["min_tokens"]) == (8, 8)
    msgs = [{"role": "user", "content": "x"}]
    chat = {"messages": msgs, "max_tokens": 50, "max_completion_tokens": 10, "echo": True}
    out = continuation(CHAT, chat, StreamLog(CHAT, text="ab"), [1, 2])
    assert out is not None
    assert (out["max_tokens"], out["max_completion_tokens"], out["echo"]) == (50, 8, False)
    assert continuation(CHAT, {**chat, "max_completion_tokens": 2}, StreamLog(CHAT), [1, 2]) is None


def test_an_assistant_prefix_is_extended_not_repeated() -> None:
    msgs = [{"role": "user", "content": "poem"}, {"role": "assistant", "content": "Roses are"}]
    body = {"messages": msgs, "continue_final_message": True, "add_generation_prompt": False,
            "stream": True, "max_tokens": 9}  # fmt: skip
    assert migratable(CHAT, body)
    out = continuation(CHAT, body, StreamLog(CHAT, text=" red"), [1])
    assert out is not None
    assert out["messages"] == [msgs[0], {"role": "assistant", "content": "Roses are red"}]
    parts = [msgs[0], {"role": "assistant", "content": [{"type": "text", "text": "Roses"}]}]
    assert not migratable(CHAT, {**body, "messages": parts})


def test_an_echoed_prefix_is_left_out_of_the_output() -> None:
    """vLLM streams the echo joined to the first token ("The sky is a"), and a chat echo as
    content: migrating it as output would repeat the prompt inside the prompt."""
    body = {"prompt": "The sky is", "echo": True, "stream": True, "max_tokens": 5}
    assert echo_prefix(COMPLETIONS, body) == "The sky is"
    log = StreamLog(COMPLETIONS, echo="The sky is")
    log.add(_ev({"id": "c", "choices": [{"index": 0, "text": "The sky is a"}]}))
    log.add(_ev({"id": "c", "choices": [{"index": 0, "text": " canvas"}]}))
    log.fold()
    assert log.generated == " a canvas"
    out = continuation(COMPLETIONS, body, log, [1, 2])
    assert out is not None
    assert (out["prompt"], out["echo"]) == ("The sky is a canvas", False)
    assert not migratable(COMPLETIONS, {**body, "prompt": [1, 2]})  # echo of ids: not known
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}]
    chat = {"messages": msgs, "echo": True, "stream": True, "continue_final_message": True}
    assert echo_prefix(CHAT, chat) == "Hello"
    assert echo_prefix(CHAT, {**chat, "messages": msgs[:1]}) == ""  # not the answer's role
    assert migratable(CHAT, chat)
    assert not migratable(CHAT, {**chat, "use_beam_search": True})


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


def test_continuations_are_valid_for_the_simulated_engine() -> None:
    """The simulated engine's request models forbid fields they do not know (chat has no
    ``echo``): a continuation must not add one. Found by the component kill test, after
    ``echo: false`` was added to every continuation."""
    from replicas.openai_lite.protocol import ChatRequest, CompletionRequest, validate

    msgs = [{"role": "user", "content": "story"}]
    common = {"model": "m", "stream": True, "max_tokens": 10, "ignore_eos": True}
    chat = continuation(CHAT, {**common, "messages": msgs}, StreamLog(CHAT, text="Once"), [1])
    validate(ChatRequest, chat)
    done = continuation(COMPLETIONS, {**common, "prompt": "a"}, StreamLog(COMPLETIONS), [1])
    validate(CompletionRequest, done)


def _mark(text: str, finished: bool = False) -> dict[str, object]:
    return {"text": text, "id": "c-1", "created": 5, "model": "m", "finished": finished,
            "usage_seen": False}  # fmt: skip


def test_a_resume_field_is_taken_out_of_the_body_and_checked() -> None:
    body = {"model": "m", "prompt": "p", "stream": True, RESUME_FIELD: _mark("ab")}
    raw, mark = take_resume(json.dumps(body).encode())
    assert json.loads(raw) == {"model": "m", "prompt": "p", "stream": True}
    assert mark == _mark("ab")
    assert take_resume(b"not json") == (b"not json", None)
    assert take_resume(b'{"prompt": "p"}') == (b'{"prompt": "p"}', None)
    with pytest.raises(APIError) as err:
        take_resume(json.dumps({RESUME_FIELD: {**_mark("a"), "created": "x"}}).encode())
    assert err.value.status == 400
    assert err.value.param == RESUME_FIELD


def test_a_resumed_stream_continues_after_the_text_the_client_has() -> None:
    encode = lambda text: [ord(c) for c in text]  # noqa: E731
    body = {"model": "m", "messages": [{"role": "user", "content": "q"}], "stream": True,
            "max_tokens": 10}  # fmt: skip
    plan = resume_plan(CHAT, body, _mark("abc"), encode)
    assert plan.more_ids == [97, 98, 99]
    assert plan.body is not None
    assert plan.body["max_tokens"] == 7
    assert plan.body["messages"][-1]["content"] == "abc"
    assert (plan.log.id, plan.log.created, plan.log.generated) == ("c-1", 5, "abc")
    # cut before any output: run as asked; finished: only the stream's close is left
    assert resume_plan(CHAT, body, _mark(""), encode).body == body
    assert resume_plan(CHAT, body, _mark("abc", finished=True), encode).body is None
    assert resume_plan(CHAT, body, _mark("a" * 10), encode).body is None  # no budget left
    with pytest.raises(APIError):
        resume_plan(CHAT, {**body, "n": 2}, _mark("abc"), encode)
