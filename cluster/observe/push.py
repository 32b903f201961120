"""``llmfleet dashboards push``: upload the generated Grafana dashboards to a Grafana server.

Calls made (Grafana's HTTP API, bearer-token auth, with ``httpx``; ``grafana-client`` was
tried first and dropped: it depends on ``niquests``, whose ``urllib3-future`` replaces the
``urllib3`` package of the whole environment and broke ``requests`` users such as
``schemathesis``):

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


class GrafanaError(Exception):
    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class GrafanaHTTP:
    """The three calls ``push`` makes, on Grafana's HTTP API."""

    def __init__(self, url: str, token: str, timeout: float) -> None:
        import httpx

        self.client = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            timeout=timeout,
        )

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        resp = self.client.request(method, path, json=body)
        if resp.status_code >= 400:
            try:
                message = str(resp.json().get("message", ""))
            except ValueError:
                message = resp.text[:200]
            raise GrafanaError(resp.status_code, message)
        return resp.json()

    def get_all_folders(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/api/folders"))

    def create_folder(self, title: str, uid: str) -> dict[str, Any]:
        return dict(self._call("POST", "/api/folders", {"title": title, "uid": uid}))

    def update_dashboard(self, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self._call("POST", "/api/dashboards/db", body))

    def close(self) -> None:
        self.client.close()


def ensure_folder(api: Any, title: str) -> str:
    uid = folder_uid(title)
    for folder in api.get_all_folders():
        if folder.get("uid") == uid or folder.get("title") == title:
            return str(folder["uid"])
    created = api.create_folder(title, uid=uid)
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
        answer = api.update_dashboard(
            {"dashboard": body, "folderUid": uid, "overwrite": True, "message": "llmfleet push"}
        )
        title = str(body.get("title", path.stem))
        done.append(Pushed(title, dashboard_url(grafana_url, str(answer.get("url", "")))))
    return done


def _explain(err: Exception, grafana_url: str) -> str:
    import httpx

    if isinstance(err, httpx.TimeoutException):
        return f"Grafana at {grafana_url} timed out"
    if isinstance(err, GrafanaError):
        status = err.status
        if status == 401:
            return f"Grafana at {grafana_url} answered 401 Unauthorized: check the token"
        if status == 403:
            return f"Grafana at {grafana_url} answered 403 Forbidden: the token lacks the rights (Editor or Admin)"
        return f"Grafana at {grafana_url} answered {status}: {err.message}"
    if isinstance(err, httpx.HTTPError):
        return f"Grafana at {grafana_url} is unreachable ({type(err).__name__})"
    return f"Grafana at {grafana_url}: unexpected answer ({type(err).__name__})"


def run(args: argparse.Namespace) -> int:
    try:
        token = read_token(args.token_file, allow_insecure=args.allow_insecure_token_file)
        dashboards = load_dashboards(args.dir)
        if urlsplit(args.grafana_url).scheme not in ("http", "https"):
            raise PushError(f"--grafana-url {args.grafana_url!r} is not an http(s) URL")
        api = GrafanaHTTP(args.grafana_url, token, args.timeout)
        try:
            pushed = push(api, args.grafana_url, dashboards, args.folder, args.datasource_uid)
        except Exception as err:  # HTTP and Grafana errors, explained below
            raise PushError(_explain(err, args.grafana_url)) from None
        finally:
            api.close()
    except PushError as err:
        print(f"llmfleet: {err}", file=sys.stderr)
        return 1
    for item in pushed:
        print(f"{item.title}: {item.url}", flush=True)
    return 0
