"""A minimal kustomize build for the layouts llmfleet renders, for machines without
``kustomize`` or ``kubectl kustomize``: ``resources`` (files and directories holding a
``kustomization.yaml``) and ``patches`` given as a file of JSON6902 operations (add,
remove, replace, test) with a ``target`` (kind, name, optional group/version).

Anything else in a kustomization (strategic-merge patches, generators, ``namespace:``,
labels, images, ...) is reported as unsupported rather than ignored, so a build here never
silently differs from kustomize's. Where ``kubectl`` exists the tests build the same
directories with ``kubectl kustomize`` and compare.

Contract: ``build(dir)`` returns (resources, problems); each resource keeps the file it came
from; a problem names the kustomization file and the entry at fault.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

KUSTOMIZATION = "kustomization.yaml"
SUPPORTED = {"apiVersion", "kind", "resources", "patches"}
_OPS = {"add", "remove", "replace", "test"}


@dataclass(slots=True)
class Resource:
    source: Path  # the file the document came from
    doc: dict[str, Any]

    @property
    def key(self) -> str:
        meta = self.doc.get("metadata") or {}
        return f"{self.doc.get('kind')}/{meta.get('name')}"


class PatchError(ValueError):
    pass


def build(kdir: Path, _seen: frozenset[Path] = frozenset()) -> tuple[list[Resource], list[str]]:
    kfile = kdir / KUSTOMIZATION
    if kdir.resolve() in _seen:
        return [], [f"{kfile}: resources form a cycle"]
    try:
        k = yaml.safe_load(kfile.read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        return [], [f"{kfile}: cannot read: {err}"]
    problems = [
        f"{kfile}: {key}: not supported by the built-in kustomize check"
        for key in sorted(set(k) - SUPPORTED)
    ]
    out: list[Resource] = []
    for i, ref in enumerate(k.get("resources") or []):
        path = kdir / str(ref)
        if path.is_dir():
            sub, errs = build(path, _seen | {kdir.resolve()})
            out += sub
            problems += errs
        elif path.is_file():
            out += [Resource(path, d) for d in yaml.safe_load_all(path.read_text()) if d]
        else:
            problems.append(f"{kfile}: resources[{i}]: {ref} does not exist")
    for i, patch in enumerate(k.get("patches") or []):
        problems += _patch(kfile, f"patches[{i}]", patch, out)
    return out, problems


def _patch(kfile: Path, at: str, patch: Any, resources: list[Resource]) -> list[str]:
    where = f"{kfile}: {at}"
    if not isinstance(patch, dict) or "path" not in patch:
        return [f"{where}: only file patches (path: ...) are supported by the built-in check"]
    path = kfile.parent / str(patch["path"])
    if not path.is_file():
        return [f"{where}: patch file {patch['path']} does not exist"]
    ops = yaml.safe_load(path.read_text())
    if not isinstance(ops, list):
        return [f"{where}: {patch['path']} is not a JSON6902 list (strategic merge unsupported)"]
    matches = [r for r in resources if _matches(patch.get("target") or {}, r.doc)]
    if len(matches) != 1:
        return [f"{where}: target {patch.get('target')} matches {len(matches)} resources, not 1"]
    try:
        matches[0].doc = apply_json6902(matches[0].doc, ops)
    except PatchError as err:
        return [f"{where}: {patch['path']}: {err}"]
    return []


def _matches(target: dict[str, Any], doc: dict[str, Any]) -> bool:
    group, _, version = str(doc.get("apiVersion", "")).rpartition("/")
    meta = doc.get("metadata") or {}
    wanted = {"kind": doc.get("kind"), "name": meta.get("name"), "group": group, "version": version}
    return bool(target) and all(wanted.get(key) == value for key, value in target.items())


def apply_json6902(doc: dict[str, Any], ops: list[Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for n, op in enumerate(ops):
        if not isinstance(op, dict) or op.get("op") not in _OPS or "path" not in op:
            raise PatchError(f"op {n}: {op!r} is not one of {sorted(_OPS)} with a path")
        try:
            out = _apply(out, op)
        except (KeyError, IndexError, TypeError, ValueError) as err:
            raise PatchError(f"op {n} ({op['op']} {op['path']}): {err}") from None
    return out


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ValueError("a JSON pointer starts with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _apply(doc: Any, op: dict[str, Any]) -> Any:
    *parents, last = _pointer(op["path"])
    node = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    kind = op["op"]
    if isinstance(node, list):
        if kind == "add":
            node.insert(len(node) if last == "-" else _index(last, len(node) + 1), op["value"])
        elif kind == "remove":
            del node[_index(last, len(node))]
        elif kind == "replace":
            node[_index(last, len(node))] = op["value"]
        elif node[_index(last, len(node))] != op["value"]:
            raise ValueError(f"test failed: {node[_index(last, len(node))]!r} != {op['value']!r}")
        return doc
    if not isinstance(node, dict):
        raise TypeError(f"{type(node).__name__} has no member {last}")
    if kind in ("remove", "replace", "test") and last not in node:
        raise KeyError(f"no {last}")
    if kind == "remove":
        del node[last]
    elif kind == "test" and node[last] != op["value"]:
        raise ValueError(f"test failed: {node[last]!r} != {op['value']!r}")
    elif kind in ("add", "replace"):
        node[last] = op["value"]
    return doc


def _index(part: str, bound: int) -> int:
    i = int(part)
    if not 0 <= i < bound:
        raise IndexError(f"index {i} out of range")
    return i
