from cluster.health import HEALTH_FRESH_S, fleet_health, health_verdict


def test_no_replicas_is_503_openai_shaped() -> None:
    status, body = health_verdict([], now=100.0)
    assert status == 503
    assert body["error"]["code"] == "no_healthy_replica"


def test_only_unhealthy_or_stale_reports_is_503() -> None:
    rows = [
        {"healthy": 0.0, "reported_at": 99.0},
        {"healthy": 1.0, "reported_at": 100.0 - HEALTH_FRESH_S - 1},
    ]
    assert health_verdict(rows, now=100.0)[0] == 503


def test_one_fresh_healthy_replica_is_enough() -> None:
    rows = [{"healthy": 0.0, "reported_at": 99.0}, {"healthy": 1.0, "reported_at": 99.5}]
    assert health_verdict(rows, now=100.0) == (200, {"status": "ok", "healthy_replicas": 1})


def test_fleet_health_tells_no_reports_from_no_answer() -> None:
    fresh = {"healthy": 1.0, "reported_at": 99.5}
    assert fleet_health([fresh], now=100.0) == "healthy"
    assert fleet_health([{**fresh, "healthy": 0.0}], now=100.0) == "failing"
    assert fleet_health([], now=100.0) == "empty"  # the actor answered: no replica reports
    gone = {**fresh, "reported_at": 100.0 - HEALTH_FRESH_S - 1}  # a killed replica's last row
    assert fleet_health([gone], now=100.0) == "empty"
    assert fleet_health([gone, {**fresh, "healthy": 0.0}], now=100.0) == "failing"
    assert fleet_health(None, now=100.0) is None  # the actor did not answer


def test_a_fleet_whose_replicas_fail_to_start_is_unstartable_until_one_serves() -> None:
    """Found by hand: a replica that cannot start (its model files broken) held every request
    for the whole cold-start bound (120 s), waiting for a start that kept failing."""
    failed = [{"replica": "r9", "failed_at": 99.0, "error": "OSError: no weights"}]
    assert fleet_health([], now=100.0, start_failures=failed) == "unstartable"
    unhealthy = {"healthy": 0.0, "reported_at": 99.5}
    assert fleet_health([unhealthy], now=100.0, start_failures=failed) == "unstartable"
    healthy = {"healthy": 1.0, "reported_at": 99.5}  # another replica still serves
    assert fleet_health([healthy], now=100.0, start_failures=failed) == "healthy"
    assert fleet_health([], now=100.0, start_failures=[]) == "empty"
