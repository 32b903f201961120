from router.outstanding import DEFAULT_RATE, OutstandingPrefill


def test_backlog_adds_and_drains_at_the_replica_rate() -> None:
    o = OutstandingPrefill()
    o.add("a", 1000, rate=500, now=0.0)
    o.add("a", 500, rate=500, now=0.0)
    assert o.get("a", 500, now=0.0) == 1500
    assert o.get("a", 500, now=1.0) == 1000
    assert o.get("a", 500, now=10.0) == 0
    assert o.get("b", 500, now=10.0) == 0


def test_unknown_rate_uses_default_and_forget() -> None:
    o = OutstandingPrefill()
    o.add("a", 1000, rate=0, now=0.0)
    assert o.get("a", 0, now=1.0) == 1000 - DEFAULT_RATE
    o.forget("a")
    assert o.get("a", 0, now=1.0) == 0
