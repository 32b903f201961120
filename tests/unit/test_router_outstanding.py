from router.outstanding import DEFAULT_RATE, OutstandingPrefill


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_backlog_adds_and_drains_at_the_replica_rate() -> None:
    clock = Clock()
    o = OutstandingPrefill(clock)
    o.add("a", 1000, rate=500)
    o.add("a", 500, rate=500)
    assert o.get("a", 500) == 1500
    clock.t = 1.0
    assert o.get("a", 500) == 1000
    clock.t = 10.0
    assert o.get("a", 500) == 0 and o.get("b", 500) == 0


def test_unknown_rate_uses_default_and_forget() -> None:
    clock = Clock()
    o = OutstandingPrefill(clock)
    o.add("a", 1000, rate=0)
    clock.t = 1.0
    assert o.get("a", 0) == 1000 - DEFAULT_RATE
    o.forget("a")
    assert o.get("a", 0) == 0
