"""Ray Serve application builder: what ``serve deploy`` / ``serve run`` / a KubeRay
RayService import (``import_path: cluster.serve_entry:app``) with the rendered ``args``.

Serve calls ``app(args)`` in a build task on a node it picks (the head, usually: no GPU),
then applies the config file's ``deployments:`` options on top of what the builder set;
``cluster.deploy.serve_config`` renders the resources and the GPU block size so nothing
here depends on the build node's hardware.

Contract:
- ``args["config"]`` is an llmfleet config as a mapping (parsed with ``parse_config``; a bad
  one fails the build naming the field path).
- ``args["llmfleet_version"]``, when present, must be this package's version: a node
  running other llmfleet code than the one that rendered the file refuses to build.
- Secure by default, as ``llmfleet up``: an API on a non-loopback host with no keys (no
  ``server.api_keys_file``, no ``LLMFLEET_API_KEYS``) refuses to build unless the config
  sets ``server.allow_unauthenticated`` (found reading the deploy path: a ``ray up`` fleet
  with ``server.host: 0.0.0.0`` and no keys served an open API; only ``up`` checked).
"""

from __future__ import annotations

from importlib import metadata
from typing import Any


def app(args: dict[str, Any]) -> Any:  # a serve.Application (Ray leaves build_app untyped)
    from cluster.app import build_app
    from cluster.config import parse_config
    from cluster.runtime import check_deploy_exposure

    rendered = args.get("llmfleet_version")
    here = metadata.version("llmfleet")
    if rendered is not None and rendered != here:
        raise ValueError(
            f"the Serve config was rendered by llmfleet {rendered} but this node runs {here}; "
            "re-render it (llmfleet deploy render --target serve) or install the same version"
        )
    cfg = parse_config(args.get("config"))
    check_deploy_exposure(cfg)
    return build_app(cfg)
