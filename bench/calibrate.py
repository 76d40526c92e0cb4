#!/usr/bin/env python3
"""GPU calibration of the planner on real model configs, without weights (vLLM's --load-format dummy).

    python3 bench/calibrate.py models/Qwen3-30B-A3B.json models/DeepSeek-V3.json:5 ... [--out DIR]

Each argument is a config.json under models/, optionally with `:N`: the model cut to its first N layers
(per-layer lists cut with it, so the layer pattern is kept) where the whole model does not fit one GPU.
For each one a model directory is made with that config.json, a tokenizer (bench/models.py) and, for
multimodal models, the processor files vLLM's profiling needs; vLLM starts on it through the project's
launcher and rendered leader command (TP=1) with random weights, and once the engine logs its KV cache
size the server is stopped. Recorded per model: vLLM's `GPU KV cache size`, `Model loading took N GiB`,
`Available KV cache memory`, its memory profile (debug log) and the planner's numbers for the same
config and settings. Rows go to OUT/calibration.json after every model.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PEAK_TRACE = ROOT / "bench" / "peaktrace"
"""The site hook --trace-peak puts first on the servers' PYTHONPATH (bench/peaktrace/sitecustomize.py)."""
REMOTE_CODE = {"nemotron-nas": "configuration_decilm.DeciLMConfig",
               "bailing_hybrid": "configuration_bailing_hybrid.BailingHybridConfig"}
"""A config class for each model_type whose published class is remote code (planner/model_config.py
REMOTE_CONFIG_BASES, planner/layers.py READ_AS_WRITTEN), written for this project under bench/remote_code/: the
model directory ships it as its own code (auto_map), and vLLM starts with --trust-remote-code, as a stack with
model.trustRemoteCode does."""
sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    API_PORT,
    LAYOUTS,
    Bench,
    Group,
    healthy,
    host_info,
    kv_tokens,
    leader_cmd,
    local,
    log,
)
from bench.models import build_tokenizer  # noqa: E402
from planner.catalog import ACCELERATORS  # noqa: E402
from planner.layers import cut_layers  # noqa: E402
from planner.model_config import as_vllm_reads, remote_code  # noqa: E402

LOADING = re.compile(r"Model loading took ([\d.]+) GiB")
AVAILABLE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
PROFILE = re.compile(r"(MemoryProfilingResult\(.*?\)|Memory profiling takes.*)$", re.M)
GRAPHS = re.compile(r"Graph capturing finished in [\d.]+ secs?, took ([\d.]+) GiB")
CUDAGRAPH = re.compile(r"(?:CUDA graph|cudagraph)[^\n]*?([\d.]+) GiB", re.I)
GRAPH_ESTIMATE = re.compile(
    r"^.*(?:Profiling CUDA graph memory|Estimated \w* ?CUDA graph memory|Using V2 Model Runner).*$", re.M)
"""The V1 runner's graph estimate by parts (first capture + (N-1) x per-graph, debug log) and which runner served."""
ERROR = re.compile(r"^(?:\(\w+ pid=\d+\) )?"
                   r"((?:\S*Error|RuntimeError|ValueError|AssertionError|NotImplementedError)\b.*)$", re.M)
"""An exception's last line, with or without the process prefix vLLM's engine puts before its log lines."""

# What Qwen2-VL's processor needs beside the tokenizer (preprocessor_config.json of Qwen/Qwen2.5-VL-7B-Instruct).
QWEN_VL_PROCESSOR = {"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
                     "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
                     "image_std": [0.26862954, 0.26130258, 0.27577711],
                     "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor"}
QWEN3_VL_VIDEO = {"video_processor_type": "Qwen3VLVideoProcessor", "fps": 2, "min_frames": 4, "max_frames": 768,
                  "size": {"shortest_edge": 4096, "longest_edge": 25165824}, "do_sample_frames": True}
"""Qwen3-VL's video processor beside its image processor (Qwen2VLImageProcessorFast with 16-pixel patches and
0.5 mean / std), which vLLM's Qwen3VLProcessor loads with the tokenizer."""
QWEN_VL_TOKENS = {"vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>",
                  "image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>"}
GEMMA3_TOKENS = {"boi_token_index": "<start_of_image>", "eoi_token_index": "<end_of_image>",
                 "image_token_index": "<image_soft_token>"}
"""Gemma 3's image tokens by the config keys that give their ids; the tokenizer names them as Gemma3Processor reads
them (tokenizer.boi_token, .eoi_token, .image_token)."""
GEMMA3_NEWLINES = {107: "\n", 108: "\n\n", 109: "\n\n\n", 110: "\n\n\n\n"}
"""Newline runs vLLM's Gemma 3 processor looks up in the vocabulary by text, to merge those its image sequence puts
beside a prompt's (model_executor/models/gemma3_mm.py _apply_token_matches: vocab["\n"] .. vocab["\n\n\n\n"]; a
KeyError at engine start without them, validation 52's first call). Gemma's tokenizer has them as ordinary tokens
(107 is "\n", 108 "\n\n"); the word-level tokenizer here drops whitespace, so only their presence matters."""


def parse_entry(entry: str) -> tuple[Path, int | None, bool]:
    """models/X.json[:LAYERS][:text]: the config, the layers to keep, and whether to start only the decoder of a
    multimodal wrapper (its text_config, under the text_config's architecture)."""
    path, *rest = entry.split(":")
    config = ROOT / path if not Path(path).is_absolute() else Path(path)
    if not config.is_file():
        raise SystemExit(f"calibrate: {entry!r}: no such config file")
    text = bool(rest) and rest[-1] == "text"
    rest = rest[:-1] if text else rest
    layers = rest[0] if rest else ""
    if len(rest) > 1 or (layers and (not layers.isascii() or not layers.isdigit() or int(layers) < 1)):
        raise SystemExit(f"calibrate: {entry!r}: after the path: ':LAYERS' (a positive integer) and/or ':text'")
    return config, int(layers) if layers else None, text


TEXT_ARCHITECTURES = {"gemma3_text": "Gemma3ForCausalLM", "gemma4_text": "Gemma4ForCausalLM",
                      "qwen3_5_text": "Qwen3_5ForCausalLM", "qwen3_5_moe_text": "Qwen3_5MoeForCausalLM"}
"""The decoder class of a wrapper whose text_config names no architectures."""


def text_only(data: dict[str, Any]) -> dict[str, Any]:
    """A multimodal wrapper's decoder as a model of its own: text_config as published, with the wrapper's dtype and
    quantization where the text_config leaves them out, and no auto_map (vLLM's native class for that
    model_type)."""
    text = {k: v for k, v in data["text_config"].items() if k != "auto_map"}
    for key in ("torch_dtype", "dtype", "quantization_config"):
        if text.get(key) is None and data.get(key) is not None:
            text[key] = data[key]
    if not text.get("architectures"):
        text["architectures"] = [TEXT_ARCHITECTURES[str(text.get("model_type"))]]
    return text


def entry_config(config: Path, layers: int | None, text_mode: bool) -> dict[str, Any]:
    """The config.json an entry starts: the wrapper's decoder alone with :text, cut to its first `layers`."""
    data = json.loads(config.read_text())
    if text_mode:
        data = text_only(data)
    return cut_layers(data, layers) if layers is not None else data


QWEN3_VL_PROCESSOR_TYPES = ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")
"""Wrappers vLLM profiles through Qwen3-VL's processor: Qwen3.5 / 3.6's processing info is Qwen3-VL's
(vllm/model_executor/models/qwen3_5.py Qwen3_5ProcessingInfo(Qwen3VLProcessingInfo))."""
GPTQ_METHODS = ("gptq", "gptq_marlin", "auto_gptq")
GPTQ_LINEAR = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj"]
"""What a GPTQ checkpoint quantizes in a decoder layer. vLLM 0.25.1 (AutoGPTQConfig.maybe_update_config) reads the
quantized layers from the checkpoint's safetensors metadata (the int32 tensors) when the config names none; a dummy
load has no safetensors, so every layer would load unquantized. The model directory names them in the config
instead, as the checkpoint's tensors would."""


def name_gptq_layers(data: dict[str, Any]) -> dict[str, Any]:
    """The config with GPTQ's quantized layers named where it leaves them to the checkpoint's tensors."""
    quant = data.get("quantization_config")
    if not isinstance(quant, dict) or quant.get("quant_method") not in GPTQ_METHODS \
            or quant.get("modules_in_block_to_quantize"):
        return data
    return {**data, "quantization_config": {**quant, "modules_in_block_to_quantize": GPTQ_LINEAR}}


def model_dir(work: Path, config: Path, layers: int | None, text_mode: bool = False) -> tuple[Path, dict[str, Any]]:
    """config.json (cut), tokenizer, processor files: what vLLM reads with --load-format dummy."""
    data = entry_config(config, layers, text_mode)
    out = work / "models" / f"{config.stem}-{layers or 'all'}{'-text' if text_mode else ''}"
    out.mkdir(parents=True, exist_ok=True)
    if (code := REMOTE_CODE.get(str(data.get("model_type")))) is not None:
        module = code.rsplit(".", 1)[0] + ".py"
        (out / module).write_text((ROOT / "bench" / "remote_code" / module).read_text())
        data = {**data, "auto_map": {"AutoConfig": code}}
    (out / "config.json").write_text(json.dumps(name_gptq_layers(data), indent=2))
    filled = as_vllm_reads(data, "calibrate")  # vocab_size and the like as transformers fills them for vLLM
    text = filled.get("text_config", filled)
    build_tokenizer({**text, **{k: v for k, v in data.items() if k.endswith("token_id")}}, out)
    if data.get("model_type") in ("qwen2_5_vl", "qwen2_vl"):
        add_qwen_vl_processor(out, data, QWEN_VL_PROCESSOR)
    elif data.get("model_type") in QWEN3_VL_PROCESSOR_TYPES:
        vision = data.get("vision_config") or {}
        # as Qwen3-VL and Qwen3.5 publish it: the largest image by size.longest_edge alone (a max_pixels key would
        # win over it, and the encoder profile would run a smaller image than a deployment's)
        image = {**{k: v for k, v in QWEN_VL_PROCESSOR.items() if k not in ("min_pixels", "max_pixels")},
                 "patch_size": vision.get("patch_size", 16),
                 "merge_size": vision.get("spatial_merge_size", 2),
                 "temporal_patch_size": vision.get("temporal_patch_size", 2), "image_mean": [0.5] * 3,
                 "image_std": [0.5] * 3, "image_processor_type": "Qwen2VLImageProcessorFast",
                 "processor_class": "Qwen3VLProcessor", "size": {"shortest_edge": 65536, "longest_edge": 16777216}}
        add_qwen_vl_processor(out, data, image)
        video = {**QWEN3_VL_VIDEO, **{k: image[k] for k in ("patch_size", "merge_size", "temporal_patch_size",
                                                             "image_mean", "image_std", "processor_class")}}
        (out / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2))
    elif data.get("model_type") == "gemma3":
        add_gemma3_processor(out, data)
    return out, data


def name_vision_tokens(out: Path, config: dict[str, Any], tokens: dict[str, str],
                       ordinary: dict[int, str] | None = None) -> None:
    """Name the vision token ids (`tokens`: config key -> token) in the word-level tokenizer, as special tokens, and
    the ids of `ordinary` (id -> text) as ordinary vocabulary entries."""
    tok_path = out / "tokenizer.json"
    tok = json.loads(tok_path.read_text())
    vocab = tok["model"]["vocab"]
    by_id = {i: t for t, i in vocab.items()}
    for ident, text in (ordinary or {}).items():
        del vocab[by_id[ident]]
        vocab[text] = ident
    added = []
    for key, name in tokens.items():
        ident = config.get(key)
        if isinstance(ident, int) and ident in by_id:
            del vocab[by_id[ident]]
            vocab[name] = ident
            added.append({"id": ident, "content": name, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True})
    tok["added_tokens"] = [*tok.get("added_tokens", []), *added]
    tok_path.write_text(json.dumps(tok))


def add_qwen_vl_processor(out: Path, config: dict[str, Any], processor: dict[str, Any]) -> None:
    """Name the vision token ids in the word-level tokenizer and write the image processor's config."""
    name_vision_tokens(out, config, QWEN_VL_TOKENS)
    (out / "preprocessor_config.json").write_text(json.dumps(processor, indent=2))


def add_gemma3_processor(out: Path, config: dict[str, Any]) -> None:
    """Gemma3Processor's files: the image tokens named in the tokenizer and given to it as its boi / eoi / image
    tokens (tokenizer_config.json extra_special_tokens), the SigLIP image processor at the vision tower's image size
    with Gemma 3's 0.5 mean / std, and the tokens an image becomes (mm_tokens_per_image), as google/gemma-3-*-it
    publish them."""
    name_vision_tokens(out, config, GEMMA3_TOKENS, ordinary=GEMMA3_NEWLINES)
    tok_config_path = out / "tokenizer_config.json"
    tok_config = json.loads(tok_config_path.read_text())
    tok_config["extra_special_tokens"] = {"boi_token": GEMMA3_TOKENS["boi_token_index"],
                                          "eoi_token": GEMMA3_TOKENS["eoi_token_index"],
                                          "image_token": GEMMA3_TOKENS["image_token_index"]}
    tok_config_path.write_text(json.dumps(tok_config, indent=2))
    side = int((config.get("vision_config") or {}).get("image_size", 896))
    tokens = int(config.get("mm_tokens_per_image", 256))
    image = {"image_processor_type": "Gemma3ImageProcessor", "processor_class": "Gemma3Processor",
             "size": {"height": side, "width": side}, "image_mean": [0.5] * 3, "image_std": [0.5] * 3,
             "resample": 2, "rescale_factor": 1 / 255, "do_normalize": True, "do_rescale": True, "do_resize": True,
             "do_convert_rgb": None, "do_pan_and_scan": None, "image_seq_length": tokens}
    (out / "preprocessor_config.json").write_text(json.dumps(image, indent=2))
    (out / "processor_config.json").write_text(json.dumps({"image_seq_length": tokens,
                                                           "processor_class": "Gemma3Processor"}, indent=2))


def measure(args: argparse.Namespace, bench: Bench, entry: str) -> dict[str, Any]:
    config, layers, text_mode = parse_entry(entry)
    directory, data = model_dir(args.work, config, layers, text_mode)
    name = directory.name
    layout = LAYOUTS["tp1"]
    spec = replace(bench.spec(layout, API_PORT + 20, directory), served_name=name,
                   extra_args=("--load-format", "dummy", *args.extra), trust_remote_code=bool(remote_code(data)))
    env = bench.cold_env(layout, [0] if args.gpus else [], f"calibrate-{name}")
    env["VLLM_LOGGING_LEVEL"] = "DEBUG"
    if args.runner != "default":
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1" if args.runner == "v2" else "0"
    if args.trace_peak or args.trace_capture or args.trace_graphs or args.sample_graphs or args.router_fake:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PEAK_TRACE), env.get("PYTHONPATH")]))
    if args.trace_peak or args.trace_capture or args.trace_graphs or args.sample_graphs:
        env["VLLM_GKE_PEAK_TRACE"] = str(args.out / "peak-trace")
        env["VLLM_GKE_GRAPH_SAMPLES"] = "1" if args.sample_graphs else "0"
        env["VLLM_GKE_PEAK_TRACE_CAPTURE"] = "1" if args.trace_capture else "0"
        env["VLLM_GKE_PEAK_TRACE_GRAPHS"] = "1" if args.trace_graphs else "0"
    if args.router_fake:
        env["VLLM_GKE_ROUTER_FAKE"] = "1"
    group = Group(args.work, f"calibrate-{name}")
    proc = group.start("leader-r0", leader_cmd(spec), env)
    t0 = time.monotonic()
    try:
        # Until the CUDA graphs are captured (they follow the KV cache): their memory is what vLLM 0.32.0 keeps out
        # of the KV cache and 0.25.1 does not, so the 0.32.0 profile's estimate is checked against it.
        while not GRAPHS.search(proc.log.read_text(errors="replace")) and proc.popen.poll() is None \
                and not healthy(local(API_PORT + 20)) and time.monotonic() - t0 < args.start_timeout:
            time.sleep(0.5)
        time.sleep(1)
        capture = args.out / "peak-trace" / f"{name}.capture.json"
        while args.trace_capture and not capture.exists() and proc.popen.poll() is None \
                and time.monotonic() - t0 < args.start_timeout:
            time.sleep(0.5)  # the capture's summary is written once compile_or_warm_up_model returns
    finally:
        group.stop(grace=15)
    text = proc.log.read_text(errors="replace")
    row: dict[str, Any] = {"model": config.stem + (" (decoder)" if text_mode else ""), "layers": layers or "all",
                           "config": data,
                           "kv_cache_tokens_measured": kv_tokens(proc.log),
                           "seconds_to_kv_line": round(time.monotonic() - t0, 1)}
    for key, pattern in (("weights_gib_measured", LOADING), ("available_kv_gib_measured", AVAILABLE)):
        found = pattern.search(text)
        row[key] = float(found.group(1)) if found else None
    found = CONCURRENCY.search(text)
    if found:
        row["max_concurrency"] = float(found.group(2))
    row["profile"] = PROFILE.findall(text)[-3:]
    graphs = GRAPHS.search(text)
    row["graphs_gib_measured"] = float(graphs.group(1)) if graphs else None
    row["cudagraph_lines"] = [m.group(0)[:300] for m in CUDAGRAPH.finditer(text)][-3:]
    row["graph_estimate_lines"] = [m.group(0)[-300:] for m in GRAPH_ESTIMATE.finditer(text)][:8]
    row["runner_v2"] = "Using V2 Model Runner" in text
    row["block_lines"] = [line[-200:] for line in text.splitlines() if re.search(r"block size|page size", line)][:6]
    row["backend_lines"] = [line[:300] for line in text.splitlines()
                            if re.search(r"backend|Using .*kernel|quantiz", line, re.I)][:12]
    if row["kv_cache_tokens_measured"] is None:
        errors = [e for e in ERROR.findall(text) if "Engine core initialization failed" not in e]
        row["error"] = (errors or ERROR.findall(text) or [f"exit {proc.popen.poll()}"])[0][:500]
        row["log_tail"] = text.splitlines()[-40:]
    log(f"calibrate {name}: KV {row['kv_cache_tokens_measured']}, weights {row['weights_gib_measured']} GiB, "
        f"available {row['available_kv_gib_measured']} GiB {row.get('error', '')}")
    return row


def predict_row(entry: str, accelerator: str, utilization: float = 0.9, max_model_len: int = 8192,
                dtype: str = "auto", kv_cache_dtype: str = "auto", runner: str = "default",
                router_fake: bool = False, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """The planner's numbers for one entry under the settings the GPU run uses (vLLM 0.25.1's profile, TP=1;
    runner "v2" / "v1": every model on Model Runner V2 / the V1 runner, as --runner starts it; router_fake: with
    0.32.0's fake of the fused router kernel registered, as --router-fake starts it)."""
    from planner.layout import Layout
    from planner.memory import cudagraph_bytes, default_engine
    from planner.model_config import parse_hf_config
    from planner.sizing import GIB, single_gpu_fit

    config, layers, text_mode = parse_entry(entry)
    arch = parse_hf_config(entry_config(config, layers, text_mode), config.stem, "calibrate")
    if not arch.admits(max_model_len):  # vLLM refuses it before loading anything: no row would run against it
        raise SystemExit(f"calibrate: --max-model-len {max_model_len}: {entry} supports at most "
                         f"{arch.max_position_embeddings} tokens (its max_position_embeddings)")
    fit = single_gpu_fit(arch, accelerator, utilization, max_model_len, dtype, kv_cache_dtype,
                         runner=runner, router_fake=router_fake, extra_args=tuple(extra))
    return {"entry": entry, "kv_cache_tokens_predicted": fit.kv_tokens,
            "weights_gib_predicted": round(fit.weights_per_gpu / GIB, 3),
            "graphs_gib_predicted_0_32": round(cudagraph_bytes(arch, Layout(1, 1, 1),
                                                               default_engine(ACCELERATORS[accelerator], "0.32.0"))
                                               / GIB, 3)}


def predict(args: argparse.Namespace) -> int:
    """The planner's numbers for each entry under the settings the GPU run uses, before it runs."""
    rows = []
    for entry in args.entries:
        rows.append(predict_row(entry, args.accelerator, args.gpu_memory_utilization, args.max_model_len, args.dtype,
                                args.kv_cache_dtype, args.runner, args.router_fake, tuple(args.extra)))
        log(f"predict {entry}: {rows[-1]}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "predictions.json"
    path.write_text(json.dumps({"settings": {k: getattr(args, k) for k in (
        "accelerator", "max_model_len", "gpu_memory_utilization", "dtype", "kv_cache_dtype", "runner",
        "router_fake", "extra")},
        "profile": "0.25.1", "rows": rows}, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("entries", nargs="+", help="models/X.json or models/X.json:LAYERS")
    parser.add_argument("--accelerator", default="nvidia-h200-141gb", choices=sorted(ACCELERATORS))
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--start-timeout", type=float, default=420)
    parser.add_argument("--extra", nargs="*", action="extend", default=[],
                        help="more vLLM flags for every model (repeatable: --extra=--a=1 --extra=--b=2)")
    parser.add_argument("--runner", choices=("default", "v2", "v1"), default="default",
                        help="v2: start every model on Model Runner V2 (VLLM_USE_V2_MODEL_RUNNER=1), the runner vLLM "
                             "0.32.0 serves every model on, and predict for it; v1: every model on the V1 runner "
                             "(VLLM_USE_V2_MODEL_RUNNER=0), whose profile runs the multimodal encoder in 0.25.1 as "
                             "both runners of 0.32.0 do")
    parser.add_argument("--trace-peak", action="store_true",
                        help="record every CUDA allocation of the profile run and write the blocks live at its peak, "
                             "with the code that allocated them, to OUT/peak-trace/<model>.json (bench/peaktrace)")
    parser.add_argument("--trace-capture", action="store_true",
                        help="also record the CUDA-graph capture's allocations and write the segments it reserved, "
                             "with the code that reserved them, to OUT/peak-trace/<model>.capture.json")
    parser.add_argument("--trace-graphs", action="store_true",
                        help="record only the V1 runner's CUDA-graph estimate, each capture between markers, and write "
                             "what each capture reserved and the allocation that needed it to "
                             "OUT/peak-trace/<model>.graphs.json (bench/peaktrace)")
    parser.add_argument("--sample-graphs", action="store_true",
                        help="record nothing but the device memory each FULL CUDA graph of Model Runner V2's capture "
                             "took, in capture order, as vLLM 0.32.0's profile_cudagraph_memory samples its largest "
                             "two, to OUT/peak-trace/<model>.samples.json (bench/peaktrace)")
    parser.add_argument("--router-fake", action="store_true",
                        help="register vLLM 0.32.0's fake of the fused MoE router kernel (_moe_C::grouped_topk) in "
                             "the server where its vLLM has none (0.25.1), so the profile's router compile keeps no "
                             "tensors, as in 0.32.0, and predict for that (bench/peaktrace)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/vllm-gke-calibrate"))
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--predict-only", action="store_true",
                        help="write the planner's predictions for the entries to OUT/predictions.json and stop "
                             "(commit them before the GPU run: the rows that run later are then validation)")
    args = parser.parse_args(argv)
    for entry in args.entries:
        parse_entry(entry)
    if args.predict_only:
        return predict(args)
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "calibration.json"
    results = json.loads(path.read_text()) if path.exists() else {"rows": []}
    results.update(host=host_info(), settings={k: getattr(args, k) for k in (
        "accelerator", "max_model_len", "gpu_memory_utilization", "dtype", "kv_cache_dtype", "runner",
        "router_fake", "extra")})
    bench = Bench(args, args.work, "calibrate", args.work)
    for entry in args.entries:
        row = measure(args, bench, entry)
        results["rows"] = [r for r in results["rows"]
                           if (r["model"], r["layers"]) != (row["model"], row["layers"])] + [row]
        path.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all("error" not in r for r in results["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
