"""StallWatch: work without steps is a stall; idle or progressing is not."""

from __future__ import annotations

from replicas.stall import StallWatch


def test_stall_needs_work_and_no_steps() -> None:
    w = StallWatch(timeout_s=5.0)
    assert w.observe(ongoing=0, steps=10, now=0.0) == 0.0
    assert w.observe(ongoing=0, steps=10, now=100.0) == 0.0  # idle is not stuck
    assert w.observe(ongoing=2, steps=10, now=100.0) == 0.0  # work arrives
    assert w.observe(ongoing=2, steps=11, now=103.0) == 0.0  # and it steps
    assert w.observe(ongoing=2, steps=11, now=106.0) == 3.0
    assert not w.stalled(ongoing=2, steps=11, now=107.0)
    assert w.stalled(ongoing=2, steps=11, now=108.5)
    assert not w.stalled(ongoing=2, steps=12, now=109.0)  # progress resets it
