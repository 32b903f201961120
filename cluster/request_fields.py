"""How vLLM reads the request fields the ingress acts on: which field bounds the output,
and pydantic's lax forms ("16", 16.0, "true") of the integer and boolean fields. Pure (no
router or engine imports): ``cluster/request_prep.py`` and ``cluster/migration.py`` use it.
"""

from __future__ import annotations

from typing import Any

from cluster.request_checks import lax_int


def output_limit_field(path: str, body: dict[str, Any]) -> str:
    """The field that bounds a request's output, as vLLM reads it: on chat,
    ``max_completion_tokens`` whenever it is given (``max_tokens``, deprecated, is then
    ignored), else ``max_tokens``; ``max_completion_tokens`` when neither is."""
    if path == "/v1/responses":
        return "max_output_tokens"
    if path == "/v1/chat/completions" and (
        body.get("max_completion_tokens") is not None or body.get("max_tokens") is None
    ):
        return "max_completion_tokens"
    return "max_tokens"


# Fields the ingress reads, and vLLM's models accept in pydantic's lax forms ("16", 16.0,
# "true"): they are forwarded in their plain type, so the caps, the quotas, the stream
# detection and a migration see what the engine will run.
LAX_INTS = (
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "min_tokens",
    "n",
    "best_of",
    "truncate_prompt_tokens",
)
LAX_BOOLS = ("stream", "echo", "continue_final_message", "add_generation_prompt", "use_beam_search")
_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}


def lax_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        text = value.strip().lower()
        return True if text in _TRUE else False if text in _FALSE else None
    return None


def normalize_lax(body: dict[str, Any]) -> None:
    """Rewrite the fields of ``LAX_INTS`` / ``LAX_BOOLS`` that hold a lax form as their plain
    value (found by hand: ``max_tokens: "1100"`` passed a cap of 1,024, ``n: "130"`` one of
    128, and vLLM ran both)."""
    for name in LAX_INTS:
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            plain = lax_int(value)
            if plain is not None:
                body[name] = plain
    for name in LAX_BOOLS:
        value = body.get(name)
        if value is not None and not isinstance(value, bool):
            flag = lax_bool(value)
            if flag is not None:
                body[name] = flag
