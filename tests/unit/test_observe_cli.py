"""`llmfleet dashboards render` through the CLI (generators stubbed) and the usage errors of the
observability commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster import cli
from cluster.config import FleetConfig
from cluster.observe import render

FILES = {"grafana/overview.json": '{"panels": []}\n', "prometheus/rules.yaml": "groups: []\n"}


@pytest.fixture
def stub_generators(monkeypatch: pytest.MonkeyPatch) -> None:
    def generated(cfg: FleetConfig) -> dict[str, str]:
        return dict(FILES)

    monkeypatch.setattr(render, "generated", generated)


@pytest.mark.usefixtures("stub_generators")
def test_render_writes_the_files_then_check_passes_until_one_changes(
    tmp_path: Path, capsys: Any
) -> None:
    out = tmp_path / "dashboards"
    assert cli.main(["dashboards", "render", "--out", str(out)]) == 0
    assert {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} == set(FILES)
    assert str(out / "grafana/overview.json") in capsys.readouterr().out
    assert cli.main(["dashboards", "render", "--out", str(out), "--check"]) == 0
    (out / "prometheus/rules.yaml").write_text("groups: [edited]\n")
    assert cli.main(["dashboards", "render", "--out", str(out), "--check"]) == 1
    err = capsys.readouterr().err
    assert "prometheus/rules.yaml" in err
    assert "llmfleet dashboards render" in err


@pytest.mark.usefixtures("stub_generators")
def test_render_rejects_a_bad_config(tmp_path: Path, capsys: Any) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("slo:\n  ttft_s: 0.33\n")  # not a bucket boundary
    assert cli.main(["dashboards", "render", "--config", str(cfg), "--out", str(tmp_path)]) == 2
    assert "slo.ttft_s" in capsys.readouterr().err


def test_render_defaults_to_the_checkouts_dashboards_dir() -> None:
    args = cli.build_parser().parse_args(["dashboards", "render"])
    assert args.out == render.DEFAULT_DIR
    args = cli.build_parser().parse_args(
        ["dashboards", "push", "--grafana-url", "u", "--token-file", "t"]
    )
    assert args.dir == render.DEFAULT_DIR


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["dashboards"], "render"),
        (["dashboards", "publish"], "invalid choice"),
        (["report"], "--prometheus"),
        (["report", "--prometheus", "http://p", "--since", "soon"], "not a duration"),
        (["report", "--prometheus", "http://p", "--since", "0s"], "positive"),
        (["report", "--prometheus", "http://p", "--step", "fast"], "not a duration"),
        (["report", "--prometheus", "http://p", "--rate-window", "1x"], "not a duration"),
    ],
)
def test_usage_errors(argv: list[str], needle: str, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    assert needle in capsys.readouterr().err
