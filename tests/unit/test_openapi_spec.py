"""cluster.openapi_spec: the forwarded routes' bodies and statuses in the OpenAPI document."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import FastAPI, Request

from cluster.openapi_spec import (
    ERROR_STATUSES,
    OPERATIONS,
    build_openapi,
    openapi_document,
    vllm_schemas_in_process,
)


def _app() -> FastAPI:
    app = FastAPI(title="t")

    async def forward(request: Request) -> dict[str, Any]:
        return {"n": len(await request.body())}

    for path in OPERATIONS:
        app.post(path)(forward)
    app.get("/health")(forward)
    return app


def _bodies() -> dict[str, Any]:
    def obj(**props: Any) -> dict[str, Any]:
        return {"type": "object", "properties": props}

    components = {
        "Chat": obj(model={"type": ["string", "null"]}, messages={"type": "array"}),
        "Completion": obj(
            model={"type": "string"},
            prompt={"anyOf": [{"type": "string"}, {"type": "array"}, {"type": "null"}]},
        ),
        "Tok": obj(model={"type": "string"}),
        "Resp": obj(model={"type": "string"}),
        "Ok": obj(),
    }
    ref = {"$ref": "#/components/schemas/Tok"}
    requests = {p: ref for p in OPERATIONS}
    requests["/v1/chat/completions"] = {"$ref": "#/components/schemas/Chat"}
    requests["/v1/completions"] = {"$ref": "#/components/schemas/Completion"}
    requests["/v1/responses"] = {"$ref": "#/components/schemas/Resp"}
    responses = {p: {"$ref": "#/components/schemas/Ok"} for p in OPERATIONS}
    return {"requests": requests, "responses": responses, "components": components}


def test_every_forwarded_route_documents_a_body_and_the_fleet_statuses() -> None:
    doc = openapi_document(_app(), "m", _bodies())
    for path, (_, _, streams) in OPERATIONS.items():
        op = doc["paths"][path]["post"]
        assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert set(op["responses"]) == {"200", *ERROR_STATUSES}
        assert ("text/event-stream" in op["responses"]["200"]["content"]) is streams
        err = op["responses"]["400"]["content"]["application/json"]["schema"]
        assert err == {"$ref": "#/components/schemas/ErrorResponse"}
    assert "requestBody" not in doc["paths"]["/health"]["get"]


def test_fleet_rules_model_prompt_messages() -> None:
    bodies = _bodies()
    schemas = openapi_document(_app(), "served", bodies)["components"]["schemas"]
    chat, completion, tok = schemas["Chat"], schemas["Completion"], schemas["Tok"]
    assert chat["properties"]["model"] == {"type": "string", "enum": ["served"]}
    assert chat["required"] == ["model"]
    assert chat["properties"]["messages"]["minItems"] == 1
    assert completion["required"] == ["model", "prompt"]
    assert completion["properties"]["prompt"]["anyOf"] == [
        {"type": "string", "minLength": 1},
        {"type": "array", "minItems": 1},
    ]
    assert schemas["Resp"]["required"] == ["model"]
    assert "required" not in tok  # /tokenize and /detokenize take no model
    assert "minItems" not in bodies["components"]["Chat"]["properties"]["messages"]  # no edits


def test_without_vllm_bodies_are_any_object_and_the_document_is_cached() -> None:
    app = _app()
    doc = openapi_document(app, "m", None)
    assert doc["paths"]["/tokenize"]["post"]["requestBody"]["content"]["application/json"] == {
        "schema": {"type": "object"}
    }
    app.openapi_schema = doc
    assert build_openapi(app, "m") is doc


def test_schemas_come_from_vllms_request_models() -> None:
    pytest.importorskip("vllm")
    bodies = vllm_schemas_in_process()
    assert bodies is not None
    doc = openapi_document(_app(), "m", bodies)
    chat = doc["components"]["schemas"]["ChatCompletionRequest"]
    assert {"messages", "max_completion_tokens", "seed", "stop"} <= set(chat["properties"])
    assert doc["paths"]["/tokenize"]["post"]["requestBody"]["content"]["application/json"][
        "schema"
    ]["anyOf"]
