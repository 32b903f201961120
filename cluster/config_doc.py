"""Print the config reference (markdown) from the pydantic models: `python -m cluster.config_doc`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from cluster.config import FleetConfig


def rows(
    model: type[BaseModel], prefix: str = "", instance: Any = None
) -> list[tuple[str, str, str]]:
    """Every leaf field with its default (a nested section's defaults are its parent's
    default for it, e.g. the head node type's, not the node type model's)."""
    out: list[tuple[str, str, str]] = []
    instance = model() if instance is None else instance
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.extend(rows(ann, path + ".", getattr(instance, name)))
            continue
        default = getattr(instance, name)
        if isinstance(default, list) and default and isinstance(default[0], BaseModel):
            default = [f"{type(d).__name__}({getattr(d, 'name', '…')})" for d in default]
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
