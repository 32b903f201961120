"""`llmfleet status` reads the autoscaler's latest decision back from Ray's metrics port
(``cluster/autoscaler_view.py``); the text below is the shape captured from a vLLM fleet
that scaled 1 → 2 under `llmfleet bench` and then stayed at 2 while idle (2026-12-05)."""

from __future__ import annotations

from cluster.autoscaler_view import describe, parse

RAY = (
    'Component="core_worker",NodeAddress="127.0.0.1",'
    'SessionName="session_2026-12-05_18-07-40_355958_3773",Version="2.60.0",WorkerId="{worker}",'
    'deployment_name="LLMReplica",otel_scope_name="ray._private.telemetry.'
    'open_telemetry_metric_recorder",otel_scope_schema_url="",otel_scope_version="",'
    'policy="ttft-queue"'
)


def _line(name: str, value: float, worker: str = "51e3", **labels: str) -> str:
    extra = "".join(f',{k}="{v}"' for k, v in labels.items())
    return f"ray_llmfleet_autoscaler_{name}{{{RAY.format(worker=worker)}{extra}}} {value}"


def _text(desired: int, current: int, reserve: float, *extra: str) -> str:
    return (
        "\n".join(
            [
                "# HELP ray_serve_num_http_requests_total Unrelated.",
                "# TYPE ray_serve_num_http_requests_total counter",
                'ray_serve_num_http_requests_total{route="/v1"} 12.0',
                "# HELP ray_llmfleet_autoscaler_target The value the policy holds each signal to.",
                "# TYPE ray_llmfleet_autoscaler_target gauge",
                _line("target", 1.207698830633679, signal="prefill_backlog_s"),
                _line("target", reserve, signal="burst_reserve_replicas"),
                "# HELP ray_llmfleet_autoscaler_signal The policy's inputs by name.",
                "# TYPE ray_llmfleet_autoscaler_signal gauge",
                _line("signal", 0.0, signal="prefill_backlog_s"),
                _line("signal", reserve, signal="burst_reserve_replicas"),
                _line("signal", 29.523075819015503, signal="boot_s"),
                "# HELP ray_llmfleet_autoscaler_current_replicas Replicas running.",
                "# TYPE ray_llmfleet_autoscaler_current_replicas gauge",
                _line("current_replicas", current),
                "# HELP ray_llmfleet_autoscaler_desired_replicas Replicas asked for.",
                "# TYPE ray_llmfleet_autoscaler_desired_replicas gauge",
                _line("desired_replicas", desired),
                "# HELP ray_llmfleet_autoscaler_decisions_total Changes of the desired count.",
                "# TYPE ray_llmfleet_autoscaler_decisions_total counter",
                _line("decisions_total", 1.0, direction="up", reason="queue_delay"),
                *extra,
            ]
        )
        + "\n"
    )


def test_an_idle_fleet_held_by_the_burst_reserve_says_so() -> None:
    views = parse(_text(desired=2, current=2, reserve=2.0))
    assert list(views) == ["LLMReplica"]
    view = views["LLMReplica"]
    assert (view.policy, view.desired, view.current) == ("ttft-queue", 2, 2)
    first, signals, moves = describe(view)
    assert first.startswith("autoscaler LLMReplica (ttft-queue): running 2, wants 2: held by")
    assert "bursts need 2 replicas within one boot (29.5 s)" in first
    assert "target_attainment" in first  # the knob that sets it
    assert "prefill_backlog_s 0 / 1.21" in signals
    assert "boot_s 29.5" in signals
    assert moves == "  moves so far: up 1 (queue_delay)"


def test_moving_and_steady_fleets() -> None:
    up = describe(parse(_text(desired=3, current=2, reserve=2.0))["LLMReplica"])[0]
    assert up.endswith("running 2, wants 3: scaling up")
    down = describe(parse(_text(desired=1, current=2, reserve=1.0))["LLMReplica"])[0]
    assert down.endswith("running 2, wants 1: scaling down")
    steady = describe(parse(_text(desired=2, current=2, reserve=1.0))["LLMReplica"])[0]
    assert steady.endswith("running 2, wants 2: steady")  # the reserve is not what holds it


def test_moves_add_up_across_controller_processes() -> None:
    """A restarted controller exports its own counter series next to the old one's."""
    later = _line("decisions_total", 2.0, worker="9f00", direction="up", reason="queue_delay")
    down = _line("decisions_total", 1.0, worker="9f00", direction="down", reason="slo_headroom")
    view = parse(_text(2, 2, 2.0, later, down))["LLMReplica"]
    assert view.moves == {("up", "queue_delay"): 3, ("down", "slo_headroom"): 1}


def test_no_policy_of_ours_no_view() -> None:
    """Ray's default policy (ongoing-requests) and a fleet without autoscaling export none."""
    assert parse('ray_serve_num_http_requests_total{route="/v1"} 12.0\n') == {}
    assert parse("") == {}


def test_a_fleet_at_its_floor_is_not_said_to_be_held_by_the_reserve() -> None:
    """Noticed reading the rule: with `min_replicas: 2` and a reserve of 2, status blamed
    the reserve (and named its knob), which turned off would not have moved the fleet."""
    view = parse(_text(desired=2, current=2, reserve=2.0))["LLMReplica"]
    first = describe(view, min_replicas=2)[0]
    assert first.endswith("running 2, wants 2: at its floor (autoscaling.min_replicas 2)")
    assert "held by the burst reserve" in describe(view, min_replicas=1)[0]
    assert "held by the burst reserve" in describe(view)[0]  # floor unknown (older state)
