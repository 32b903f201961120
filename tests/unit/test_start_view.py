"""How `llmfleet up` / `status` print replicas that failed to start (``cluster/start_view.py``)."""

from __future__ import annotations

from cluster.start_view import describe, describe_serve

# Serve's message for a deployment it gave up on (captured: a broken tokenizer.json)
SERVE_MESSAGE = """\
The deployment failed to start 3 times in a row. This may be due to a problem with its \
constructor or initial health check failing. See controller logs for details. Error:
\x1b[36mray::ServeReplica:llmfleet:OpenAIIngress.initialize_and_get_metadata()\x1b[39m (pid=1)
RuntimeError: Traceback (most recent call last):
  File "/x/ray/serve/_private/replica.py", line 1, in initialize_and_get_metadata
    raise RuntimeError(traceback.format_exc()) from None
Exception: key must be a string at line 1 column 3
"""


def test_serve_s_message_is_cut_to_the_exception_the_constructor_raised() -> None:
    got = describe_serve({"OpenAIIngress": SERVE_MESSAGE, "X": "no exception here\nmore"})
    assert got == [
        "  OpenAIIngress: Exception: key must be a string at line 1 column 3",
        "  X: no exception here",
    ]


def test_each_failed_start_shows_its_error_cause_and_log() -> None:
    rows = [
        {"replica": "aaaa", "failed_at": 40.0, "error": "OSError: disk"},
        {
            "replica": "vcqqryw8",
            "failed_at": 95.0,
            "error": "RuntimeError: Engine core initialization failed. See root cause above.",
            "root_cause": "RuntimeError: Cannot find any model weights with `/m`",
            "log": "/tmp/ray/session_x/logs/worker-1-2.out",
        },
    ]
    assert describe([], now=100.0) == []
    assert describe(rows, now=100.0) == [
        "replicas that failed to start since one last started: 2",
        "  aaaa (60 s ago): OSError: disk",
        "  vcqqryw8 (5 s ago): RuntimeError: Engine core initialization failed. See root cause above.",
        "    cause in its log: RuntimeError: Cannot find any model weights with `/m`",
        "    log: /tmp/ray/session_x/logs/worker-1-2.out",
    ]
    newest = describe(rows, now=100.0, newest_only=True)
    assert newest[0].endswith(": 2 (the newest below)")
    assert len(newest) == 4
    assert "aaaa" not in "".join(newest)
