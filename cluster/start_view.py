"""Replicas that failed to start, as ``llmfleet status`` and ``llmfleet up`` print them.

Reads the status actor's ``start_failures`` rows (``replicas/start_failure.py`` fills them:
``error``, and where the log says more, ``root_cause`` and ``log``), and Serve's message for
a deployment it gave up starting (an ingress replica that cannot start has no row); pure.
"""

from __future__ import annotations

from typing import Any

from replicas.start_failure import exception_lines


def describe(failures: list[dict[str, Any]], now: float, newest_only: bool = False) -> list[str]:
    if not failures:
        return []
    shown = failures[-1:] if newest_only else failures
    lines = [
        f"replicas that failed to start since one last started: {len(failures)}"
        + (" (the newest below)" if newest_only and len(failures) > 1 else "")
    ]
    for f in shown:
        age = max(0.0, now - float(f.get("failed_at", now)))
        lines.append(
            f"  {str(f.get('replica', '?'))[:12]} ({age:.0f} s ago): {f.get('error', '?')}"
        )
        if f.get("root_cause"):
            lines.append(f"    cause in its log: {f['root_cause']}")
        if f.get("log"):
            lines.append(f"    log: {f['log']}")
    return lines


def describe_serve(failed: dict[str, str]) -> list[str]:
    """One line per deployment Serve gave up starting: the last exception in its message
    (the one the constructor raised; Serve wraps it in "RuntimeError: Traceback …")."""
    lines = []
    for name, message in sorted(failed.items()):
        found = exception_lines(message.splitlines())
        lines.append(f"  {name}: {found[-1] if found else message.splitlines()[0][:300]}")
    return lines
