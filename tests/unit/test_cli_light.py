"""`llmfleet status` and `llmfleet down` are what operators run often and scripts poll: they
must not pay for the other commands' imports (Ray, matplotlib, the load generator), which
made `status` take ~4 s on a 2-core machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("ray", "matplotlib", "bench", "vllm", "torch")


def _modules_after(args: list[str], home: Path) -> tuple[int, str, set[str]]:
    code = (
        "import json, sys\n"
        "from cluster import cli\n"
        f"rc = cli.main({args!r})\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
        "sys.exit(rc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "LLMFLEET_HOME": str(home)},
        cwd=Path(__file__).resolve().parents[2],
    )
    *text, mods = out.stdout.strip().splitlines()
    return out.returncode, "\n".join(text), set(json.loads(mods))


@pytest.mark.parametrize(
    ("args", "rc", "says"),
    [(["status"], 1, "llmfleet: not running"), (["down"], 0, "llmfleet: stopped")],
)
def test_light_commands_import_nothing_heavy(
    tmp_path: Path, args: list[str], rc: int, says: str
) -> None:
    code, text, mods = _modules_after(args, tmp_path / "home")
    assert code == rc, text
    assert says in text
    assert not mods & set(HEAVY), sorted(mods & set(HEAVY))


def test_the_full_parser_still_has_every_command() -> None:
    import argparse

    from cluster import cli

    (sub,) = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    commands = {"up", "status", "down", "prepare-model", "bench", "sim", "keys", "dashboards"}
    assert commands | {"report", "deploy"} <= set(sub.choices)
    assert cli.build_parser().parse_args(["down", "--timeout", "5"]).timeout == 5.0


def test_a_reader_that_leaves_gets_no_traceback() -> None:
    """Found by hand: `llmfleet status | head -3` ended in a BrokenPipeError traceback."""
    code = (
        "import sys\n"
        "from cluster import cli\n"
        "def loud(_args):\n"
        "    for i in range(200_000):\n"
        "        print('replica', i)\n"
        "cli.cmd_status = loud\n"
        "sys.exit(cli.main(['status']))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith(b"replica 0")
    proc.stdout.close()  # as `head -1` does
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 141, err.decode()[-2000:]
    assert b"Traceback" not in err
