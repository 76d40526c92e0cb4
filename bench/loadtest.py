#!/usr/bin/env python3
"""Load test a deployed endpoint with vLLM's own benchmark client (random dataset).

    python bench/loadtest.py --url http://HOST:8000 --model SERVED_NAME --tokenizer HF_ID_OR_DIR \
        [--prompts 200] [--input-len 512] [--output-len 128] [--rate inf] [--out build/loadtest]

Prints request/output throughput and TTFT / TPOT / E2E percentiles (p50, p95, p99) and writes the
JSON result. The API key, if the server needs one, comes from VLLM_API_KEY. Runs vllm.benchmarks.serve
in-process, so it works with any vLLM install (the `vllm` console script is not needed).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True, help="served model name")
    parser.add_argument("--tokenizer", required=True, help="tokenizer repo id or local directory")
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--rate", default="inf", help="requests per second, or inf")
    parser.add_argument("--seed", type=int, default=0, help="random dataset seed (use another one to warm up)")
    parser.add_argument("--out", type=Path, default=Path("build/loadtest"))
    parser.add_argument("--result-name", default="loadtest.json", help="file written under --out")
    parser.add_argument("--detailed", action="store_true", help="also save per-request TTFTs and token gaps")
    args = parser.parse_args(argv)
    if args.prompts < 1 or args.input_len < 1 or args.output_len < 1:
        parser.error("--prompts, --input-len and --output-len must be >= 1")
    if os.environ.get("VLLM_API_KEY"):
        os.environ.setdefault("OPENAI_API_KEY", os.environ["VLLM_API_KEY"])  # what the bench client sends

    from vllm.benchmarks import serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    bench = FlexibleArgumentParser()
    serve.add_cli_args(bench)
    args.out.mkdir(parents=True, exist_ok=True)
    bench_args = bench.parse_args([
        "--backend", "openai", "--base-url", args.url.rstrip("/"), "--endpoint", "/v1/completions",
        "--model", args.model, "--tokenizer", args.tokenizer, "--dataset-name", "random",
        "--random-input-len", str(args.input_len), "--random-output-len", str(args.output_len),
        "--num-prompts", str(args.prompts), "--request-rate", args.rate, "--ignore-eos", "--seed", str(args.seed),
        "--percentile-metrics", "ttft,tpot,e2el", "--metric-percentiles", "50,95,99",
        "--save-result", "--result-dir", str(args.out), "--result-filename", args.result_name,
        *(["--save-detailed"] if args.detailed else [])])
    result = serve.main(bench_args)
    print(f"output tokens/s {result['output_throughput']:.1f}; "
          f"TTFT p50/p95/p99 ms {result['p50_ttft_ms']:.1f}/{result['p95_ttft_ms']:.1f}/{result['p99_ttft_ms']:.1f}; "
          f"TPOT p50/p95/p99 ms {result['p50_tpot_ms']:.1f}/{result['p95_tpot_ms']:.1f}/{result['p99_tpot_ms']:.1f}")
    return 0 if result.get("completed", 0) == args.prompts else 1


if __name__ == "__main__":
    sys.exit(main())
