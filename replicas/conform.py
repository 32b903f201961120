"""Make vLLM's OpenAI responses conform to OpenAI's published schema (``openai-openapi``).

What the pinned vLLM sends that the schema does not allow, and what we send instead:
- ``"key": null`` for properties the schema types without ``null`` — in a chat message
  (``annotations``, ``audio``, ``function_call``, ``tool_calls``), in a choice
  (``stop_reason`` is vLLM's own, kept), in ``usage`` (``prompt_tokens_details``,
  ``completion_tokens_details``): the key is dropped, as OpenAI omits it.
- a chat message without ``refusal`` (required, nullable): ``"refusal": null`` is added.
- an error ``code`` that is an integer (vLLM puts the HTTP status there): a string code
  from the status and message (``context_length_exceeded``, ``invalid_value``,
  ``model_not_found``, ``not_found``, ``internal_error``), as OpenAI's errors carry.
Everything else passes unchanged. Streamed events are bytes we do not parse, except an
error event (``data: {"error"``), which is rewritten the same way.
"""

from __future__ import annotations

import json
from typing import Any

_MESSAGE_NOT_NULL = ("annotations", "audio", "function_call", "tool_calls", "name")
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


def conform_error(err: dict[str, Any], status: int) -> dict[str, Any]:
    out = {
        "message": str(err.get("message", "")),
        "type": str(
            err.get("type") or ("server_error" if status >= 500 else "invalid_request_error")
        ),
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
    for choice in obj.get("choices") or ():
        msg = choice.get("message")
        if isinstance(msg, dict):
            _drop_nulls(msg, _MESSAGE_NOT_NULL)
            if msg.get("tool_calls") == []:
                del msg["tool_calls"]
            msg.setdefault("refusal", None)
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


def conform_sse(data: bytes) -> bytes:
    if b'data: {"error"' not in data:
        return data
    out = []
    for event in data.split(b"\n\n"):
        if event.startswith(b'data: {"error"'):
            try:
                obj = json.loads(event[6:])
                code = obj["error"].get("code")
                status = code if isinstance(code, int) else 500
                event = b"data: " + json.dumps(conform_obj(obj, status)).encode()
            except ValueError:
                pass
        out.append(event)
    return b"\n\n".join(out)
