"""Version agreement between the machine that renders and the nodes that run.

Three things must name the same releases, or a fleet starts with a mismatch that shows up
as a pickling error or a missing field hours later:

* the Ray that llmfleet pins (``ray[serve]==X`` in its requirements) and the Ray of
  ``cluster.image`` when it is a ``rayproject/ray[-ml|-llm]:<version>-py<NN>...`` tag
  (the Python in the tag too: one interpreter version on every node);
* ``cluster.llmfleet_requirement`` (what the nodes ``pip install``) and this package's
  version (the code that rendered the Serve config and that ``plan`` describes).

A proven disagreement is an error; what cannot be checked (another registry's image, a
``latest`` tag, a git URL, an unpinned requirement) is a warning. ``installed()`` reads the
environment; ``check_versions`` is pure and takes it as an argument.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from importlib import metadata

from packaging.requirements import InvalidRequirement, Requirement

from cluster.deploy.findings import Finding
from cluster.deploy.settings import ClusterSection

PACKAGE = "llmfleet"
RAY_IMAGE = re.compile(
    r"^(?:(?:docker\.io|index\.docker\.io)/)?rayproject/ray(?:-ml|-llm)?:(?P<tag>[^@\s]+)"
)
TAG_VERSION = re.compile(r"^(?P<ver>\d+\.\d+\.\d+)(?P<rest>-.*)?$")
TAG_PYTHON = re.compile(r"-py(?P<py>3\d{1,2})(?:-|$)")
WHEEL_VERSION = re.compile(r"llmfleet-(?P<ver>\d[^-/]*)-[^/]*\.whl$")


@dataclass(frozen=True, slots=True)
class Installed:
    llmfleet: str | None  # this package's version; None when it is not installed
    ray_pin: str | None  # X of llmfleet's `ray[serve]==X`; None when not found
    python: str  # "311" for 3.11, as Ray's image tags spell it


def installed() -> Installed:
    try:
        version: str | None = metadata.version(PACKAGE)
        requires = metadata.requires(PACKAGE) or []
    except metadata.PackageNotFoundError:
        version, requires = None, []
    pin = None
    for text in requires:
        req = Requirement(text)
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if req.name == "ray" and not req.marker and exact:
            pin = exact[0]
    return Installed(version, pin, f"{sys.version_info.major}{sys.version_info.minor}")


def check_versions(cluster: ClusterSection, inst: Installed, engine: str) -> list[Finding]:
    out = _image(cluster.image, inst) if cluster.image else []
    if inst.llmfleet is None:
        out.append(
            Finding(
                "cluster.llmfleet_requirement",
                f"{PACKAGE} is not installed here: its version is unknown",
                False,
            )
        )
    elif cluster.llmfleet_requirement is not None:
        out += _requirement(cluster.llmfleet_requirement, inst.llmfleet, engine)
    return out


def _image(image: str, inst: Installed) -> list[Finding]:
    path = "cluster.image"
    m = RAY_IMAGE.match(image)
    if not m:
        return []  # another registry's image: plan's notes say what it must hold
    tag = TAG_VERSION.match(m["tag"])
    if not tag:
        return [
            Finding(
                path,
                f"tag {m['tag']!r} names no Ray version; pin one ({inst.ray_pin or 'the pinned Ray'})",
                False,
            )
        ]
    out = []
    if inst.ray_pin and tag["ver"] != inst.ray_pin:
        out.append(
            Finding(
                path,
                f"image has Ray {tag['ver']} but llmfleet pins ray[serve]=={inst.ray_pin}",
                True,
            )
        )
    py = TAG_PYTHON.search(tag["rest"] or "")
    if py and py["py"] != inst.python:
        out.append(
            Finding(
                path,
                f"image has Python {py['py'][0]}.{py['py'][1:]} but llmfleet runs on {inst.python[0]}.{inst.python[1:]}",
                True,
            )
        )
    return out


def _requirement(text: str, version: str, engine: str) -> list[Finding]:
    path = "cluster.llmfleet_requirement"
    wheel = WHEEL_VERSION.search(text)
    if wheel:
        if wheel["ver"] != version:
            return [Finding(path, f"wheel {wheel['ver']} but this llmfleet is {version}", True)]
        return []
    try:
        req = Requirement(text)
    except InvalidRequirement:
        return [
            Finding(
                path,
                f"{text!r} is not a requirement whose version can be checked (nodes must run llmfleet {version})",
                False,
            )
        ]
    if req.name != PACKAGE or req.url:
        return [
            Finding(
                path,
                f"cannot check the version of {text!r} (nodes must run llmfleet {version})",
                False,
            )
        ]
    out = []
    if not req.specifier:
        out.append(
            Finding(
                path,
                f"unpinned: nodes may install another version than {version}; use {PACKAGE}[gpu]=={version}",
                False,
            )
        )
    elif not req.specifier.contains(version, prereleases=True):
        out.append(
            Finding(
                path,
                f"{text!r} excludes this llmfleet {version}: the nodes would run other code than the one that rendered the config",
                True,
            )
        )
    if engine == "vllm" and "gpu" not in req.extras:
        out.append(
            Finding(path, "no [gpu] extra: the nodes get no vLLM unless the image has it", False)
        )
    return out
