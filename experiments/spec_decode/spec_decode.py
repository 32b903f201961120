"""`make bench-spec-decode`: llmfleet with and without n-gram speculative decoding
(``engine.vllm.engine_args.speculative_config``), same model, same requests.

Two prompt sets: ``copy`` asks for answers that repeat text (from the prompt, or their
own: what prompt lookup is for), ``open`` asks for free text (few n-gram matches). Each
request is a streamed greedy chat completion of up to ``--max-tokens`` tokens, sent at each
concurrency in turn. Per set and concurrency it reports output tok/s, P50 TTFT and P50
decode tok/s per request (tokens after the first / time after the first), how many answers
matched the run without speculation exactly, and, from vLLM's own counters exported
through Ray, the draft acceptance rate (accepted / drafted tokens), the mean acceptance
length (1 + accepted / drafts) and the share of output tokens made in drafted steps. As a
control, ``batching_control`` counts the answers of the run without speculation that
matched between the lowest and highest concurrency (bf16 greedy output depends on the
batch too).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml

from experiments import serverproc

PORT, METRICS_PORT = 8151, 18151
URL = f"http://127.0.0.1:{PORT}"
MODEL = "smollm2-135m-instruct"
SETS = {
    "copy": [
        "Write the numbers from one to thirty in words, separated by commas.",
        "Copy this list twice: apples, oranges, pears, plums, grapes, cherries, lemons, limes.",
        "Repeat this text exactly, twice:\nThe committee met on Monday to discuss the budget for"
        " the new library, the repairs to the old bridge, and the plans for the summer festival.",
        "Rewrite this code with the function renamed to total:\ndef add(a, b):\n"
        "    result = a + b\n    print(result)\n    return result\n",
    ],
    "open": [
        "Write a short story about a robot who learns to paint.",
        "Explain why the sky is blue to a ten-year-old.",
        "Give some advice for someone starting to learn the piano.",
        "Describe a busy market in a small town on a Saturday morning.",
    ],
}
COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


def one(prompt: str, max_tokens: int) -> dict[str, Any]:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.monotonic()
    first = last = 0.0
    text, tokens = [], 0
    with httpx.stream("POST", f"{URL}/v1/chat/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
            for choice in event.get("choices", []):
                if choice["delta"].get("content"):
                    last = time.monotonic()
                    first = first or last
                    text.append(choice["delta"]["content"])
    decode = (tokens - 1) / (last - first) if last > first else 0.0
    return {"text": "".join(text), "tokens": tokens, "ttft_s": first - t0, "decode_tok_s": decode}


def counters() -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{METRICS_PORT}/metrics", timeout=10).text
    out = {}
    for name in COUNTERS:
        pat = rf"^\S*spec_decode_{name}(?:_total)?(?:\{{[^}}]*\}})? (\S+)$"
        out[name] = sum(float(v) for v in re.findall(pat, text, re.MULTILINE))
    return out


def settled_counters(stable_s: float = 25.0, timeout_s: float = 120.0) -> dict[str, float]:
    """Ray exports replica metrics ~10 s late: read until unchanged for ``stable_s``."""
    prev, since = counters(), time.monotonic()
    deadline = since + timeout_s
    while time.monotonic() < deadline:
        time.sleep(5.0)
        cur = counters()
        if cur != prev:
            prev, since = cur, time.monotonic()
        elif time.monotonic() - since >= stable_s:
            break
    return prev


def run_set(prompts: list[str], c: int, args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=c) as pool:
        rows = list(pool.map(lambda p: one(p, args.max_tokens), prompts * args.rounds))
    wall = time.monotonic() - t0
    return {
        "tokens": sum(r["tokens"] for r in rows),
        "output_tok_s": sum(r["tokens"] for r in rows) / wall,
        "ttft_p50_ms": 1000 * statistics.median(r["ttft_s"] for r in rows),
        "decode_tok_s_p50": statistics.median(r["decode_tok_s"] for r in rows),
        "texts": [r["text"] for r in rows],
    }


def measure(mode: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    vllm: dict[str, Any] = {"kv_cache_gib": 0.5}
    if mode == "ngram":
        spec = {"method": "ngram", "num_speculative_tokens": args.k, "prompt_lookup_max": 4}
        vllm["engine_args"] = {"speculative_config": spec}
    cfg = {
        "server": {"port": PORT, "metrics_export_port": METRICS_PORT},
        "replicas": {"num_replicas": 1},
        "engine": {"vllm": vllm},
    }
    (work / f"{mode}.yaml").write_text(yaml.safe_dump(cfg))
    proc = serverproc.start_llmfleet(work / f"{mode}.yaml", work / mode, work / f"{mode}.log")
    out: dict[str, Any] = {}
    try:
        serverproc.wait_http(f"{URL}/health", proc, timeout_s=600)
        one(SETS["copy"][0], 16)  # warm-up
        before = settled_counters() if mode == "ngram" else {}
        for name, prompts in SETS.items():
            for c in args.concurrency:
                row = out[f"{name}/c{c}"] = run_set(prompts, c, args)
                print(f"{mode} {name} c={c}: " + _fmt(row), flush=True)
                if mode == "ngram":
                    after = settled_counters()
                    row["spec"] = {k: after[k] - before[k] for k in COUNTERS}
                    before = after
    finally:
        serverproc.stop(proc)
    return out


def _fmt(row: dict[str, Any]) -> str:
    return (
        f"{row['output_tok_s']:.1f} tok/s, P50 TTFT {row['ttft_p50_ms']:.0f} ms, "
        f"P50 decode {row['decode_tok_s_p50']:.1f} tok/s"
    )


def summarize(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    table = {}
    for key, spec in runs["ngram"].items():
        base, s = runs["off"][key], spec["spec"]
        table[key] = {
            "tok_s_ratio": round(spec["output_tok_s"] / base["output_tok_s"], 3),
            "decode_ratio": round(spec["decode_tok_s_p50"] / base["decode_tok_s_p50"], 3),
            "identical_answers": sum(
                a == b for a, b in zip(spec["texts"], base["texts"], strict=True)
            ),
            "answers": len(base["texts"]),
            "drafted_share": round(
                (s["num_drafts"] + s["num_accepted_tokens"]) / spec["tokens"], 3
            ),
            "acceptance_rate": round(s["num_accepted_tokens"] / max(s["num_draft_tokens"], 1), 3),
            "mean_acceptance_length": round(
                1 + s["num_accepted_tokens"] / max(s["num_drafts"], 1), 2
            ),
            "off": _fmt(base),
            "ngram": _fmt(spec),
        }
    return table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", type=Path, default=Path("results/spec_decode.json"))
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=2, help="times each prompt is sent")
    p.add_argument("--concurrency", type=lambda s: [int(c) for c in s.split(",")], default=[1, 4])
    p.add_argument("-k", type=int, default=4, help="num_speculative_tokens")
    args = p.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="llmfleet-spec-"))
    runs = {mode: measure(mode, args, work) for mode in ("off", "ngram")}
    lo, hi = min(args.concurrency), max(args.concurrency)
    control = {
        name: sum(
            a == b
            for a, b in zip(
                runs["off"][f"{name}/c{lo}"]["texts"],
                runs["off"][f"{name}/c{hi}"]["texts"],
                strict=True,
            )
        )
        for name in SETS
    }
    summary = {
        "batching_control": control,
        "summary": summarize(runs),
        "runs": runs,
        "config": vars(args) | {"out": str(args.out)},
    }
    args.out.write_text(json.dumps(summary, indent=2, default=str))
    print(json.dumps({k: summary[k] for k in ("summary", "batching_control")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
