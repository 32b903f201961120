"""Counts, rates and scales given to `llmfleet sim` / `bench` are checked where they are parsed
(``bench/argtypes.py``, ``cluster/twin/cli.check_bounds``)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench import argtypes
from bench.cli import add_arguments as bench_arguments
from cluster.twin import cli as twin_cli


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--replicas", "0", "must be ≥ 1, got 0"),  # was a StopIteration traceback
        ("--num-requests", "-3", "must be ≥ 1"),  # ran 0 requests
        ("--rate", "-2", "must be > 0"),  # a ValueError traceback
        ("--rate", "0", "must be > 0"),  # ran as if every request came at once
        ("--length-scale", "0", "must be > 0"),
        ("--startup-s", "-1", "must be ≥ 0"),
        ("--block-size", "0", "must be ≥ 1"),
        ("--tp", "two", "not an integer: 'two'"),
        ("--time-scale", "nan", "must be a finite number"),
    ],
)
def test_sim_refuses_a_bad_number_naming_the_flag(
    flag: str, value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        twin_cli.main(["--workload", "random", "--out", "/dev/null", flag, value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert flag in err, err
    assert says in err, err


def test_sim_refuses_bounds_that_cannot_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = str(tmp_path / "r.json")
    base = ["--workload", "random:input=8,output=2", "--num-requests", "4", "--out", out]
    assert twin_cli.main([*base, "--autoscale", "ttft-queue", "--min-replicas", "5",
                          "--max-replicas", "2"]) == 2  # fmt: skip
    assert "--min-replicas 5 is above --max-replicas 2" in capsys.readouterr().err
    assert twin_cli.main([*base, "--max-replicas", "3"]) == 2
    assert "need --autoscale" in capsys.readouterr().err
    assert twin_cli.main(["--workload", "nosuch", "--out", out]) == 2  # was a traceback
    assert "unknown dataset 'nosuch'" in capsys.readouterr().err
    assert twin_cli.main([*base, "--autoscale", "ttft-queue", "--max-replicas", "2"]) == 0


def test_bench_refuses_a_bad_number_and_keeps_an_infinite_rate() -> None:
    parser = argparse.ArgumentParser()
    bench_arguments(parser)
    base = ["--url", "http://127.0.0.1:1", "--dataset", "random", "--out", "r.json"]
    assert parser.parse_args([*base, "--rate", "inf"]).rate == float("inf")  # all at once
    for flag, value in (("--concurrency", "0"), ("--duration", "-1"), ("--warmup", "-1")):
        with pytest.raises(SystemExit):
            parser.parse_args([*base, flag, value])


def test_the_types_themselves() -> None:
    assert argtypes.positive_int("3") == 3
    assert argtypes.nonneg_float("0") == 0.0
    with pytest.raises(argparse.ArgumentTypeError, match="finite"):
        argtypes.positive_float("inf")
