"""`llmfleet dashboards push` against a Grafana stand-in on 127.0.0.1: the calls it makes, the
bearer token, overwrite into the folder, a second push that changes nothing but versions, and
the refusals (401, unreachable, a token file others can read)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from cluster import cli
from cluster.observe.prometheus import free_port

TOKEN = "glsa_s3cr3t-token-value"


@dataclass
class Call:
    method: str
    path: str
    auth: str
    body: Any


@dataclass
class GrafanaState:
    token: str
    calls: list[Call] = field(default_factory=list)
    folders: list[dict[str, Any]] = field(default_factory=list)
    dashboards: dict[str, dict[str, Any]] = field(default_factory=dict)


class _Handler(BaseHTTPRequestHandler):
    state: GrafanaState

    def log_message(self, *_: Any) -> None:
        pass

    def _answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body: Any = json.loads(self.rfile.read(length)) if length else {}
        auth = self.headers.get("Authorization", "")
        st = self.state
        st.calls.append(Call(method, self.path, auth, body))
        if auth != f"Bearer {st.token}":
            return self._answer(401, {"message": "Invalid API key"})
        path = self.path.split("?")[0]
        if (method, path) == ("GET", "/api/folders"):
            return self._answer(200, st.folders)
        if (method, path) == ("POST", "/api/folders"):
            if any(f["uid"] == body["uid"] or f["title"] == body["title"] for f in st.folders):
                return self._answer(409, {"message": "a folder with the same name already exists"})
            folder = {"id": len(st.folders) + 1, "uid": body["uid"], "title": body["title"]}
            st.folders.append(folder)
            return self._answer(200, {**folder, "url": f"/dashboards/f/{body['uid']}/"})
        if (method, path) == ("POST", "/api/dashboards/db"):
            return self._save_dashboard(body)
        return self._answer(404, {"message": "Not found"})

    def _save_dashboard(self, body: dict[str, Any]) -> None:
        st = self.state
        dash = body["dashboard"]
        uid = dash["uid"]
        if uid in st.dashboards and not body.get("overwrite"):
            return self._answer(412, {"message": "The dashboard has been changed by someone else"})
        if not any(f["uid"] == body.get("folderUid") for f in st.folders):
            return self._answer(400, {"message": "folder not found"})
        version = st.dashboards.get(uid, {}).get("version", 0) + 1
        st.dashboards[uid] = {"dashboard": dash, "folderUid": body["folderUid"], "version": version}
        slug = dash["title"].lower().replace(" ", "-")
        self._answer(
            200,
            {
                "id": 1,
                "uid": uid,
                "url": f"/d/{uid}/{slug}",
                "status": "success",
                "version": version,
            },
        )

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")


@pytest.fixture
def grafana() -> Iterator[tuple[str, GrafanaState]]:
    state = GrafanaState(TOKEN)
    handler = type("Handler", (_Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", state
    server.shutdown()
    server.server_close()


def _dashboard(uid: str, title: str) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "id": 42,
        "panels": [{"type": "timeseries", "title": "P95 TTFT"}],
        "templating": {
            "list": [{"name": "datasource", "type": "datasource", "query": "prometheus"}]
        },
    }


@pytest.fixture
def dash_dir(tmp_path: Path) -> Path:
    d = tmp_path / "dashboards"
    (d / "rules").mkdir(parents=True)
    (d / "overview.json").write_text(json.dumps(_dashboard("llmfleet-overview", "Overview")))
    (d / "engine.json").write_text(json.dumps(_dashboard("llmfleet-engine", "Engine")))
    (d / "rules" / "not-a-dashboard.json").write_text(json.dumps({"groups": []}))
    return d


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(f"  {TOKEN}\n")
    path.chmod(0o600)
    return path


def push(url: str, token_file: Path, dash_dir: Path, *extra: str) -> int:
    return cli.main(
        [
            "dashboards",
            "push",
            "--grafana-url",
            url,
            "--token-file",
            str(token_file),
            "--dir",
            str(dash_dir),
            *extra,
        ]
    )


def test_push_creates_the_folder_and_uploads_each_dashboard_with_overwrite(
    grafana: tuple[str, GrafanaState], token_file: Path, dash_dir: Path, capsys: Any
) -> None:
    url, state = grafana
    assert push(url, token_file, dash_dir) == 0
    assert [(c.method, c.path) for c in state.calls] == [
        ("GET", "/api/folders"),
        ("POST", "/api/folders"),
        ("POST", "/api/dashboards/db"),
        ("POST", "/api/dashboards/db"),
    ]
    assert {c.auth for c in state.calls} == {f"Bearer {TOKEN}"}  # stripped token, bearer
    assert state.calls[1].body == {"title": "llmfleet", "uid": "llmfleet"}
    uploads = [c.body for c in state.calls[2:]]
    assert all(b["overwrite"] is True and b["folderUid"] == "llmfleet" for b in uploads)
    assert all(b["dashboard"]["id"] is None for b in uploads)  # matched by uid, not id
    assert sorted(state.dashboards) == ["llmfleet-engine", "llmfleet-overview"]
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"Engine: {url}/d/llmfleet-engine/engine",
        f"Overview: {url}/d/llmfleet-overview/overview",
    ]
    assert TOKEN not in out + err


def test_a_second_push_reuses_the_folder_and_overwrites(
    grafana: tuple[str, GrafanaState], token_file: Path, dash_dir: Path
) -> None:
    url, state = grafana
    assert push(url, token_file, dash_dir) == 0
    state.calls.clear()
    assert push(url, token_file, dash_dir) == 0
    assert [(c.method, c.path) for c in state.calls] == [
        ("GET", "/api/folders"),
        ("POST", "/api/dashboards/db"),
        ("POST", "/api/dashboards/db"),
    ]
    assert len(state.folders) == 1
    assert {d["version"] for d in state.dashboards.values()} == {2}


def test_an_existing_folder_of_that_title_is_used_whatever_its_uid(
    grafana: tuple[str, GrafanaState], token_file: Path, dash_dir: Path
) -> None:
    url, state = grafana
    state.folders.append({"id": 7, "uid": "abc123", "title": "LLM fleet"})
    assert push(url, token_file, dash_dir, "--folder", "LLM fleet") == 0
    assert "POST /api/folders" not in {f"{c.method} {c.path}" for c in state.calls}
    assert {d["folderUid"] for d in state.dashboards.values()} == {"abc123"}


def test_datasource_uid_becomes_the_variable_default(
    grafana: tuple[str, GrafanaState], token_file: Path, dash_dir: Path
) -> None:
    url, state = grafana
    assert push(url, token_file, dash_dir, "--datasource-uid", "prom-main") == 0
    for saved in state.dashboards.values():
        (var,) = saved["dashboard"]["templating"]["list"]
        assert var["current"]["value"] == "prom-main"
    on_disk = json.loads((dash_dir / "overview.json").read_text())
    assert "current" not in on_disk["templating"]["list"][0]  # the files are left alone


def test_a_bad_token_is_a_clear_401_and_exit_1(
    grafana: tuple[str, GrafanaState], tmp_path: Path, dash_dir: Path, capsys: Any
) -> None:
    url, state = grafana
    bad = tmp_path / "bad-token"
    bad.write_text("wrong-token-zzz\n")
    bad.chmod(0o600)
    assert push(url, bad, dash_dir) == 1
    _, err = capsys.readouterr()
    assert "401" in err
    assert url in err
    assert "wrong-token-zzz" not in err
    assert not state.dashboards


def test_an_unreachable_grafana_says_so(token_file: Path, dash_dir: Path, capsys: Any) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert push(url, token_file, dash_dir, "--timeout", "3") == 1
    _, err = capsys.readouterr()
    assert "unreachable" in err
    assert url in err
    assert TOKEN not in err


def test_a_token_file_others_can_read_is_refused(
    grafana: tuple[str, GrafanaState], token_file: Path, dash_dir: Path, capsys: Any
) -> None:
    url, state = grafana
    token_file.chmod(0o644)
    assert push(url, token_file, dash_dir) == 1
    _, err = capsys.readouterr()
    assert "chmod 600" in err
    assert "--allow-insecure-token-file" in err
    assert TOKEN not in err
    assert not state.calls  # refused before any request
    assert push(url, token_file, dash_dir, "--allow-insecure-token-file") == 0


def test_missing_or_empty_inputs_are_clear_errors(
    grafana: tuple[str, GrafanaState], token_file: Path, tmp_path: Path, capsys: Any
) -> None:
    url, state = grafana
    assert push(url, tmp_path / "nope", tmp_path) == 1
    assert "cannot read the token file" in capsys.readouterr().err
    assert push(url, token_file, tmp_path / "missing") == 1
    assert "llmfleet dashboards render" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert push(url, token_file, empty) == 1
    assert "no Grafana dashboards" in capsys.readouterr().err
    assert not state.calls


def test_push_usage_errors(capsys: Any) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["dashboards", "push", "--grafana-url", "http://127.0.0.1:1"])
    assert exc.value.code == 2
    assert "--token-file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        cli.main(["dashboards", "push", "--token-file", "t"])
    assert exc.value.code == 2
