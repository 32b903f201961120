"""Fuzzing the OpenAI routes against the real engine: schemathesis, from our OpenAPI document.

Every POST operation gets ≥ ``MAX_EXAMPLES`` generated requests, positive (valid against
vLLM's request schema) and negative (invalid on purpose), plus schemathesis's coverage cases
(boundaries, missing and wrong-typed fields). Contract checked on every response: no status
≥ 500, no ``server_error`` inside a 200 event stream, and every 4xx body OpenAI-shaped
(``{"error": {"message", "type", ...}}``), and no answer quotes the server's model directory
(found by hand: vLLM named the model by its path in a 400). Afterwards the fleet is healthy and the replica
holds no request.

Generation is kept cheap on the CPU engine (~20 ms per token): before a case is sent, an
output budget it leaves open or sets within the fleet's cap is lowered to ``FEW_TOKENS``, and
an accepted ``n``/``best_of`` to ``FEW_SEQS``. Values outside what the server accepts are
sent as generated, so the negative cases still reach the validation they aim at.

Cases are sent ``IN_FLIGHT`` at a time: hypothesis generates the next case while earlier ones
are served, and the engine batches the accepted ones. Sent one by one, the accepted chat cases
alone took ~360 s of a ~540-s chat run on a 2-core machine (a 1-token answer to a generated
prompt of up to a few thousand tokens). Each response is checked in the sending thread;
``test_fuzz_responses`` then reports each operation's failures with the bodies that caused
them (no hypothesis shrinking: the failing body is printed whole).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig
from schemathesis.generation import GenerationMode

from cluster.config import ModelConfig
from replicas.model_prep import resolve_model
from tests.e2e.conftest import MODEL
from tests.serve_fixtures import TEST_URL, post, replica_stats

pytestmark = [pytest.mark.e2e]

MAX_EXAMPLES = 500
MODEL_DIR = str(resolve_model(MODEL))  # the default model, prepared once by `make model`
FEW_TOKENS = 1
FEW_SEQS = 2
MAX_TOKENS_CAP = ModelConfig.model_fields["max_tokens_cap"].default  # the test fleet's cap
MAX_CHOICES = ModelConfig.model_fields["max_choices"].default
BUDGET_FIELDS = {
    "/v1/chat/completions": ("max_tokens", "max_completion_tokens"),
    "/v1/completions": ("max_tokens",),
}
MAX_SEQS = 16384  # vLLM's largest accepted `n` (VLLM_MAX_N_SEQUENCES)
SEQ_FIELDS = ("n", "best_of")
FUZZED = ("/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize")
SENT: Counter[tuple[str, str]] = Counter()
# Well below the fleet's admission limits (max_num_seqs 16, max_ongoing_requests 64): a case
# must be served, not shed (test_fuzz_responses asserts no 429).
IN_FLIGHT = 4
SENDING: dict[str, list[Future[str | None]]] = {path: [] for path in FUZZED}
STATUSES: Counter[int] = Counter()
_slots = threading.BoundedSemaphore(IN_FLIGHT)
_pool = ThreadPoolExecutor(IN_FLIGHT, thread_name_prefix="fuzz-send")
_local = threading.local()
_count = threading.Lock()


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def cheapen(path: str, body: Any) -> None:
    """Lower the cost of a generated body in place, keeping what validation would refuse."""
    fields = BUDGET_FIELDS.get(path)
    if not fields or not isinstance(body, dict):
        return
    if all(body.get(f) is None for f in fields):
        body[fields[0]] = FEW_TOKENS
    for field in fields:
        v = body.get(field)
        if _int(v) and FEW_TOKENS < v <= MAX_TOKENS_CAP:
            body[field] = FEW_TOKENS
    for field in SEQ_FIELDS:
        v = body.get(field)
        if _int(v) and FEW_SEQS < v <= MAX_SEQS:
            body[field] = FEW_SEQS


def fuzz_schema() -> Any:
    """Our OpenAPI document, built in-process (``test_served_openapi_documents_the_bodies``
    checks the ingress serves it), aimed at the test server. Built at import: schemathesis's
    fixture-based loader does not run under pytest 9."""
    from cluster.ingress import app
    from cluster.openapi_spec import openapi_document, vllm_schemas

    config = SchemathesisConfig()
    project = config.projects.default
    project.update(base_url=TEST_URL, request_timeout=60)
    project.generation.update(modes=list(GenerationMode), max_examples=MAX_EXAMPLES)
    project.phases.update(phases=["examples", "coverage", "fuzzing"])
    bodies = vllm_schemas()
    assert bodies is not None, "vLLM's request schemas are unavailable (is vLLM installed?)"
    doc = openapi_document(app, MODEL, bodies)
    return schemathesis.openapi.from_dict(doc, config=config).include(
        method="POST", path=list(FUZZED)
    )


def check_response(case: Any, resp: Any) -> None:
    """``resp`` is schemathesis's ``Response`` (``headers``: lower-case name -> values)."""
    sent = json.dumps(case.body, default=str)[:2000] if case.body is not None else "<no body>"
    where = f"{case.operation.label} {resp.status_code}: {resp.text[:500]}\nbody: {sent}"
    assert resp.status_code < 500, where
    assert MODEL_DIR not in resp.text, where  # a server path is none of the client's business
    media = (resp.headers.get("content-type") or [""])[0].split(";")[0]
    if resp.status_code == 200 and media == "text/event-stream":
        assert '"server_error"' not in resp.text, where
    if 400 <= resp.status_code < 500:
        err = resp.json().get("error")
        assert isinstance(err, dict), where
        assert isinstance(err.get("message"), str), where
        assert isinstance(err.get("type"), str), where


fuzz = fuzz_schema()


@fuzz.parametrize()
@settings(
    deadline=None,
    max_examples=MAX_EXAMPLES,
    suppress_health_check=list(HealthCheck),
    database=None,
    print_blob=True,
)
def test_fuzz_no_server_errors(case: Any, vllm_app: str) -> None:
    meta = case.meta
    mode = str(meta.generation.mode.value) if meta is not None else "explicit"
    SENT[(case.operation.label, mode)] += 1
    cheapen(case.operation.path, case.body)
    _slots.acquire()  # at most IN_FLIGHT sent and unanswered; generation waits for a slot
    try:
        SENDING[case.operation.path].append(_pool.submit(_send, case))
    except BaseException:
        _slots.release()
        raise


def _send(case: Any) -> str | None:
    """Send one case and check its response; the failure's text, or None."""
    try:
        session = getattr(_local, "session", None)
        if session is None:
            session = _local.session = requests.Session()
        resp = case.call(session=session)
        with _count:
            STATUSES[resp.status_code] += 1
        check_response(case, resp)
        return None
    except AssertionError as err:  # check_response's text names the operation and the body
        return str(err)
    except Exception as err:  # e.g. a timeout or a dropped connection: no response to check
        sent = json.dumps(case.body, default=str)[:2000] if case.body is not None else "-"
        return f"{case.operation.label}: {type(err).__name__}: {err}\nbody: {sent}"
    finally:
        _slots.release()


def _failures(path: str) -> list[str]:
    return [f for f in (fut.result(timeout=120) for fut in SENDING[path]) if f is not None]


@pytest.mark.parametrize("path", FUZZED)
def test_fuzz_responses(path: str, vllm_app: str) -> None:
    """Every response of that operation's fuzz met the contract (see the module's text)."""
    if not SENDING[path]:
        pytest.skip("the fuzz did not run in this session")
    failed = _failures(path)
    assert not failed, f"{len(failed)} of {len(SENDING[path])} cases failed:\n" + "\n\n".join(
        failed[:5]
    )


def test_fuzz_counts_and_fleet_is_idle(vllm_app: str) -> None:
    """After the fuzz: enough cases of each kind were sent and served (none shed), and the
    fleet is healthy with no engine slot held (running, waiting, or added and not finished)."""
    if not SENT:
        pytest.skip("the fuzz did not run in this session")
    for path in FUZZED:
        _failures(path)  # every case answered before the fleet is inspected
    assert not STATUSES[429], dict(STATUSES)
    per_op = Counter[str]()
    for (label, _), n in SENT.items():
        per_op[label] += n
    print("fuzz cases:", dict(SENT), "statuses:", dict(STATUSES))
    for path in FUZZED:
        assert per_op[f"POST {path}"] >= MAX_EXAMPLES, dict(SENT)
        assert SENT[(f"POST {path}", "negative")] > 0, dict(SENT)
    assert httpx.get(f"{TEST_URL}/health", timeout=10).status_code == 200
    deadline = time.monotonic() + 30
    while True:
        held = {k: s[k] for s in replica_stats() for k in ("running", "waiting", "ongoing") if s[k]}
        if not held or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not held, held


@pytest.mark.parametrize(
    ("path", "extra"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/completions", {"prompt": "hi"}),
    ],
)
@pytest.mark.parametrize(
    "bad",
    [
        {"stop": [""]},
        {"stop": ""},
        {"seed": 2**64},
        {"seed": 2**63},
        {"seed": -(2**63) - 1},
        {"n": 10**9},
        {"n": MAX_CHOICES + 1},  # the fleet's cap (vLLM would run up to 16,384)
        {"stream_interval": 2**70},  # found by the fuzz: a 500 before request_checks
        {"top_k": 2**64},
        {"top_k": str(10**23)},  # vLLM reads numeric strings: found by hand, a 500
        {"n": str(MAX_CHOICES + 1)},  # found by hand: passed the cap, vLLM ran it
        {"max_tokens": "100000"},
    ],
    ids=[
        "stop-empty-item",
        "stop-empty",
        "seed-2^64",
        "seed-2^63",
        "seed-below-int64",
        "n-huge",
        "n-above-cap",
        "stream_interval-2^70",
        "top_k-2^64",
        "top_k-string-10^23",
        "n-string-above-cap",
        "max_tokens-string-above-cap",
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_out_of_range_values_are_client_errors(
    vllm_app: str, path: str, extra: dict[str, Any], bad: dict[str, Any], stream: bool
) -> None:
    r = post(path, {"model": vllm_app, "max_tokens": 2, "stream": stream, **extra, **bad})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert err["code"] == "invalid_value"


@pytest.mark.parametrize(
    "tail",
    [
        b'"prompt": "hi", "stop": ["\\ud800"]',  # was a 500 engine_error
        b'"prompt": "a\\udfffb"',  # was vLLM's tokenizer's cryptic 400
        b'"prompt": "hi", "x": ' + b"[" * 1_000 + b"]" * 1_000,  # was a 500 (RecursionError)
        b'"prompt": "hi", "logit_bias": {"28": NaN}',  # was a 200, the sampler fed a NaN
    ],
    ids=["stop-lone-surrogate", "prompt-lone-surrogate", "nested-1000", "logit-bias-nan"],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_bodies_json_allows_but_unicode_or_the_decoder_does_not(
    vllm_app: str, tail: bytes, stream: bool
) -> None:
    head = b'{"model": "%s", "max_tokens": 2, "stream": %s, ' % (
        vllm_app.encode(),
        b"true" if stream else b"false",
    )
    r = httpx.post(
        f"{TEST_URL}/v1/completions",
        content=head + tail + b"}",
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_json"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_batch_of_prompts_counts_each_prompt(vllm_app: str, stream: bool) -> None:
    """A completions batch runs one sequence per prompt (times ``n``): the fleet's cap on
    choices bounds them all (unit: ``test_a_batch_of_prompts_is_several_prompts``)."""
    body = {"model": vllm_app, "max_tokens": 2, "stream": stream}
    r = post("/v1/completions", {**body, "prompt": ["hi"] * (MAX_CHOICES + 1)})
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["param"], r.json()["error"]["code"]) == ("prompt", "invalid_value")
    r = post("/v1/completions", {**body, "prompt": ["hi", "there"], "n": 2, "stream": False})
    assert r.status_code == 200, r.text
    assert len(r.json()["choices"]) == 4


def test_served_openapi_documents_the_bodies(vllm_app: str) -> None:
    doc = httpx.get(f"{TEST_URL}/openapi.json", timeout=30).json()
    for path in FUZZED:
        op = doc["paths"][path]["post"]
        assert op["requestBody"]["content"]["application/json"]["schema"], path
        assert {"200", "400", "404", "413", "429", "503"} <= set(op["responses"]), path
