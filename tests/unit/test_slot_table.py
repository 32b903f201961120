"""The status actor's slot table (``replicas/slot_table.py``): one counter per key for the
concurrency limits of all ingress replicas."""

from __future__ import annotations

from replicas.slot_table import FORGET_S, STALE_S, SlotTable


def test_grants_stop_at_the_limit_across_origins() -> None:
    t = SlotTable()
    got = [
        t.acquire("k", origin, held, 4, ver, 0.0)
        for origin, held, ver in (
            ("A", 0, 1),
            ("B", 0, 1),
            ("A", 1, 2),
            ("B", 1, 2),
            ("A", 2, 3),
            ("B", 2, 3),
        )
    ]
    assert [g for g, _ in got] == [True, True, True, True, False, False]
    assert [n for _, n in got] == [1, 2, 3, 4, 4, 4]
    assert t.count("k", 0.0) == 4
    assert t.acquire("other", "A", 0, 1, 4, 0.0) == (True, 1)  # another key: its own count


def test_a_report_releases_slots() -> None:
    t = SlotTable()
    assert t.acquire("k", "A", 0, 1, 1, 0.0)[0]
    assert not t.acquire("k", "B", 0, 1, 1, 0.0)[0]
    t.report("A", {}, 2, 0.1)  # A's stream ended: it holds nothing
    assert t.acquire("k", "B", 0, 1, 2, 0.2) == (True, 1)


def test_an_origins_acquires_in_flight_count_as_held() -> None:
    # A asks for two slots at once: the second call says A holds 1 (the first, unanswered)
    t = SlotTable()
    assert t.acquire("k", "A", 0, 2, 1, 0.0) == (True, 1)
    assert t.acquire("k", "A", 1, 2, 2, 0.0) == (True, 2)
    assert t.acquire("k", "B", 0, 2, 1, 0.0) == (False, 2)


def test_words_arriving_out_of_order() -> None:
    t = SlotTable()
    # A's report (v2, made while its acquire v1 was in flight: held 1) arrives first
    t.report("A", {"k": 1}, 2, 0.0)
    assert t.acquire("k", "A", 0, 1, 1, 0.0) == (True, 1)  # judged on the report's count
    assert t.count("k", 0.0) == 1
    # an older report does not undo a newer acquire
    t.report("A", {}, 0, 0.0)
    assert t.count("k", 0.0) == 1
    # a late acquire already counted by a newer report, refused: taken off the count
    t.report("B", {"k": 1}, 5, 0.0)
    assert t.acquire("k", "B", 0, 1, 4, 0.0) == (False, 1)
    assert t.count("k", 0.0) == 1  # A's only


def test_silent_origins_stop_counting_then_are_forgotten() -> None:
    t = SlotTable()
    assert t.acquire("k", "A", 0, 1, 1, 0.0)[0]
    assert not t.acquire("k", "B", 0, 1, 1, STALE_S - 0.1)[0]
    assert t.acquire("k", "B", 0, 1, 2, STALE_S + 0.1) == (True, 1)  # A went silent
    t.report("B", {}, 3, FORGET_S + 1.0)
    assert len(t) == 1  # A dropped


def test_bad_counts_are_clamped() -> None:
    t = SlotTable()
    t.report("A", {"k": -3}, 1, 0.0)
    assert t.count("k", 0.0) == 0
    assert t.acquire("k", "B", -1, 1, 1, 0.0) == (True, 1)
