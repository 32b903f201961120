"""Print the config reference (markdown) from the pydantic models: `python -m cluster.config_doc`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from cluster.config import FleetConfig


def rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    instance: Any = model()
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.extend(rows(ann, path + "."))
            continue
        default = getattr(instance, name)
        out.append(
            (
                path,
                repr(default) if not isinstance(default, str) else default,
                field.description or "",
            )
        )
    return out


def markdown() -> str:
    lines = ["| field | default | meaning |", "|---|---|---|"]
    lines += [f"| `{p}` | `{d}` | {m} |" for p, d, m in rows(FleetConfig)]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
