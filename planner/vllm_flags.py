"""vLLM's command line as the server parses it: the flags of the release the default image runs, how its parser
reads a flag (FlexibleArgumentParser: `_` and `-` alike in a name, `--flag=value`, any unambiguous prefix), and
the release each flag the program renders first appeared in. One place for every check of vllm.extraArgs and of the
rendered command against vllm.image's release."""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

VLLM_0_32_FLAGS = frozenset("""
    --additional-config --aggregate-engine-logging --all2all-backend --allow-credentials --allow-deprecated-quantization
    --allowed-headers --allowed-local-media-path --allowed-media-domains --allowed-methods --allowed-origins
    --anthropic-disabled-thinking-effort --api-key --api-server-count --async-scheduling --attention-backend
    --attention-config --aux-output-config --block-size --chat-template --chat-template-content-format --code-revision
    --cohere-format --cohere-is-reasoning-model --collect-detailed-traces --compilation-config --config --config-format
    --convert --cp-kv-cache-interleave-size --cpu-distributed-timeout-seconds --cpu-offload-gb --cpu-offload-params
    --cudagraph-capture-sizes --cudagraph-metrics --custom-histogram-buckets --data-parallel-address
    --data-parallel-backend --data-parallel-external-lb --data-parallel-hybrid-lb --data-parallel-multi-port-external-lb
    --data-parallel-rank --data-parallel-rpc-port --data-parallel-size --data-parallel-size-local
    --data-parallel-start-rank --data-parallel-supervisor-port --dbo-decode-token-threshold
    --dbo-prefill-token-threshold --dcp-comm-backend --dcp-kv-cache-interleave-size --dcp-q-replicate
    --decode-context-parallel-size --default-chat-template-kwargs --default-mm-loras --device-ids
    --device-memory-utilization --diffusion-config --disable-access-log-for-endpoints --disable-cascade-attn
    --disable-chunked-mm-input --disable-custom-all-reduce --disable-fastapi-docs --disable-hybrid-kv-cache-manager
    --disable-log-stats --disable-nccl-for-dp-synchronization --disable-sliding-window --disable-uvicorn-access-log
    --distributed-executor-backend --distributed-timeout-seconds --download-dir --dp-supervisor-probe-failure-threshold
    --dp-supervisor-probe-interval-s --dp-supervisor-probe-timeout-s --dp-sync-interval --dtype --ec-manager-config
    --ec-transfer-config --elastic-ep-max-dp-size --enable-auto-tool-choice --enable-batch-sharded-sampling
    --enable-chunked-prefill --enable-cumem-allocator --enable-dbo --enable-elastic-ep --enable-ep-weight-filter
    --enable-eplb --enable-expert-parallel --enable-fault-tolerance --enable-flash-late-interaction
    --enable-flashinfer-autotune --enable-force-include-usage --enable-hc-sp --enable-layerwise-nvtx-tracing
    --enable-log-deltas --enable-log-outputs --enable-log-requests --enable-logging-iteration-details --enable-lora
    --enable-mamba-cache-stochastic-rounding --enable-mamba-shared-prefix-checkpoint --enable-mfu-metrics
    --enable-mixed-moe-lora-format --enable-mm-embeds --enable-moe-shared-loras --enable-nccl-comm-suspend
    --enable-offline-docs --enable-per-request-metrics --enable-prefix-caching --enable-prompt-embeds
    --enable-prompt-tokens-details --enable-request-id-headers --enable-return-routed-experts --enable-scale-out
    --enable-server-load-tracking --enable-shm-tensor-arena --enable-sleep-mode --enable-ssl-refresh
    --enable-tokenizer-info-endpoint --enable-tower-connector-lora --enable-trace-replay --enforce-eager --engram-config
    --eplb-config --exclude-tools-when-tool-choice-none --expert-placement-strategy --fail-on-environ-validation
    --fault-tolerance-config --fingerprint-mode --fingerprint-value --fully-sharded-loras --gdn-prefill-backend
    --generation-config --gpu-memory-utilization --grpc --grpc-port --h11-max-header-count
    --h11-max-incomplete-event-size --headless --help --hf-config-path --hf-overrides --hf-token --host
    --ignore-patterns --interleave-mm-strings --io-processor-plugin --ir-op-priority --jit-monitor-mode
    --jit-monitor-verbose --kda-decode-backend --kda-prefill-backend --kernel-config --kv-cache-dtype
    --kv-cache-dtype-skip-layers --kv-cache-memory-bytes --kv-cache-metrics --kv-cache-metrics-sample --kv-events-config
    --kv-offloading-backend --kv-offloading-size --kv-sharing-fast-prefill --kv-transfer-config --language-model-only
    --limit-mm-per-prompt --linear-backend --load-format --log-config-file --log-error-stack --log-level
    --logging-config --logits-processors --logprobs-mode --long-prefill-token-threshold
    --long-prefill-token-threshold-adaptive --lora-dtype --lora-modules --lora-target-modules --mamba-backend
    --mamba-block-size --mamba-cache-dtype --mamba-cache-mode --mamba-cache-philox-rounds --mamba-ssm-cache-dtype
    --mamba-ssu-algorithm --master-addr --master-port --max-cpu-loras --max-cudagraph-capture-size --max-log-len
    --max-logprobs --max-lora-cls-labels --max-lora-rank --max-loras --max-model-len --max-num-active-seqs
    --max-num-batched-tokens --max-num-queued-reqs --max-num-queued-tokens --max-num-scheduled-tokens --max-num-seqs
    --max-parallel-loading-workers --media-io-kwargs --middleware --mm-device-do-normalize --mm-encoder-attn-backend
    --mm-encoder-attn-dtype --mm-encoder-fp8-scale-path --mm-encoder-fp8-scale-save-margin
    --mm-encoder-fp8-scale-save-path --mm-encoder-only --mm-encoder-tp-mode --mm-hasher-algorithm --mm-ipc-gpu-memory-gb
    --mm-processor-cache-gb --mm-processor-cache-type --mm-processor-device --mm-processor-kwargs
    --mm-shm-cache-max-object-size-mb --mm-tensor-ipc --model --model-class-overrides --model-impl
    --model-loader-extra-config --moe-backend --nnodes --no-allow-credentials --no-allow-deprecated-quantization
    --no-async-scheduling --no-cohere-is-reasoning-model --no-cudagraph-metrics --no-data-parallel-external-lb
    --no-data-parallel-hybrid-lb --no-dcp-q-replicate --no-disable-cascade-attn --no-disable-chunked-mm-input
    --no-disable-custom-all-reduce --no-disable-fastapi-docs --no-disable-hybrid-kv-cache-manager
    --no-disable-nccl-for-dp-synchronization --no-disable-sliding-window --no-disable-uvicorn-access-log
    --no-enable-auto-tool-choice --no-enable-batch-sharded-sampling --no-enable-chunked-prefill
    --no-enable-cumem-allocator --no-enable-dbo --no-enable-elastic-ep --no-enable-ep-weight-filter --no-enable-eplb
    --no-enable-expert-parallel --no-enable-fault-tolerance --no-enable-flash-late-interaction
    --no-enable-flashinfer-autotune --no-enable-force-include-usage --no-enable-hc-sp --no-enable-layerwise-nvtx-tracing
    --no-enable-log-deltas --no-enable-log-outputs --no-enable-log-requests --no-enable-logging-iteration-details
    --no-enable-lora --no-enable-mamba-cache-stochastic-rounding --no-enable-mamba-shared-prefix-checkpoint
    --no-enable-mfu-metrics --no-enable-mixed-moe-lora-format --no-enable-mm-embeds --no-enable-moe-shared-loras
    --no-enable-nccl-comm-suspend --no-enable-offline-docs --no-enable-per-request-metrics --no-enable-prefix-caching
    --no-enable-prompt-embeds --no-enable-prompt-tokens-details --no-enable-request-id-headers
    --no-enable-return-routed-experts --no-enable-scale-out --no-enable-server-load-tracking
    --no-enable-shm-tensor-arena --no-enable-sleep-mode --no-enable-ssl-refresh --no-enable-tokenizer-info-endpoint
    --no-enable-tower-connector-lora --no-enable-trace-replay --no-enforce-eager
    --no-exclude-tools-when-tool-choice-none --no-fail-on-environ-validation --no-fully-sharded-loras
    --no-interleave-mm-strings --no-jit-monitor-verbose --no-kv-cache-metrics --no-kv-sharing-fast-prefill
    --no-language-model-only --no-log-error-stack --no-long-prefill-token-threshold-adaptive --no-mm-device-do-normalize
    --no-mm-encoder-only --no-numa-bind --no-ray-workers-use-nsight --no-return-sampling-mask
    --no-return-tokens-as-token-ids --no-scheduler-reserve-full-isl --no-skip-mm-profiling --no-skip-tokenizer-init
    --no-sleep-mode-offload-cudagraph --no-specialize-active-lora --no-swa-bounded-replay --no-tokens-only
    --no-trust-remote-code --no-trust-request-chat-template --no-trust-request-mm-kwargs --no-use-fp64-gumbel
    --no-use-replayssm --no-use-tqdm-on-load --node-rank --num-gpu-blocks-override --numa-bind --numa-bind-cpus
    --numa-bind-nodes --offload-backend --offload-group-size --offload-num-in-group --offload-params
    --offload-prefetch-step --optimization-level --otlp-traces-endpoint --override-generation-config
    --per-request-spec-decode-metrics --performance-mode --pipeline-parallel-size --pooler-config --port
    --prefill-context-parallel-size --prefill-schedule-interval --prefix-cache-retention-interval
    --prefix-caching-hash-algo --prefix-match-unit --profiler-config --pt-load-map-location --quantization
    --quantization-config --ray-workers-use-nsight --reasoning-config --reasoning-parser --reasoning-parser-plugin
    --renderer-num-workers --replayssm-buffer-len --response-role --return-sampling-mask --return-tokens-as-token-ids
    --revision --root-path --runner --safetensors-load-strategy --safetensors-prefetch-block-size
    --safetensors-prefetch-num-threads --scheduler-cls --scheduler-reserve-full-isl --scheduling-policy --seed
    --served-model-name --show-hidden-metrics-for-version --shutdown-timeout --skip-mm-profiling --skip-tokenizer-init
    --sleep-mode-offload-cudagraph --sleep-preserve-parameter-names --sparse-indexer-topk-backend --spec-method
    --spec-model --spec-tokens --specialize-active-lora --speculative-config --sse-keep-alive-interval --ssl-ca-certs
    --ssl-cert-reqs --ssl-certfile --ssl-ciphers --ssl-keyfile --stream-interval --structured-outputs-config
    --swa-bounded-replay --tensor-parallel-size --tokenizer --tokenizer-mode --tokenizer-revision --tokens-only
    --tool-call-parser --tool-parser-plugin --tool-server --tool-strict-level --trust-remote-code
    --trust-request-chat-template --trust-request-mm-kwargs --ubatch-size --uds --use-fp64-gumbel --use-replayssm
    --use-tqdm-on-load --uvicorn-log-level --video-pruning-method --video-pruning-rate --watermark --watermark-config
    --weight-transfer-config --worker-cls --worker-extension-cls -ac -asc -cc -dc -dcp -dp -dpa -dpb -dpe -dph -dpl -dpm
    -dpn -dpp -dpr -ep -h -n -pcp -pp -q -r -sc -tp
""".split())
"""Every option string of vLLM 0.32.0's API server parser (vllm/entrypoints/launchers/cli_args.py make_arg_parser on
FlexibleArgumentParser, allow_abbrev on); tests/engine/test_vllm_refusals.py holds it equal to the installed
vLLM's parser."""
FLAGS_VERSION = "0.32.0"

RENDERED_SINCE = {"--shutdown-timeout": "0.18.0"}
"""Flags the program renders that older vLLM releases lack (the server exits on an unrecognized argument): read from
each release's vllm/engine/arg_utils.py in its PyPI sdist (0.16.0 and 0.17.0 have no --shutdown-timeout; 0.18.0,
0.19.0, 0.20.0 and 0.25.1 have it). Every other flag the program renders is in 0.18.0's engine and server argument
sources too (the same sdist read), so 0.18.0 is the oldest release the rendered command is known to start."""

_VERSION = re.compile(r":v?(\d+)\.(\d+)\.(\d+)(?:[-.+][0-9A-Za-z.+-]*)?$")


def image_version(image: str) -> tuple[int, int, int] | None:
    """The vLLM version an image tag names (vllm/vllm-openai:v0.25.1 -> (0, 25, 1)); None for a digest or another
    tag."""
    found = _VERSION.search(image.split("@", 1)[0])
    return tuple(int(g) for g in found.groups()) if found else None  # type: ignore[return-value]


def version_key(version: str) -> tuple[int, ...]:
    """'0.18.0' -> (0, 18, 0): versions compared by their numbers."""
    return tuple(int(p) for p in version.split("."))


def canonical(word: str, flags: frozenset[str] = VLLM_0_32_FLAGS) -> str:
    """A command-line word as vLLM's parser reads it: a long flag's name with `-` for `_`, its unambiguous prefix
    expanded, `=value` kept; values and short flags as they are."""
    if not word.startswith("--") or len(word) <= 2:
        return word
    name, eq, value = word.partition("=")
    name = name.replace("_", "-")
    if name not in flags:
        matches = [f for f in flags if f.startswith(name)]
        if len(matches) == 1:
            name = matches[0]
    return f"{name}{eq}{value}"


def canonical_args(words: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """`words` as vLLM's parser reads them: dotted flags folded (folded_dotted), each word canonical."""
    return tuple(canonical(word) for word in folded_dotted([word.strip() for word in words]))


_SUFFIXES = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _dotted_value(text: str) -> object:
    """A dotted flag's value as vLLM's parser reads it: JSON, else a number with a decimal (k, m, g, t) or a binary
    (K, M, G, T; integers only) suffix, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    found = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text.strip())
    if not found:
        return text
    number, suffix = found.groups()
    if suffix.islower():
        return int(float(number) * _SUFFIXES[suffix])
    return text if "." in number else int(number) * _SUFFIXES[suffix]


def folded_dotted(words: list[str]) -> list[str]:
    """vLLM's FlexibleArgumentParser.parse_args on dotted flags: `--limit-mm-per-prompt.image 0` and
    `--mm-processor-kwargs.max_pixels=N` (a trailing `+` makes a comma list) set one key of the flag's JSON value;
    every dotted word of a flag merges into one object (nested keys merged, the last value of a key kept), which
    follows the other words, so it replaces a JSON value given whole (argparse keeps the last)."""
    kept: list[str] = []
    values: dict[str, dict[str, Any]] = {}
    skip = False
    for i, word in enumerate(words):
        if skip:
            skip = False
            continue
        name, eq, text = word.partition("=")
        if not (word.startswith("-") and "." in name):
            kept.append(word)
            continue
        if not eq:
            if i + 1 >= len(words):
                kept.append(word)
                continue
            text, skip = words[i + 1], True
        if name.endswith("+"):
            name, value = name[:-1], text.split(",")
        else:
            value = _dotted_value(text)
        flag, *keys = name.split(".")
        flag = "--" + flag[2:].replace("_", "-") if flag.startswith("--") else flag
        node = values.setdefault(flag, {})
        for key in keys[:-1]:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        last = keys[-1]
        if isinstance(value, list) and isinstance(node.get(last), list):
            node[last] = node[last] + value
        elif isinstance(value, dict) and isinstance(node.get(last), dict):
            node[last] = _merged(node[last], value)
        else:
            node[last] = value
    for flag, value in values.items():
        kept += [flag, json.dumps(value)]
    return kept


def _merged(original: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(original)
    for key, value in update.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def unknown_flag(words: tuple[str, ...] | list[str], flags: frozenset[str] = VLLM_0_32_FLAGS) -> str | None:
    """Why vLLM's parser would exit on one of `words` (an unrecognized or ambiguous long flag), or None."""
    for word in words:
        word = word.strip()
        if not word.startswith("--") or len(word) <= 2:
            continue
        name = word.partition("=")[0].partition(".")[0].replace("_", "-")  # a dotted flag sets a key of its value
        if name in flags:
            continue
        matches = sorted(f for f in flags if f.startswith(name))
        if len(matches) > 1:
            shown = ", ".join(matches[:4]) + (", ..." if len(matches) > 4 else "")
            return f"{word} is ambiguous to vLLM's parser ({shown})"
        if not matches:
            near = difflib.get_close_matches(name, sorted(flags), n=1)
            return f"vLLM has no flag {word.partition('=')[0]}{f'; did you mean {near[0]}?' if near else ''}"
    return None


def rendered_problem(image: str) -> str | None:
    """Why the vLLM of `image` would refuse a flag the program renders (RENDERED_SINCE), or None (also when the tag
    names no version)."""
    version = image_version(image)
    if version is None:
        return None
    for flag, since in RENDERED_SINCE.items():
        if version < version_key(since):
            return (f"vLLM {'.'.join(map(str, version))} has no {flag}, which the server's command passes (from "
                    f"vLLM {since}); use vLLM {since} or later")
    return None


OWNED_FLAGS = ("--model", "--served-model-name", "--host", "--port", "--tensor-parallel-size",
               "--pipeline-parallel-size", "--max-model-len", "--gpu-memory-utilization", "--dtype", "--kv-cache-dtype",
               "--api-key", "--distributed-executor-backend", "--shutdown-timeout", "--config", "--data-parallel-size",
               "--enable-expert-parallel", "--no-enable-expert-parallel")
"""vLLM flags the program renders from other keys or relies on (--config would load any of them from a file);
vllm.extraArgs may not set them in any spelling vLLM's parser accepts."""
OWNED_SHORT = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size", "-dp": "--data-parallel-size",
               "-ep": "--enable-expert-parallel"}
"""vLLM's short aliases of owned flags (vllm/engine/arg_utils.py)."""


def owned_flag(arg: str) -> str | None:
    """The owned flag `arg` sets, spelled as vLLM's parser reads it: `_` or `-` in the name (FlexibleArgumentParser
    turns underscores into dashes), `=value` attached, an unambiguous prefix (argparse's allow_abbrev, on in vLLM),
    or a short alias with or without its value attached (-tp4)."""
    for short, flag in OWNED_SHORT.items():
        if arg == short or (arg.startswith(short) and arg[len(short):].lstrip("=").isdigit()):
            return flag
    if not arg.startswith("--") or len(arg) <= 2:
        return None
    name = canonical(arg).split("=", 1)[0]
    return name if name in OWNED_FLAGS else None
