"""Why a replica could not start (``replicas/start_failure.py``), on captured log text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from replicas import start_failure
from replicas.start_failure import root_cause, tail_lines

ROOT = Path(__file__).resolve().parents[2]

# the end of a vLLM-CPU replica's worker log after a start with no weights (captured by
# hand: `llmfleet up --model DIR` with DIR holding only the model's JSON files)
VLLM_NO_WEIGHTS = """\
:actor_name:ServeReplica:llmfleet:LLMReplica
(Worker pid=18470) WARNING 12-05 21:00:04 [cpu_worker.py:114] libiomp is not found in LD_PRELOAD.
(Worker pid=18470) ERROR 12-05 21:00:04 [multiproc_executor.py:953] WorkerProc failed to start.
(Worker pid=18470) ERROR 12-05 21:00:04 [multiproc_executor.py:953] Traceback (most recent call last):
(Worker pid=18470) ERROR 12-05 21:00:04 [multiproc_executor.py:953]   File "/x/default_loader.py", line 259, in _prepare_weights
(Worker pid=18470) ERROR 12-05 21:00:04 [multiproc_executor.py:953]     raise RuntimeError(
(Worker pid=18470) ERROR 12-05 21:00:04 [multiproc_executor.py:953] RuntimeError: Cannot find any model weights with `/tmp/badmodel`
(EngineCore pid=18454) ERROR 12-05 21:00:05 [core.py:1510] EngineCore failed to start.
(EngineCore pid=18454) ERROR 12-05 21:00:05 [core.py:1510]     raise e from None
(EngineCore pid=18454) ERROR 12-05 21:00:05 [core.py:1510] Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.
"""


def test_the_root_cause_is_the_first_exception_line_not_a_wrapper() -> None:
    got = root_cause(VLLM_NO_WEIGHTS.splitlines())
    assert got == "RuntimeError: Cannot find any model weights with `/tmp/badmodel`"


def test_only_wrappers_or_no_exception_is_no_root_cause() -> None:
    wrapper = "RuntimeError: Engine core initialization failed. See root cause above."
    assert root_cause([wrapper, "INFO all fine", "Traceback (most recent call last):"]) is None
    assert root_cause(["OSError: [Errno 28] No space left on device"]) == (
        "OSError: [Errno 28] No space left on device"
    )


def test_the_tail_of_a_log_is_read_from_its_end(tmp_path: Path) -> None:
    log = tmp_path / "worker.out"
    log.write_text("ValueError: an old line\n" + "x" * 100 + "\nKeyError: 'late'\n")
    assert root_cause(tail_lines(log, limit=30)) == "KeyError: 'late'"
    assert tail_lines(tmp_path / "gone.out") == []


def test_diagnose_names_the_error_its_cause_and_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "worker-1.out"
    log.write_text(VLLM_NO_WEIGHTS)
    monkeypatch.setattr(start_failure, "own_logs", lambda: [log])
    err = RuntimeError("Engine core initialization failed. See root cause above.")
    got = start_failure.diagnose(err, max_chars=60)
    assert got["error"].startswith("RuntimeError: Engine core initialization")
    assert len(got["error"]) == 60
    assert got["error"].endswith("…")
    assert got["root_cause"].startswith("RuntimeError: Cannot find any model weights")
    assert got["log"] == str(log)


def test_a_process_whose_output_is_a_file_finds_it(tmp_path: Path) -> None:
    out = tmp_path / "worker-2.out"
    code = "from replicas.start_failure import own_logs; print(own_logs())"
    with out.open("w") as f:
        subprocess.run([sys.executable, "-c", code], stdout=f, check=True, cwd=ROOT)
    assert str(out) in out.read_text()
