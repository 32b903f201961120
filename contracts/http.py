"""The ingress → replica HTTP hop: one forwarded request in, one response stream out.

::

    client ─HTTP─► ingress ──ForwardedRequest──► replica (OpenAI layer + engine)
           ◄─HTTP─        ◄── ResponseHead, bytes, bytes, … ──

Contract
- The ingress forwards the client's JSON body unchanged except for the fields it owns
  (``max_tokens`` default, see ``cluster/request_prep.py``); the replica's OpenAI layer
  (vLLM's own, or ``replicas/openai_lite`` for the simulated and null engines) validates
  it and answers exactly as that layer would.
- The replica's stream yields ``Accepted`` first, the moment the replica takes the request
  (the ingress's admission deadline and its retry/migration bookkeeping key on it), then
  one ``ResponseHead``, then the body as ``bytes`` items. For ``text/event-stream`` each item is one or more whole SSE events, already
  encoded: the relays pass them on without parsing. Whatever the engine produced while a
  relay was busy is coalesced into one item, so a slow hop carries fewer, larger objects.
- Errors are OpenAI-shaped (``api_error_body``): ``{"error": {message, type, param,
  code}}`` with a string (or null) ``code``; a 4xx for the client's mistakes.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

SSE = "text/event-stream"
JSON = "application/json"


@dataclass(frozen=True, slots=True)
class ForwardedRequest:
    path: str  # e.g. "/v1/chat/completions"
    body: bytes  # the JSON body, as forwarded
    request_id: str  # the ingress's id (logs, routing bookkeeping)
    prompt_token_ids: tuple[int, ...] = ()  # the ingress's tokenization (may be empty)
    stream: bool = False
    arrival_time: float = 0.0  # time.time() at the ingress


@dataclass(frozen=True, slots=True)
class Accepted:
    replica_id: str


@dataclass(frozen=True, slots=True)
class ResponseHead:
    status: int
    media_type: str
    replica_id: str = ""


class ReplicaFailed(RuntimeError):
    """The replica cannot finish this request but another one can (its engine stalled or
    died, it is being replaced): the ingress resends or migrates it as if the replica had
    died, avoiding ``replica_id`` (set by the replica: a request it refuses before
    accepting it carries no other trace of where it went). Kept an instance attribute: Ray
    re-raises it as a subclass that reads missing attributes from the original."""

    def __init__(self, message: str, replica_id: str = "") -> None:
        super().__init__(message)
        self.replica_id = replica_id


class APIError(Exception):
    """An OpenAI-shaped error; ``status`` is the HTTP status."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.headers = headers or {}
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return api_error_body(self.message, self.type, self.param, self.code)


def api_error_body(
    message: str, type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


MAX_JSON_DEPTH = 128  # arrays and objects inside one another (a deep JSON schema fits)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_TOO_DEEP = object()


def decode_json(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object, or a 400 ``invalid_json``: also for ``NaN`` and
    ``Infinity`` (Python's decoder accepts them, JSON does not; a NaN ``logit_bias`` reached
    the sampler and changed greedy output) and numbers too large for a float; for nesting deeper
    than ``MAX_JSON_DEPTH`` (the decoder's recursion gave a 500 from ~1,000 levels) and for
    a string holding an unpaired UTF-16 surrogate (``"\\ud800"``: JSON's escapes allow it,
    Unicode does not; the tokenizer and the engine's stop strings failed on it, the latter
    with a 500)."""
    try:
        data = json.loads(raw, parse_constant=_not_json, parse_float=_finite_float)
    except (UnicodeDecodeError, json.JSONDecodeError, _NotFinite) as err:
        raise APIError(400, f"request body is not valid JSON: {err}", code="invalid_json") from None
    except RecursionError:
        data = _TOO_DEEP  # nested far too deeply: refused below
    if data is not _TOO_DEEP and not isinstance(data, dict):
        raise APIError(400, "request body must be a JSON object", code="invalid_json")
    problem = (
        "nesting"
        if data is _TOO_DEEP
        else _shape_problem(data, bool(_SURROGATE_ESCAPE.search(raw)))
    )
    if problem == "nesting":
        raise APIError(
            400,
            f"request body nests arrays and objects more than {MAX_JSON_DEPTH} deep",
            code="invalid_json",
        )
    if problem:
        raise APIError(400, f"request body is not valid Unicode: {problem}", code="invalid_json")
    assert isinstance(data, dict)
    return data


class _NotFinite(ValueError):
    pass


def _not_json(literal: str) -> float:
    raise _NotFinite(f"{literal} is not a JSON number; send a finite number")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if math.isinf(value):
        raise _NotFinite(f"{literal[:40]} is too large for a 64-bit float")
    return value


def _shape_problem(data: Any, surrogates: bool) -> str | None:
    """ "nesting", a lone-surrogate description, or None (an iterative walk: no recursion)."""
    stack: list[tuple[Any, int, str]] = [(data, 1, "")]
    while stack:
        node, depth, path = stack.pop()
        if isinstance(node, dict):
            items: Any = node.items()
        elif isinstance(node, list):
            items = enumerate(node)
        else:
            continue
        for key, value in items:
            if surrogates and isinstance(key, str) and _LONE_SURROGATE.search(key):
                return f"a key in {path or 'the body'} holds an unpaired surrogate"
            if isinstance(value, dict | list):
                if depth >= MAX_JSON_DEPTH:
                    return "nesting"
                stack.append((value, depth + 1, _at(path, key)))
            elif surrogates and isinstance(value, str) and _LONE_SURROGATE.search(value):
                return f"the string at {_at(path, key)} holds an unpaired surrogate"
    return None


def _at(path: str, key: Any) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key)
