"""``llmfleet dashboards push``: upload the generated Grafana dashboards to a Grafana server.

Calls made (Grafana's HTTP API through ``grafana-client``, bearer-token auth):

    GET  /api/folders              find the folder by uid or title
    POST /api/folders              create it when missing ({title, uid})
    POST /api/dashboards/db        once per dashboard: {dashboard, folderUid, overwrite: true}

Contract
- Idempotent: a second push finds the folder and overwrites each dashboard (same uid).
- The token is read from ``--token-file``, stripped, and sent only in the Authorization
  header: never printed, logged or put into an error message. A file that group or others
  may read (``mode & 0o077``) is refused unless ``--allow-insecure-token-file``.
- ``--datasource-uid`` sets the default (``current``) of each datasource-type template
  variable, so the dashboards open on that Prometheus.
- One line per dashboard on stdout: its title and URL. Any failure is one ``llmfleet: ...``
  line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


class PushError(Exception):
    """A failure to report as one line (never carries the token)."""


@dataclass(frozen=True, slots=True)
class Pushed:
    title: str
    url: str


def add_arguments(parser: argparse.ArgumentParser, default_dir: Path) -> None:
    a = parser.add_argument
    a("--grafana-url", required=True, help="Grafana base URL, e.g. http://grafana:3000")
    a("--token-file", required=True, type=Path, help="file holding a service-account token")
    a("--folder", default="llmfleet", help="folder title (created when missing)")
    a("--dir", type=Path, default=default_dir, help=f"dashboards to push (default: {default_dir})")
    a("--datasource-uid", default=None, help="default of the dashboards' datasource variable")
    a("--timeout", type=float, default=10.0, help="per-request timeout (s)")
    a(
        "--allow-insecure-token-file",
        action="store_true",
        help="accept a token file that group or others can read",
    )


def read_token(path: Path, *, allow_insecure: bool = False) -> str:
    try:
        mode = path.stat().st_mode
    except OSError as err:
        raise PushError(f"cannot read the token file {path}: {err.strerror}") from None
    if mode & 0o077 and not allow_insecure:
        raise PushError(
            f"token file {path} is accessible by group or others (mode {stat.filemode(mode)}); "
            f"run `chmod 600 {path}` or pass --allow-insecure-token-file"
        )
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as err:
        raise PushError(f"cannot read the token file {path}: {err}") from None
    if not token:
        raise PushError(f"token file {path} is empty")
    return token


def load_dashboards(directory: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every ``*.json`` under ``directory`` that is a Grafana dashboard (has ``panels``)."""
    if not directory.is_dir():
        raise PushError(f"no dashboards directory {directory} (run `llmfleet dashboards render`)")
    found = []
    for path in sorted(directory.rglob("*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError as err:
            raise PushError(f"{path} is not valid JSON: {err}") from None
        if isinstance(data, dict) and "panels" in data:
            found.append((path, data))
    if not found:
        raise PushError(f"no Grafana dashboards (*.json with panels) under {directory}")
    return found


def folder_uid(title: str) -> str:
    """A stable folder uid from its title (Grafana allows [a-zA-Z0-9-_], 40 characters)."""
    return re.sub(r"[^a-zA-Z0-9_-]+", "-", title).strip("-")[:40] or "llmfleet"


def with_datasource(dashboard: dict[str, Any], uid: str) -> tuple[dict[str, Any], int]:
    """A copy whose datasource variables default to ``uid``; and how many were set."""
    out = json.loads(json.dumps(dashboard))
    count = 0
    for var in out.get("templating", {}).get("list", []):
        if var.get("type") == "datasource":
            var["current"] = {"selected": True, "text": uid, "value": uid}
            count += 1
    return out, count


def dashboard_url(grafana_url: str, path: str) -> str:
    """Grafana answers a path (``/d/uid/slug``, with its sub-path when it serves from one)."""
    base = grafana_url.rstrip("/")
    if not path.startswith("/"):
        return f"{base}/{path}"
    parts = urlsplit(base)
    if parts.path and path.startswith(parts.path + "/"):
        return f"{parts.scheme}://{parts.netloc}{path}"
    return base + path


def ensure_folder(api: Any, title: str) -> str:
    uid = folder_uid(title)
    for folder in api.folder.get_all_folders():
        if folder.get("uid") == uid or folder.get("title") == title:
            return str(folder["uid"])
    created = api.folder.create_folder(title, uid=uid)
    return str(created.get("uid", uid))


def push(
    api: Any,
    grafana_url: str,
    dashboards: list[tuple[Path, dict[str, Any]]],
    folder: str,
    datasource_uid: str | None = None,
) -> list[Pushed]:
    uid = ensure_folder(api, folder)
    done = []
    for path, dashboard in dashboards:
        body = dict(dashboard)
        if datasource_uid:
            body, count = with_datasource(body, datasource_uid)
            if not count:
                print(f"llmfleet: {path.name} has no datasource variable", file=sys.stderr)
        body["id"] = None  # matched by uid; a numeric id from another Grafana would clash
        answer = api.dashboard.update_dashboard(
            {"dashboard": body, "folderUid": uid, "overwrite": True, "message": "llmfleet push"}
        )
        title = str(body.get("title", path.stem))
        done.append(Pushed(title, dashboard_url(grafana_url, str(answer.get("url", "")))))
    return done


def _explain(err: Exception, grafana_url: str) -> str:
    import niquests
    from grafana_client.client import GrafanaException, GrafanaTimeoutError

    if isinstance(err, GrafanaTimeoutError):
        return f"Grafana at {grafana_url} timed out"
    if isinstance(err, GrafanaException):
        status = err.status_code
        if status == 401:
            return f"Grafana at {grafana_url} answered 401 Unauthorized: check the token"
        if status == 403:
            return f"Grafana at {grafana_url} answered 403 Forbidden: the token lacks the rights (Editor or Admin)"
        if status:
            return f"Grafana at {grafana_url} answered {status}: {err.message}"
        return f"Grafana at {grafana_url}: {err.message}"
    if isinstance(err, niquests.exceptions.RequestException):
        return f"Grafana at {grafana_url} is unreachable ({type(err).__name__})"
    return f"Grafana at {grafana_url}: unexpected answer ({type(err).__name__})"


def run(args: argparse.Namespace) -> int:
    from grafana_client import GrafanaApi

    try:
        token = read_token(args.token_file, allow_insecure=args.allow_insecure_token_file)
        dashboards = load_dashboards(args.dir)
        if urlsplit(args.grafana_url).scheme not in ("http", "https"):
            raise PushError(f"--grafana-url {args.grafana_url!r} is not an http(s) URL")
        api = GrafanaApi.from_url(args.grafana_url, credential=token, timeout=args.timeout)
        try:
            pushed = push(api, args.grafana_url, dashboards, args.folder, args.datasource_uid)
        except Exception as err:  # grafana-client and niquests errors, explained below
            raise PushError(_explain(err, args.grafana_url)) from None
    except PushError as err:
        print(f"llmfleet: {err}", file=sys.stderr)
        return 1
    for item in pushed:
        print(f"{item.title}: {item.url}", flush=True)
    return 0
