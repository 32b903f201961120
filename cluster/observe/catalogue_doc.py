"""The metric catalogue as a markdown table (``docs/observability.md`` embeds it; a unit test
keeps them equal): ``python -m cluster.observe.catalogue_doc``."""

from __future__ import annotations

from contracts.metrics import CATALOGUE


def markdown() -> str:
    lines = [
        "| Prometheus name | type | unit | our labels | recorded by | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for m in CATALOGUE:
        labels = ", ".join(f"`{lab}`" for lab in m.labels) or "—"
        lines.append(
            f"| `{m.exported}` | {m.kind} | {m.unit} | {labels} | {m.source} | {m.description} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
