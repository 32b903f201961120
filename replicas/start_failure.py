"""Why a replica could not start, in one line an operator can act on.

The exception a replica's constructor gets is often a wrapper: vLLM raises "Engine core
initialization failed. See root cause above." and the cause (say, "RuntimeError: Cannot
find any model weights with `…`") is only in the log lines its engine processes wrote.
Those processes inherit the replica's stdout and stderr, which Ray points at the worker's
log files (``…/logs/worker-…-<pid>.out`` / ``.err``): ``own_logs`` finds them through
``/proc/self/fd``, ``root_cause`` picks the first exception line in their tail (the
innermost cause comes first; the wrappers re-raise it later).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

TAIL_BYTES = 256 * 1024  # of each log file: a start's own lines are at its end
# "(Worker pid=1) ERROR 12-05 21:00:04 [file.py:953] RuntimeError: …" → "RuntimeError: …"
_PREFIX = re.compile(
    r"^(\([^)]*\)\s+)?([A-Z]+\s+\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?\s+\[[^\]]*\]\s+)?"
)
_EXCEPTION = re.compile(r"^((?:[A-Za-z_][\w.]*)?(?:Error|Exception)): (\S.*)$")
_WRAPPERS = ("See root cause above", "See stack trace for root cause")


def exception_lines(lines: Iterable[str]) -> list[str]:
    """Each ``SomethingError: message`` line, its log prefix cut, except a wrapper's pointer
    to another and Ray's "RuntimeError: Traceback (most recent call last):" heading."""
    found = []
    for line in lines:
        text = _PREFIX.sub("", line.rstrip("\n")).strip()
        m = _EXCEPTION.match(text)
        if (
            m
            and not m.group(2).startswith("Traceback")
            and not any(w in m.group(2) for w in _WRAPPERS)
        ):
            found.append(text)
    return found


def root_cause(lines: Iterable[str]) -> str | None:
    """The first exception line: the innermost cause (the wrappers re-raise it later)."""
    found = exception_lines(lines)
    return found[0] if found else None


def own_logs() -> list[Path]:
    """The files this process's stdout and stderr write to (Ray's worker logs), if files."""
    out: list[Path] = []
    for fd in (1, 2):
        try:
            target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
        if target.is_file() and target not in out:
            out.append(target)
    return out


def tail_lines(path: Path, limit: int = TAIL_BYTES) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - limit))
            return f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def diagnose(err: BaseException, max_chars: int) -> dict[str, str]:
    """``error`` (what the constructor raised), ``root_cause`` (from the logs, when it says
    more) and ``log`` (where to read the rest), each at most ``max_chars``."""

    def cut(text: str) -> str:
        return text if len(text) <= max_chars else text[: max_chars - 1] + "…"

    error = f"{type(err).__name__}: {err}".strip()
    found: dict[str, str] = {"error": cut(error)}
    logs = own_logs()
    for path in logs:
        cause = root_cause(tail_lines(path))
        if cause and cause not in error:
            found["root_cause"] = cut(cause)
            break
    if logs:
        found["log"] = str(logs[0])
    return found
