"""Checks on a request body that the replica's OpenAI layer (vLLM's) would crash on.

vLLM validates a body with its pydantic request models, but a few of their ``before``
validators use a field before checking its type; a wrongly typed value then raises a plain
``AttributeError`` or ``TypeError`` instead of a validation error, the app answers nothing,
and the client gets a 500. Each check below refuses one such shape with the 400 vLLM gives
for its other type errors (``invalid_request_error``, ``code="invalid_value"``, ``param``
naming the field). Valid bodies pass untouched; everything else stays vLLM's to judge.

Found by fuzzing (``tests/e2e/test_fuzz.py``) against vLLM 0.32:
- ``structured_outputs`` not an object (chat, completions): ``check_structured_outputs_count``
  calls ``.get`` on it.
- a chat message's ``tool_calls`` neither an array nor null (a number, a boolean):
  ``ChatCompletionRequest``'s message normaliser calls ``list()`` on it.

A check lives here only while the pinned vLLM misses it: each names the vLLM code it covers,
so an upgrade can drop it once the fuzz test passes without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contracts.http import APIError

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def _invalid(param: str, message: str) -> APIError:
    return APIError(400, f"{param}: {message}", param=param, code="invalid_value")


def structured_outputs_is_object(body: dict[str, Any]) -> None:
    value = body.get("structured_outputs")
    if value is not None and not isinstance(value, dict):
        raise _invalid("structured_outputs", "must be an object or null")


def message_tool_calls_are_arrays(body: dict[str, Any]) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    for i, msg in enumerate(messages):
        if isinstance(msg, dict):
            calls = msg.get("tool_calls")
            if calls is not None and not isinstance(calls, list):
                raise _invalid(f"messages[{i}].tool_calls", "must be an array or null")


CHECKS: dict[str, tuple[Callable[[dict[str, Any]], None], ...]] = {
    CHAT: (structured_outputs_is_object, message_tool_calls_are_arrays),
    COMPLETIONS: (structured_outputs_is_object,),
}


def check_body(path: str, body: dict[str, Any]) -> None:
    """Raise ``APIError(400)`` for a body shape the replica's OpenAI layer crashes on."""
    for check in CHECKS.get(path, ()):
        check(body)
