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
- an integer parameter beyond 64 bits (``stream_interval``, ``top_k``, ``priority``,
  ``stop_token_ids``' items, ...): the request models bound few of them above, so the value
  reaches ``SamplingParams``, and the engine client's msgpack encoder
  (``vllm.v1.serial_utils.MsgpackEncoder``) raises ``OverflowError``: the stream ends with
  "generation failed". Checked on every top-level field, alone or as a list of integers,
  and on the integer fields' numeric strings, which vLLM reads as integers (found by hand:
  ``top_k: "100000000000000000000000"`` was a 500).

A check lives here only while the pinned vLLM misses it: each names the vLLM code it covers,
so an upgrade can drop it once the fuzz test passes without it.

One fleet rule lives here too, for ``/v1/responses``: llmfleet stores no responses (vLLM's
store is one replica's memory, off by default, and a fleet would lose it with the replica),
so ``previous_response_id`` and ``background`` are refused for what they are. Found by
hand with the OpenAI SDK: ``previous_response_id`` of a response this server had just
returned got 404 "Response with id … not found", and ``background`` a 400 naming vLLM's
``VLLM_ENABLE_RESPONSES_API_STORE`` variable, which llmfleet's operators do not set.
"""

from __future__ import annotations

import re
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


INT64 = (-(2**63), 2**63 - 1)
# The integer fields of vLLM 0.32's chat and completion request models (a unit test derives
# them from vLLM's pydantic models): a string there is read as an integer (lax mode)
INT_FIELDS = frozenset(
    {
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "min_tokens",
        "n",
        "priority",
        "prompt_logprobs",
        "routed_experts_prompt_start",
        "seed",
        "stream_interval",
        "thinking_token_budget",
        "top_k",
        "top_logprobs",
        "truncate_prompt_tokens",
    }
)
_INT_TEXT = re.compile(r"([+-]?[0-9](?:_?[0-9])*)(?:\.0*)?")


def lax_int(value: Any) -> int | None:
    """``value`` as pydantic's lax mode reads an integer: a bool, an integral float, or a
    string of ASCII digits (sign, ``_`` between digits, a ``.0`` tail, spaces around);
    None when it is not one (the engine refuses it)."""
    if isinstance(value, bool | int):
        return int(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        m = _INT_TEXT.fullmatch(value.strip())
        return int(m.group(1).replace("_", "")) if m else None
    return None


def integers_fit_64_bits(body: dict[str, Any]) -> None:
    for key, value in body.items():
        items = value if isinstance(value, list) else [value]
        for item in items:
            if type(item) is str and key in INT_FIELDS:  # "1e24" as vLLM reads it
                item = lax_int(item)
            if type(item) is int and not INT64[0] <= item <= INT64[1]:  # bool is not checked
                raise _invalid(key, "must be an integer that fits in 64 bits")


NOT_STORED = "this server stores no responses (each is answered once and forgotten)"


def responses_are_not_stored(body: dict[str, Any]) -> None:
    if body.get("previous_response_id") is not None:
        raise APIError(
            400,
            f"previous_response_id: {NOT_STORED}; send the earlier turns in `input` instead",
            param="previous_response_id",
            code="invalid_value",
        )
    if body.get("background") not in (None, False):
        raise APIError(
            400,
            f"background: {NOT_STORED}, so a response cannot run in the background; "
            "stream it instead",
            param="background",
            code="invalid_value",
        )


CHECKS: dict[str, tuple[Callable[[dict[str, Any]], None], ...]] = {
    CHAT: (structured_outputs_is_object, message_tool_calls_are_arrays, integers_fit_64_bits),
    COMPLETIONS: (structured_outputs_is_object, integers_fit_64_bits),
    "/v1/responses": (responses_are_not_stored,),
}


def check_body(path: str, body: dict[str, Any]) -> None:
    """Raise ``APIError(400)`` for a body shape the replica's OpenAI layer crashes on."""
    for check in CHECKS.get(path, ()):
        check(body)
