"""Edge metrics: outcome classification, the stream meter (timing, usage, stripping the
usage event the ingress asked for) and what one finished request records."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest

from cluster.edge_metrics import EdgeMetrics, EdgeRecord, StreamMeter, body_usage
from cluster.request_prep import ask_usage
from contracts import metrics as M
from contracts.outcomes import classify

SLO = {"ttft_slo_s": 1.0, "tpot_slo_s": 0.1}


def ev(obj: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


@pytest.mark.parametrize(
    ("kw", "outcome"),
    [
        ({"status": 200, "ttft_s": 0.5, "e2e_s": 1.4, "output_tokens": 10}, "good"),
        ({"status": 200, "ttft_s": 1.5, "e2e_s": 2.0, "output_tokens": 10}, "slow_ttft"),
        ({"status": 200, "ttft_s": 0.5, "e2e_s": 2.0, "output_tokens": 10}, "slow_tpot"),
        ({"status": 200, "ttft_s": 0.5, "e2e_s": 9.0, "output_tokens": 1}, "good"),  # no TPOT
        ({"status": 200, "ttft_s": None, "e2e_s": 1.8, "output_tokens": 10}, "good"),  # 1+9×0.1
        ({"status": 200, "ttft_s": None, "e2e_s": 2.1, "output_tokens": 10}, "slow_ttft"),
        ({"status": 200, "ttft_s": 0.1, "e2e_s": 0.2, "output_tokens": 2, "failed": True}, "error"),
        ({"status": 500, "ttft_s": None, "e2e_s": None, "output_tokens": 0}, "error"),
        ({"status": 429, "ttft_s": None, "e2e_s": None, "output_tokens": 0}, "rejected"),
        ({"status": 503, "ttft_s": None, "e2e_s": None, "output_tokens": 0}, "rejected"),
        ({"status": 400, "ttft_s": None, "e2e_s": None, "output_tokens": 0}, "invalid"),
        ({"status": 401, "ttft_s": None, "e2e_s": None, "output_tokens": 0}, "invalid"),
        ({"status": 200, "ttft_s": 0.1, "e2e_s": 0.2, "output_tokens": 2, "cancelled": True}, "cancelled"),
    ],
)  # fmt: skip
def test_classify(kw: dict[str, Any], outcome: str) -> None:
    assert classify(**kw, **SLO) == outcome


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_meter_times_chunks_and_strips_the_injected_usage_event() -> None:
    clock = Clock()
    rec = EdgeRecord(arrival=99.0)
    meter = StreamMeter(rec, strip_usage=True, clock=clock)
    role = ev({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    tok = ev({"choices": [{"index": 0, "delta": {"content": 'say "usage"'}}]})  # escaped
    usage = ev({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
    assert meter.feed(role) == role
    clock.t = 100.25
    assert meter.feed(tok) == tok
    clock.t = 100.5
    out = meter.feed(tok + usage + b"data: [DONE]\n\n")  # coalesced by the relay
    assert out == tok + b"data: [DONE]\n\n"
    assert rec.first_at == 100.0
    assert rec.ttft_s == pytest.approx(1.0)
    assert rec.gaps == [pytest.approx(0.25), pytest.approx(0.25)]
    assert (rec.prompt_tokens, rec.output_tokens) == (7, 3)
    assert rec.ended  # [DONE] relayed: a client hanging up now cancelled nothing


def test_meter_keeps_usage_the_client_asked_for() -> None:
    rec = EdgeRecord(arrival=0.0)
    usage = ev({"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 5}})
    assert StreamMeter(rec, strip_usage=False, clock=Clock()).feed(usage) == usage
    assert rec.output_tokens == 5


def test_meter_reads_responses_api_usage() -> None:
    rec = EdgeRecord(arrival=0.0)
    done = ev(
        {
            "type": "response.completed",
            "response": {"usage": {"input_tokens": 4, "output_tokens": 6}},
        }
    )
    StreamMeter(rec, strip_usage=True, clock=Clock()).feed(done)
    assert (rec.prompt_tokens, rec.output_tokens) == (4, 6)


def test_body_usage() -> None:
    assert body_usage(b'{"usage": {"prompt_tokens": 3, "completion_tokens": 4}}') == (3, 4)
    assert body_usage(b"not json") is None
    assert body_usage(b'{"usage": null}') is None


@pytest.mark.parametrize(
    ("path", "opts", "injected", "after"),
    [
        ("/v1/chat/completions", None, True, {"include_usage": True}),
        ("/v1/completions", {"include_usage": False}, True, {"include_usage": True}),
        ("/v1/chat/completions", {"include_usage": True}, False, {"include_usage": True}),
        ("/v1/chat/completions", {"continuous_usage_stats": True}, False, {"continuous_usage_stats": True}),
        ("/v1/chat/completions", {"include_usage": "yes"}, False, {"include_usage": "yes"}),
        ("/v1/responses", None, False, None),
    ],
)  # fmt: skip
def test_ask_usage(path: str, opts: Any, injected: bool, after: Any) -> None:
    body: dict[str, Any] = {} if opts is None else {"stream_options": opts}
    assert ask_usage(path, body) is injected
    assert body.get("stream_options") == after


class Recorder:
    """A metric factory whose metrics record every call."""

    def __init__(self) -> None:
        self.calls: dict[str, list[tuple[str, float, dict[str, str]]]] = defaultdict(list)

    def __call__(self, metric: M.Metric) -> Any:
        calls = self.calls[metric.name]

        class _M:
            def observe(self, v: float, tags: dict[str, str]) -> None:
                calls.append(("observe", v, tags))

            def inc(self, v: float, tags: dict[str, str]) -> None:
                calls.append(("inc", v, tags))

        return _M()


def test_a_streamed_request_records_every_edge_metric() -> None:
    rec_f = Recorder()
    edge = EdgeMetrics("m", 1.0, 0.1, factory=rec_f)
    rec = EdgeRecord(arrival=10.0, accepted_at=10.2, status=200, streamed=True)
    rec.first_at, rec.last_at, rec.gaps = 10.5, 11.22, [0.08] * 9
    rec.prompt_tokens, rec.output_tokens = 20, 10
    assert edge.finish(rec) == "good"
    c = rec_f.calls
    assert c[M.REQUESTS.name] == [("inc", 1, {"model": "m", "outcome": "good"})]
    assert c[M.ROUTER_QUEUE.name][0][1] == pytest.approx(0.2)
    assert c[M.TTFT.name][0][1] == pytest.approx(0.5)
    assert c[M.TPOT.name][0][1] == pytest.approx(0.08)
    assert c[M.E2E.name][0][1] == pytest.approx(1.22)
    assert len(c[M.ITL.name]) == 9
    assert c[M.REQUEST_OUTPUT_TOKENS.name] == [("inc", 10, {"model": "m", "outcome": "good"})]
    assert c[M.REQUEST_PROMPT_TOKENS.name] == [("inc", 20, {"model": "m"})]


def test_a_refused_request_counts_only_its_outcome() -> None:
    rec_f = Recorder()
    edge = EdgeMetrics("m", 1.0, 0.1, factory=rec_f)
    assert edge.finish(EdgeRecord(arrival=0.0, status=429)) == "rejected"
    names = {k for k, v in rec_f.calls.items() if v}
    assert names == {M.REQUESTS.name}


def test_metric_errors_never_fail_a_request() -> None:
    def broken(_: M.Metric) -> Any:
        class _B:
            def inc(self, *_a: Any, **_k: Any) -> None:
                raise RuntimeError("exporter down")

        return _B()

    assert (
        EdgeMetrics("m", 1.0, 0.1, factory=broken).finish(EdgeRecord(0.0, status=400)) == "invalid"
    )


def test_catalogue_names_are_prometheus_safe_and_unique() -> None:
    names = [m.name for m in M.CATALOGUE]
    assert len(names) == len(set(names))
    for m in M.CATALOGUE:
        assert ":" not in m.name
        assert m.name.startswith("llmfleet_")
        assert not m.name.endswith("_total"), "Ray appends _total to counters"
        assert m.description
        assert m.unit
        if m.kind == "histogram":
            assert m.name.endswith("_seconds")
            assert m.buckets == M.LATENCY_BUCKETS_S
    for t in (0.1, 0.2, 0.25, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5):
        assert t in M.LATENCY_BUCKETS_S
    assert M.prom(M.REQUESTS) == "ray_llmfleet_requests_total"
    assert M.prom(M.TTFT, "bucket") == "ray_llmfleet_request_ttft_seconds_bucket"


def test_the_docs_show_the_catalogue() -> None:
    from pathlib import Path

    from cluster.observe.catalogue_doc import markdown

    doc = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text()
    assert markdown() in doc, "regenerate the table: python -m cluster.observe.catalogue_doc"
