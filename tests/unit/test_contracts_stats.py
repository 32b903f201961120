"""contracts.stats: the replica-stats record and its wire form."""

from __future__ import annotations

import dataclasses

import pytest

from contracts import stats as wire
from contracts.stats import (
    STATS_VERSION,
    UNKNOWN,
    UNREPORTED,
    WIRE_FIELDS,
    ReplicaStats,
    StatsWireError,
    from_wire,
)

FULL = ReplicaStats(
    waiting=3,
    running=5,
    waiting_prefill_tokens=1200,
    kv_usage=0.25,
    kv_capacity_tokens=46_080,
    prefix_hits=900,
    prefix_queries=4000,
    block_size=128,
    prefill_tokens_per_s=850.5,
    decode_tokens_per_s=42.0,
    queue_delay_s=1.4,
    ttft_p95_s=0.9,
    busy_fraction=0.6,
    prefill_load_tokens_per_s=310.0,
    ongoing=8,
    arrived_prompt_tokens=52_000,
    arrived_requests=40,
    num_preemptions=2,
    steps=1234,
    first_tokens=38,
    ttft_over_250ms=20,
    ttft_over_500ms=9,
    ttft_over_1s=5,
    ttft_over_2s=2,
    ttft_over_4s=1,
    ttft_over_8s=1,
    healthy=False,
    draining=True,
)


def test_round_trip_keeps_every_field_and_types() -> None:
    d = FULL.to_wire()
    assert set(d) == {*WIRE_FIELDS, "version"}
    assert d["version"] == STATS_VERSION
    assert all(type(v) is float for v in d.values())  # Serve's metrics: dict[str, float]
    back = from_wire(d)
    assert back == FULL
    assert back.reported
    assert isinstance(back.block_size, int)
    assert isinstance(back.healthy, bool)
    # every field differs from its default above, so none can be silently dropped
    defaults = ReplicaStats()
    assert all(getattr(FULL, f) != getattr(defaults, f) for f in WIRE_FIELDS)


def test_serve_window_mean_decodes() -> None:
    a = ReplicaStats(waiting=2, healthy=True, block_size=16).to_wire()
    b = ReplicaStats(waiting=3, healthy=False, block_size=16).to_wire()
    c = ReplicaStats(waiting=4, healthy=True, block_size=16).to_wire()
    mean = {k: (a[k] + b[k] + c[k]) / 3 for k in a} | {"running_requests": 7.0}
    s = from_wire(mean)  # Serve's own keys are ignored, the version survives averaging
    assert s.waiting == 3.0
    assert s.healthy
    assert s.block_size == 16


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        ({k: v for k, v in FULL.to_wire().items() if k != "version"}, "version"),
        (FULL.to_wire() | {"version": STATS_VERSION + 1.0}, "version"),
        (FULL.to_wire() | {"version": STATS_VERSION + 0.5}, "version"),  # mixed-version mean
        ({k: v for k, v in FULL.to_wire().items() if k != "decode_tokens_per_s"}, "missing"),
        (FULL.to_wire() | {"waiting": "lots"}, "type"),
        (FULL.to_wire() | {"kv_usage": None}, "type"),
        ({}, "empty"),
        (None, "empty"),
    ],
)
def test_strict_rejects_and_lenient_counts(data: dict[str, object] | None, kind: str) -> None:
    with pytest.raises(StatsWireError) as err:
        from_wire(data)
    assert err.value.kind == kind
    before = wire.WIRE_ERRORS[kind]
    fallback = from_wire(data, strict=False)
    assert wire.WIRE_ERRORS[kind] == before + 1
    assert not fallback.reported
    assert fallback.healthy
    assert fallback.waiting == 0
    assert fallback in (UNKNOWN, UNREPORTED)


def test_lenient_logs_the_first_error_of_a_kind(caplog: pytest.LogCaptureFixture) -> None:
    wire.WIRE_ERRORS.pop("missing", None)
    bad = {"version": float(STATS_VERSION), "waiting": 1.0}
    with caplog.at_level("WARNING", logger="contracts.stats"):
        from_wire(bad, strict=False)
        from_wire(bad, strict=False)
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "missing" in warnings[0].getMessage()
    assert wire.WIRE_ERRORS["missing"] == 2


def test_record_is_frozen_and_unknown_is_not_on_the_wire() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        FULL.waiting = 1  # type: ignore[misc]
    assert "reported" not in UNKNOWN.to_wire()
    assert from_wire(UNKNOWN.to_wire()).reported  # a neutral report is still a report
