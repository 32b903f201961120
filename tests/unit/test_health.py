from cluster.ingress import HEALTH_FRESH_S, health_verdict


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
