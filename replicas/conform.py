"""Make vLLM's OpenAI responses conform to OpenAI's published schema (``openai-openapi``).

What the pinned vLLM sends that the schema does not allow, and what we send instead:
- ``"key": null`` for properties the schema types without ``null`` — at the top
  (``system_fingerprint``), in a chat message
  (``annotations``, ``audio``, ``function_call``, ``tool_calls``), in a choice
  (``stop_reason`` is vLLM's own, kept), in ``usage`` (``prompt_tokens_details``,
  ``completion_tokens_details``): the key is dropped, as OpenAI omits it.
- a chat message, or a chat choice's ``logprobs``, without ``refusal`` (required,
  nullable): ``"refusal": null`` is added.
- an error ``type`` that is a Python exception name (``BadRequestError``): OpenAI's type
  for the status (``invalid_request_error``, ``authentication_error``,
  ``permission_error``, ``not_found_error``, ``rate_limit_error``, ``server_error``).
- an error ``code`` that is an integer (vLLM puts the HTTP status there): a string code
  from the status and message (``context_length_exceeded``, ``invalid_value``,
  ``model_not_found``, ``not_found``, ``internal_error``), as OpenAI's errors carry.
- an error message naming a ``vllm serve`` flag the client's operator cannot pass to
  llmfleet (found by hand: tools with ``tool_choice`` auto answered "requires
  --enable-auto-tool-choice and --tool-call-parser to be set"): the config key instead.
Everything else passes unchanged. Streamed events are bytes we do not parse, except an
error event (``data: {"error"``) and a chat chunk carrying logprobs, which are rewritten the
same way (only requests that asked for logprobs pay for the parse).
"""

from __future__ import annotations

import json
from typing import Any

_MESSAGE_NOT_NULL = ("annotations", "audio", "function_call", "tool_calls", "name")
_TOP_NOT_NULL = ("system_fingerprint",)
_USAGE_NOT_NULL = ("prompt_tokens_details", "completion_tokens_details")


def error_code(status: int, message: str) -> str:
    text = message.lower()
    if "maximum context length" in text or "context length" in text:
        return "context_length_exceeded"
    if status == 404:
        return "model_not_found" if "model" in text else "not_found"
    if status >= 500:
        return "internal_error"
    if "field required" in text or "missing" in text:
        return "missing_required_parameter"
    return "invalid_value"


_OPENAI_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
}
_KNOWN_TYPES = {*_OPENAI_TYPES.values(), "invalid_request_error", "server_error"}


def error_type(status: int, given: object) -> str:
    if isinstance(given, str) and given in _KNOWN_TYPES:
        return given
    if status >= 500:
        return "server_error"
    return _OPENAI_TYPES.get(status, "invalid_request_error")


# vLLM's phrase → ours (the longer phrase first: it contains the shorter one)
_FLAGS_TO_CONFIG = (
    ("--enable-auto-tool-choice and --tool-call-parser to be set", "model.tool_call_parser"),
    ("--tool-call-parser to be set", "model.tool_call_parser"),
)


def config_names(message: str) -> str:
    for phrase, key in _FLAGS_TO_CONFIG:
        if phrase in message:
            return message.replace(
                phrase, f"a tool-call parser, and this server has none (its operator sets {key})"
            )
    return message


def conform_error(err: dict[str, Any], status: int) -> dict[str, Any]:
    out = {
        "message": config_names(str(err.get("message", ""))),
        "type": error_type(status, err.get("type")),
        "param": err.get("param"),
        "code": err.get("code"),
    }
    if not isinstance(out["code"], str):
        out["code"] = error_code(status, str(out["message"]))
    if out["param"] is not None and not isinstance(out["param"], str):
        out["param"] = str(out["param"])
    return out


def _drop_nulls(d: dict[str, Any], keys: tuple[str, ...]) -> None:
    for k in keys:
        if k in d and d[k] is None:
            del d[k]


def conform_obj(obj: dict[str, Any], status: int) -> dict[str, Any]:
    if isinstance(obj.get("error"), dict):
        return {"error": conform_error(obj["error"], status)}
    _drop_nulls(obj, _TOP_NOT_NULL)
    for choice in obj.get("choices") or ():
        msg = choice.get("message")
        if isinstance(msg, dict):
            _drop_nulls(msg, _MESSAGE_NOT_NULL)
            if msg.get("tool_calls") == []:
                del msg["tool_calls"]
            msg.setdefault("refusal", None)
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict) and "content" in logprobs:
            logprobs.setdefault("refusal", None)
    usage = obj.get("usage")
    if isinstance(usage, dict):
        _drop_nulls(usage, _USAGE_NOT_NULL)
    return obj


def conform_json_body(body: bytes, status: int) -> bytes:
    if not body:
        if status < 400:
            return body
        return json.dumps(
            {"error": conform_error({"message": "empty response from the engine"}, status)}
        ).encode()
    try:
        obj = json.loads(body)
    except ValueError:
        return body
    if not isinstance(obj, dict):
        return body
    return json.dumps(conform_obj(obj, status), separators=(",", ":")).encode()


_NEEDS_PARSE = (b'data: {"error"', b'"logprobs":{"content":')


def conform_sse(data: bytes) -> bytes:
    if not any(marker in data for marker in _NEEDS_PARSE):
        return data
    out = []
    for event in data.split(b"\n\n"):
        if event.startswith(b"data: {") and any(m in event for m in _NEEDS_PARSE):
            try:
                obj = json.loads(event[6:])
            except ValueError:
                out.append(event)
                continue
            err = obj.get("error") if isinstance(obj, dict) else None
            code = err.get("code") if isinstance(err, dict) else None
            status = code if isinstance(code, int) else (500 if err else 200)
            event = b"data: " + json.dumps(conform_obj(obj, status), separators=(",", ":")).encode()
        out.append(event)
    return b"\n\n".join(out)
