"""What `llmfleet up` says while it starts and stops: its own progress line, and none of
Serve's INFO lines (found by hand: "New http_options/controller_options will not be
applied" at every start, and "Application 'llmfleet' is ready" while the fleet stopped)."""

from __future__ import annotations

import logging

from cluster.cli import starting_line
from cluster.config import FleetConfig


def test_the_starting_line_names_what_starts() -> None:
    fixed = FleetConfig.model_validate({"replicas": {"num_replicas": 3}})
    assert starting_line(fixed) == (
        "starting 3 vllm replicas of smollm2-135m-instruct; waiting until the fleet serves"
    )
    one = FleetConfig.model_validate({"engine": {"type": "sim"}})
    assert starting_line(one).startswith("starting 1 sim replica of ")
    auto = FleetConfig.model_validate(
        {"autoscaling": {"enabled": True, "min_replicas": 2, "max_replicas": 6}}
    )
    assert "2 vllm replicas (autoscaling 2-6)" in starting_line(auto)


def test_serve_keeps_its_warnings_and_drops_its_info() -> None:
    import ray.serve  # noqa: F401  (its import sets up Serve's logger, replacing handlers)

    from cluster.runtime import quiet_serve_driver_log

    serve_logger = logging.getLogger("ray.serve")  # Serve's handler; it does not propagate
    said: list[str] = []
    catch = logging.Handler()
    catch.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    before = serve_logger.level
    serve_logger.addHandler(catch)
    try:
        quiet_serve_driver_log()
        serve_logger.info("Application 'llmfleet' is ready")
        serve_logger.warning("a replica failed its health check")
        assert said == ["a replica failed its health check"]
    finally:
        serve_logger.removeHandler(catch)
        serve_logger.setLevel(before)


def test_ray_s_token_notice_goes_and_its_warning_of_no_auth_stays() -> None:
    from cluster.runtime import _drop_token_auth_notice

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("ray", logging.WARNING, __file__, 1, msg, None, None)

    assert not _drop_token_auth_notice(
        record("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=...")
    )
    assert _drop_token_auth_notice(
        record("Token authentication is not enabled: anyone with network access ...")
    )
