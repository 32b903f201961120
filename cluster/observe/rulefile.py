"""A Prometheus rule file as typed values, and its stable YAML text.

    Group(name, rules=(Record | Alert, ...))  ──dump_yaml──►  groups:
                                                              - name: ...
                                                                rules:
                                                                - record: llmfleet:...
                                                                  expr: |
                                                                    ...

``alerts.py`` builds the groups, ``alert_tests.py`` reads the same ``Alert`` values to write
the annotations a ``promtool test rules`` case expects (``expand`` mirrors the few template
forms the annotations use). Output is stable: key order as built, multi-line expressions as
literal blocks, no line wrapping.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml


@dataclass(frozen=True, slots=True)
class Record:
    record: str
    expr: str

    def to_dict(self) -> dict[str, Any]:
        return {"record": self.record, "expr": self.expr}


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    expr: str
    for_: str  # "" for none
    severity: str  # page | ticket
    summary: str
    description: str
    labels: tuple[tuple[str, str], ...] = ()  # static labels besides severity

    def all_labels(self) -> dict[str, str]:
        return {"severity": self.severity, **dict(self.labels)}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_:
            out["for"] = self.for_
        out["labels"] = self.all_labels()
        out["annotations"] = {"summary": self.summary, "description": self.description}
        return out


@dataclass(frozen=True, slots=True)
class Group:
    name: str
    rules: tuple[Record | Alert, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "rules": [r.to_dict() for r in self.rules]}


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(data: Any, header: str = "") -> str:
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, width=10_000, allow_unicode=True)
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    return "\n".join(lines) + ("\n" if lines else "") + body


def rules_yaml(groups: list[Group], header: str = "") -> str:
    return dump_yaml({"groups": [g.to_dict() for g in groups]}, header)


# ---- the template forms annotations use, for expected values in rule tests ------------
_TEMPLATE = re.compile(r"{{\s*\$(labels\.(\w+)|value)\s*(\|\s*(\w+)\s*)?}}")


def go_float(v: float) -> str:
    """A float as Go's ``%v`` prints it (what ``{{ $value }}`` gives), for our values."""
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def humanize_percentage(v: float) -> str:
    return f"{v * 100:.4g}%"


def expand(template: str, labels: dict[str, str], value: float) -> str:
    """Expand ``{{ $labels.x }}``, ``{{ $value }}`` and ``{{ $value | humanizePercentage }}``."""

    def one(m: re.Match[str]) -> str:
        if m.group(2):
            return labels.get(m.group(2), "")
        if m.group(4) == "humanizePercentage":
            return humanize_percentage(value)
        if m.group(4):
            raise ValueError(f"template function {m.group(4)} is not mirrored here")
        return go_float(value)

    return _TEMPLATE.sub(one, template)
