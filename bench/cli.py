"""``llmfleet bench``: drive an OpenAI-compatible endpoint and report SLA metrics.

Flow: parse → load the tokenizer → build the dataset (``bench.datasets``) → pick arrivals
(``--rate`` with ``--burstiness``, ``--concurrency`` closed loop, else the trace's own
timestamps, else everything at once) → optional warm-up → ``bench.runner.run_load`` →
``bench.report.summarize`` → console table, FILE.json + FILE.jsonl, optional PNG.
``--sweep R1,R2`` repeats the run per rate and plots latency vs throughput. Every run is
bounded by ``--duration`` (no request starts later) and ``--timeout`` (per request);
``--num-requests`` defaults to rate × duration for open-loop synthetic datasets, capped.
Ctrl-C stops sending, cancels what is in flight and writes what was measured.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import signal
import sys
from pathlib import Path
from typing import Any

from bench import argtypes, arrivals, client, console, datasets, plots, report
from bench.runner import LoadPlan, RunOutcome, run_load
from bench.slo import parse_slo
from bench.tokens import TokenSource, load_tokenizer
from bench.types import RequestSpec

MAX_REQUESTS = 100_000


def add_arguments(parser: argparse.ArgumentParser, default_tokenizer: str | None = None) -> None:
    """``default_tokenizer``: the tokenizer used without ``--tokenizer`` (``llmfleet bench``
    passes the default model's directory; the load generator itself knows no model)."""
    a = parser.add_argument
    a("--url", required=True, help="server base URL, e.g. http://127.0.0.1:8000")
    a("--model", default=None, help="model name (default: first id from GET /v1/models)")
    a("--api-key", default=None)
    a(
        "--dataset",
        required=True,
        help="random[:…] | shared-prefix[:…] | multi-turn[:…] | "
        "mooncake:PATH | azure:PATH (see bench/datasets.py)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--rate", type=argtypes.rate, default=None, help="open-loop request rate (req/s)"
    )
    mode.add_argument(
        "--concurrency", type=argtypes.positive_int, default=None, help="closed-loop users"
    )
    a(
        "--burstiness",
        type=argtypes.positive_float,
        default=1.0,
        help="gamma shape: 1 = Poisson, <1 burstier",
    )
    a("--arrival", choices=("gamma", "constant"), default="gamma")
    a("--num-requests", type=argtypes.positive_int, default=None)
    a(
        "--duration",
        type=argtypes.positive_float,
        default=600.0,
        help="no request starts after this (s)",
    )
    a(
        "--time-scale",
        type=argtypes.positive_float,
        default=1.0,
        help="trace timestamps × F (0.5 = 2× faster)",
    )
    a("--length-scale", type=argtypes.positive_float, default=1.0, help="token lengths × F")
    a("--slo", default=None, help="ttft_ms=…,tpot_ms=…,e2e_ms=…")
    a("--sweep", default=None, help="comma-separated rates R1,R2,…")
    a("--seed", type=int, default=0)
    a("--out", type=Path, required=True, help="result JSON (per-request JSONL beside it)")
    a("--plot", type=Path, default=None, help="PNG plot")
    a(
        "--tokenizer",
        default=default_tokenizer,
        help="HF tokenizer dir ('none' = synthetic ids; default: the default model's)",
    )
    a("--endpoint", choices=("completions", "chat"), default="completions")
    a(
        "--prompt-format",
        choices=("text", "ids"),
        default=None,
        help="completions prompt as text or token ids (default: text with a tokenizer)",
    )
    a("--no-ignore-eos", action="store_true", help="do not send ignore_eos=true")
    a(
        "--warmup",
        type=argtypes.nonneg_int,
        default=0,
        help="warm-up requests sent first and discarded",
    )
    a("--max-concurrency", type=argtypes.positive_int, default=None)
    a("--timeout", type=argtypes.positive_float, default=300.0, help="per-request timeout (s)")
    a("--replicas", type=argtypes.positive_int, default=1)
    a("--replica-hour-cost", type=argtypes.nonneg_float, default=None, help="USD per replica-hour")
    a("--min-tpot-ms", type=argtypes.nonneg_float, default=None, help="flag TPOT below this floor")
    a("--no-progress", action="store_true")


def _num_requests(args: argparse.Namespace, rate: float | None) -> int | None:
    if args.num_requests is not None:
        return min(args.num_requests, MAX_REQUESTS)
    if rate and not math.isinf(rate) and not datasets.has_timestamps(args.dataset):
        return min(MAX_REQUESTS, max(1, math.ceil(rate * args.duration)))
    return None


def _plan(args: argparse.Namespace, specs: list[RequestSpec], rate: float | None) -> LoadPlan:
    common: dict[str, Any] = {
        "max_concurrency": args.max_concurrency,
        "duration_s": args.duration,
        "progress": not args.no_progress,
    }
    if args.concurrency:
        return LoadPlan(concurrency=args.concurrency, **common)
    if rate is None and specs and specs[0].arrival_s is not None:
        return LoadPlan(offsets=[s.arrival_s or 0.0 for s in specs], **common)
    rng = random.Random(args.seed)
    offs = arrivals.offsets(
        len(specs), rate or math.inf, burstiness=args.burstiness, process=args.arrival, rng=rng
    )
    return LoadPlan(offsets=offs, **common)


class _Ctx:
    def __init__(self, args: argparse.Namespace, tokenizer: Any, target: client.Target) -> None:
        self.args, self.tokenizer, self.target = args, tokenizer, target
        self.source = TokenSource(tokenizer, args.seed) if tokenizer is not None else None
        fmt = args.prompt_format or ("text" if tokenizer is not None else "ids")
        self.as_text = fmt == "text" or args.endpoint == "chat"
        self.stop = asyncio.Event()

    def payload(self, spec: RequestSpec) -> dict[str, Any]:
        ids = list(spec.prompt_token_ids)
        prompt: str | list[int] = ids
        if self.as_text:
            prompt = self.source.text(ids) if self.source else TokenSource().text(ids)
        return client.build_payload(self.target, spec, prompt)

    def specs(self, num: int | None, seed: int) -> list[RequestSpec]:
        a = self.args
        return datasets.build_requests(
            a.dataset,
            tokenizer=self.tokenizer,
            num_requests=num,
            seed=seed,
            length_scale=a.length_scale,
            time_scale=a.time_scale,
        )

    def config(self, rate: float | None, n: int) -> dict[str, Any]:
        cfg = {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(self.args).items()
            if k not in ("api_key", "func")
        }
        cfg.update(model=self.target.model, rate=rate, num_requests=n)
        return cfg


async def _warmup(ctx: _Ctx) -> None:
    n = ctx.args.warmup
    if n <= 0:
        return
    specs = ctx.specs(n, ctx.args.seed + 1_000_003)[:n]  # other prompts: no cache pre-warming
    plan = LoadPlan(concurrency=min(n, ctx.args.concurrency or 4), duration_s=ctx.args.timeout)
    await run_load(specs, plan, ctx.target, ctx.payload, stop=ctx.stop)


async def _one_run(ctx: _Ctx, rate: float | None) -> tuple[dict, RunOutcome]:
    specs = ctx.specs(_num_requests(ctx.args, rate), ctx.args.seed)
    outcome = await run_load(
        specs, _plan(ctx.args, specs, rate), ctx.target, ctx.payload, stop=ctx.stop
    )
    result = report.summarize(
        outcome.records,
        duration_s=outcome.duration_s,
        config=ctx.config(rate, len(specs)),
        slo=parse_slo(ctx.args.slo),
    )
    result["interrupted"] = outcome.interrupted
    return result, outcome


def _emit(result: dict, outcome: RunOutcome, out: Path, png: Path | None) -> None:
    report.write_results(result, outcome.records, out)
    if png is not None:
        plots.plot_run(result, outcome.records, png)
    print(console.format_result(result))
    print(f"wrote {out} and {report.jsonl_path(out)}" + (f" and {png}" if png else ""))


async def _main(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    model = args.model or await client.first_model(args.url, args.api_key)
    target = client.Target(
        args.url,
        model,
        args.endpoint,
        args.api_key,
        args.timeout,
        ignore_eos=not args.no_ignore_eos,
    )
    tok_path = args.tokenizer or "none"
    ctx = _Ctx(
        args,
        load_tokenizer(tok_path if Path(tok_path).exists() or tok_path == "none" else None),
        target,
    )
    loop.add_signal_handler(signal.SIGINT, ctx.stop.set)
    try:
        await _warmup(ctx)
        if not args.sweep:
            result, outcome = await _one_run(ctx, args.rate)
            _emit(result, outcome, args.out, args.plot)
            return (
                130 if outcome.interrupted else (1 if result["requests"]["completed"] == 0 else 0)
            )
        return await _sweep(ctx)
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def _sweep(ctx: _Ctx) -> int:
    args = ctx.args
    rows: list[dict[str, Any]] = []
    for rate in [float(r) for r in args.sweep.split(",") if r.strip()]:
        if ctx.stop.is_set():
            break
        result, outcome = await _one_run(ctx, rate)
        stem = f"{args.out.stem}.rate-{rate:g}"
        png = args.plot.with_name(f"{args.plot.stem}.rate-{rate:g}.png") if args.plot else None
        _emit(result, outcome, args.out.with_name(stem + ".json"), png)
        rows.append({"rate": rate, "result": result})
    summary = {
        "schema_version": rows[0]["result"]["schema_version"] if rows else 1,
        "sweep": rows,
        "slo": parse_slo(args.slo),
    }
    report.write_results(summary, [], args.out)
    if args.plot and rows:
        plots.plot_sweep(rows, args.plot, parse_slo(args.slo))
    print(console.format_sweep(rows))
    return 130 if ctx.stop.is_set() else 0


def run(args: argparse.Namespace) -> int:
    try:
        parse_slo(args.slo)
        datasets.parse_spec(args.dataset)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_main(args))
    except KeyboardInterrupt:
        return 130
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None, default_tokenizer: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llmfleet bench", description=__doc__.split("\n")[0])
    add_arguments(parser, default_tokenizer)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
