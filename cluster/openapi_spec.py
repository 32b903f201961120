"""The ingress's OpenAPI document, with the request bodies its OpenAI routes accept.

The forwarding routes take a raw ``Request`` (the ingress relays bytes), so FastAPI alone
documents no body. The bodies are the replica's OpenAI layer's, so their schemas come from
the pinned vLLM's own pydantic models (validation mode; ``$defs`` become components). Every
forwarded operation documents the statuses the fleet answers with — 200 (JSON, and an
event stream on the generating routes), and 400 / 401 / 404 / 413 / 429 / 503 with
OpenAI's error body (``contracts/http.py``).

Where the fleet accepts less than vLLM's models say, the document says so (``_fleet_rules``):
``model`` is the one served name and is required on the generating routes, as the ingress
requires it; a completion's ``prompt`` is required and not empty (``prompt_embeds`` is off);
a chat has at least one message.

Cost: importing vLLM's models costs ~560 MiB and seconds, which the ingress process must not
carry, so ``vllm_schemas`` builds them in a short-lived child process (``python -m
cluster.openapi_spec``); without vLLM, or if the child fails, each body is a permissive
``{"type": "object"}``. ``build_openapi`` builds the document once per app and caches it on
the app (``app.openapi_schema``), as FastAPI caches its own.
"""

from __future__ import annotations

import copy
import importlib
import json
import logging
import subprocess
import sys
from typing import Any

from fastapi.openapi.utils import get_openapi

from cluster.request_prep import MODEL_OPTIONAL

log = logging.getLogger("llmfleet.openapi")
REF = "#/components/schemas/{model}"
CHILD_TIMEOUT_S = 120.0
_CHAT = "vllm.entrypoints.openai.chat_completion.protocol"
_COMPLETION = "vllm.entrypoints.openai.completion.protocol"
_RESPONSES = "vllm.entrypoints.openai.responses.protocol"
_TOKENIZE = "vllm.entrypoints.serve.tokenize.protocol"

# path -> (request models (a body is any one of them), response model, streams)
OPERATIONS: dict[str, tuple[tuple[tuple[str, str], ...], tuple[str, str], bool]] = {
    "/v1/chat/completions": (
        ((_CHAT, "ChatCompletionRequest"),),
        (_CHAT, "ChatCompletionResponse"),
        True,
    ),
    "/v1/completions": (
        ((_COMPLETION, "CompletionRequest"),),
        (_COMPLETION, "CompletionResponse"),
        True,
    ),
    "/v1/responses": (
        ((_RESPONSES, "ResponsesRequest"),),
        (_RESPONSES, "ResponsesResponse"),
        True,
    ),
    "/tokenize": (
        ((_TOKENIZE, "TokenizeCompletionRequest"), (_TOKENIZE, "TokenizeChatRequest")),
        (_TOKENIZE, "TokenizeResponse"),
        False,
    ),
    "/detokenize": (
        ((_TOKENIZE, "DetokenizeRequest"),),
        (_TOKENIZE, "DetokenizeResponse"),
        False,
    ),
}

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
ERROR_STATUSES = {
    "400": "Invalid request (malformed JSON, a bad or missing field, a value out of range)",
    "401": "Missing or unknown API key",
    "404": "Unknown model",
    "408": "The request body did not all arrive within the server's body timeout",
    "413": "Request body too large",
    "415": "Compressed request body (Content-Encoding other than identity)",
    "429": "Too many requests waiting",
    "431": "Request headers too large",
    "503": "No replica can take the request now",
}
PERMISSIVE: dict[str, Any] = {"type": "object"}

# {"requests": {path: schema}, "responses": {path: schema}, "components": {name: schema}}
Bodies = dict[str, dict[str, Any]]


def vllm_schemas_in_process() -> Bodies | None:
    """The bodies from vLLM's models, names de-duplicated by pydantic; None without vLLM."""
    from pydantic.json_schema import models_json_schema

    names = sorted({n for reqs, resp, _ in OPERATIONS.values() for n in (*reqs, resp)})
    try:
        classes = {n: getattr(importlib.import_module(n[0]), n[1]) for n in names}
    except (ImportError, AttributeError):
        return None
    refs, top = models_json_schema([(classes[n], "validation") for n in names], ref_template=REF)
    ref = {n: refs[(classes[n], "validation")] for n in names}
    requests: dict[str, Any] = {}
    for path, (reqs, _, _) in OPERATIONS.items():
        options = [ref[n] for n in reqs]
        requests[path] = options[0] if len(options) == 1 else {"anyOf": options}
    responses = {path: ref[resp] for path, (_, resp, _) in OPERATIONS.items()}
    return {"requests": requests, "responses": responses, "components": top.get("$defs", {})}


def vllm_schemas(timeout_s: float = CHILD_TIMEOUT_S) -> Bodies | None:
    """``vllm_schemas_in_process`` run in a child process, so this one never imports vLLM."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "cluster.openapi_spec"],
            capture_output=True,
            timeout=timeout_s,
            check=True,
        )
        bodies: Bodies | None = json.loads(out.stdout.splitlines()[-1])
        return bodies
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as err:
        log.warning("request schemas from vLLM unavailable, documenting any object: %r", err)
        return None


def _component(components: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    return components[ref["$ref"].rsplit("/", 1)[-1]]  # type: ignore[no-any-return]


def _require(schema: dict[str, Any], name: str) -> None:
    schema["required"] = sorted({*schema.get("required", ()), name})


def _fleet_rules(body: dict[str, Any], path: str, served_model: str | None) -> None:
    """What the fleet accepts beyond vLLM's model (see the module header)."""
    props = body.get("properties", {})
    if served_model is not None and "model" in props:
        props["model"] = {"type": "string", "enum": [served_model]}
        if path not in MODEL_OPTIONAL:
            _require(body, "model")
    if path == "/v1/completions" and "prompt" in props:
        _require(body, "prompt")
        options = [o for o in props["prompt"].get("anyOf", []) if o.get("type") != "null"]
        for option in options:
            option["minLength" if option.get("type") == "string" else "minItems"] = 1
        props["prompt"]["anyOf"] = options
    if path == "/v1/chat/completions" and "messages" in props:
        props["messages"]["minItems"] = 1


def _responses(ok_schema: dict[str, Any], streams: bool) -> dict[str, Any]:
    ok: dict[str, Any] = {"application/json": {"schema": ok_schema}}
    if streams:
        ok["text/event-stream"] = {"schema": {"type": "string"}}
    error = {"application/json": {"schema": {"$ref": REF.format(model="ErrorResponse")}}}
    out: dict[str, Any] = {"200": {"description": "Successful Response", "content": ok}}
    for status, text in ERROR_STATUSES.items():
        out[status] = {"description": text, "content": error}
    return out


def openapi_document(
    app: Any, served_model: str | None = None, bodies: Bodies | None = None
) -> dict[str, Any]:
    """The app's OpenAPI document with the forwarded operations' bodies and statuses, from
    ``bodies`` (``vllm_schemas()``'s; permissive when None)."""
    doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    if bodies is not None:
        bodies = copy.deepcopy(bodies)
        schemas.update(bodies["components"])
    schemas["ErrorResponse"] = ERROR_SCHEMA
    for path, (_, _, streams) in OPERATIONS.items():
        op = doc.get("paths", {}).get(path, {}).get("post")
        if op is None:
            continue
        request, ok = PERMISSIVE, PERMISSIVE
        if bodies is not None:
            request, ok = bodies["requests"][path], bodies["responses"][path]
            for ref in request.get("anyOf", [request]):
                _fleet_rules(_component(schemas, ref), path, served_model)
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": request}}}
        op["responses"] = _responses(ok, streams)
    return doc


def build_openapi(app: Any, served_model: str | None = None) -> dict[str, Any]:
    """``openapi_document`` with vLLM's schemas, cached on the app (``app.openapi_schema``)."""
    if not app.openapi_schema:
        app.openapi_schema = openapi_document(app, served_model, vllm_schemas())
    return app.openapi_schema  # type: ignore[no-any-return]


if __name__ == "__main__":  # the child of ``vllm_schemas``: the bodies as JSON on stdout
    logging.disable(logging.CRITICAL)
    print("\n" + json.dumps(vllm_schemas_in_process()))  # one line, the last
