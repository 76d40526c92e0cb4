"""What vLLM refuses of a stack's settings, checked at preview with the same code for every rung: the flags of the
rendered command against vllm.image's release, vllm.extraArgs against vLLM's parser, --kv-cache-dtype against the
checkpoint's quantization, and the dtypes each rung's GPU lacks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from planner import vllm_flags
from planner.architecture import ModelArchitecture
from planner.catalog import ACCELERATORS
from planner.commands import flag_value
from planner.engine import DEFAULT_PROFILE, profile_for_image
from planner.errors import ConfigError
from planner.vllm_flags import version_key

if TYPE_CHECKING:
    from planner.config import AcceleratorSettings


def _loads_kv_scales(arch: ModelArchitecture) -> bool:
    """Whether vLLM 0.32.0 hands the model's attention layers a KV-cache method (fp8 KV scales) from the checkpoint's
    quantization config (get_quant_method of vllm/model_executor/layers/quantization/): modelopt's FP8 and NVFP4
    configs for every attention layer, MLA's too (modelopt.py ModelOptQuantConfigBase); fp8 and quark for
    Attention layers, not MLA's (fp8.py, quark/quark.py); compressed-tensors where it declares a kv_cache_scheme
    (attention.py lets a scheme-less one keep fp8_e5m2). tests/engine/test_vllm_refusals.py holds this to vLLM."""
    method = arch.quant_method
    if method.startswith("modelopt"):
        return True
    if arch.kv_lora_rank:
        return False
    return method in ("fp8", "quark") or (method == "compressed-tensors" and bool(arch.checkpoint_kv_dtype))


def vllm_rules(v: Any, arch: ModelArchitecture) -> list[str]:
    """What vLLM's parser and model loader refuse of vllm.image, vllm.extraArgs and vllm.kvCacheDtype (refused in one
    line); returns warnings for what can only be checked against vLLM 0.32.0's parser."""
    if problem := vllm_flags.rendered_problem(v.image):
        raise ConfigError("vllm.image", v.image, problem)
    warnings = []
    if problem := vllm_flags.unknown_flag(v.extra_args):
        version = vllm_flags.image_version(v.image)
        if version is None or ".".join(map(str, version)) == vllm_flags.FLAGS_VERSION:
            raise ConfigError("vllm.extraArgs", list(v.extra_args),
                              f"{problem}; accepted: the flags of vLLM {vllm_flags.FLAGS_VERSION}'s server, in any "
                              "spelling its parser reads (- or _, =value, an unambiguous prefix)")
        warnings.append(f"vllm.extraArgs: {problem} in vLLM {vllm_flags.FLAGS_VERSION}; not verified for "
                        f"{v.image}, whose parser this plan does not have")
    if any(word.partition("=")[0] == "--trust-remote-code" for word in vllm_flags.canonical_args(v.extra_args)):
        raise ConfigError("vllm.extraArgs", list(v.extra_args),
                          "--trust-remote-code is model.trustRemoteCode: set that to true, which also has the "
                          "download Job take the repository's *.py files vLLM imports")
    # vllm/model_executor/layers/mamba/mamba_utils.py kda_state_dtype: "KDA recurrent state supports only auto,
    # float32, and bfloat16".
    ssm = flag_value(vllm_flags.canonical_args(v.extra_args), "--mamba-ssm-cache-dtype")
    if "kda" in arch.kinds and arch.kda_state_flag and ssm not in (None, "auto", "float32", "bfloat16") \
            and profile_for_image(v.image).profile.kda_ssm_flag:
        raise ConfigError("vllm.extraArgs", f"--mamba-ssm-cache-dtype {ssm}",
                          f"{arch.name}'s Kimi Delta Attention layers keep their recurrent state in auto (float32), "
                          "float32 or bfloat16 only, and vLLM refuses other dtypes; use one of those")
    # vllm/model_executor/layers/attention/attention.py _init_kv_cache_quant: "fp8_e5m2 kv-cache is not supported
    # with fp8 checkpoints" wherever the attention layer loads fp8 KV scales.
    if v.kv_cache_dtype == "fp8_e5m2" and _loads_kv_scales(arch):
        raise ConfigError("vllm.kvCacheDtype", v.kv_cache_dtype,
                          f"{arch.name} is an fp8 checkpoint ({arch.quant_method}) whose attention layers load fp8 "
                          "KV scales, and vLLM refuses fp8_e5m2 with it; use fp8 (fp8_e4m3) or auto")
    return warnings


def rung_gpus(accelerator: AcceleratorSettings) -> list[tuple[str, str]]:
    """(config key, GPU type) of every rung a replica may run on: accelerator.rungs where the stack has fallbacks (the
    first is the accelerator's own), else the accelerator alone."""
    return [(r.key, r.type) for r in accelerator.rungs] or [("accelerator", accelerator.type)]


DSV4_GPUS = frozenset({"nvidia-h100-80gb", "nvidia-h100-mega-80gb", "nvidia-h200-141gb", "nvidia-b200"})
"""The catalog's GPUs of compute capability 9.x and 10.x, the only ones DeepSeek V4's FlashMLA sparse backend serves
(vllm/models/deepseek_v4/sparse_mla.py supports_compute_capability: major 9 or 10; H100 and H200 9.0, B200 10.0)."""


def dsv4_rules(accelerator: AcceleratorSettings, v: Any, arch: ModelArchitecture) -> None:
    """What vLLM refuses of a DeepSeek V4 model (any "csa", "hca" or "swa" layer): a KV-cache dtype other than FP8,
    or auto where the image's release takes it (EngineProfile.dsv4_auto_kv), since FlashMLA keeps the cache in its
    fp8_ds_mla layout (vllm/models/deepseek_v4/attention.py _resolve_dsv4_kv_cache_dtype: "fp8_ds_mla layout only
    supports fp8 kv-cache"), and a GPU outside DSV4_GPUS on any rung (a fallback runs the same pod)."""
    if not arch.compressed_attention:
        return
    auto = profile_for_image(v.image).profile.dsv4_auto_kv
    if not v.kv_cache_dtype.startswith("fp8") and (v.kv_cache_dtype != "auto" or not auto):
        raise ConfigError("vllm.kvCacheDtype", v.kv_cache_dtype,
                          f"{arch.name} (DeepSeek V4) keeps its KV cache in FlashMLA's fp8_ds_mla layout, and "
                          f"vLLM {'refuses any other dtype' if auto else 'of this image refuses any but fp8'} with "
                          f"it; use {'auto or ' if auto else ''}fp8")
    for key, gpu in rung_gpus(accelerator):
        if gpu not in DSV4_GPUS:
            raise ConfigError(f"{key}.type", gpu, f"{arch.name} (DeepSeek V4) runs on vLLM's FlashMLA sparse "
                                                  "attention, which serves compute capability 9.x and 10.x only; "
                                                  f"use one of {', '.join(sorted(DSV4_GPUS))}")


def release_rules(v: Any, arch: ModelArchitecture) -> list[str]:
    """A one-line warning where vllm.image is a release (or older) that has no class for the model's architecture
    (EngineProfile.unserved): vLLM 0.32.0 serves it, that release would only try its Transformers backend, which
    the plan does not verify."""
    choice = profile_for_image(v.image)
    if choice.image_version is None or arch.architecture not in choice.profile.unserved \
            or version_key(choice.image_version) > version_key(choice.profile.version):
        return []
    return [f"vllm.image = {v.image}: vLLM {choice.image_version} has no class for {arch.architecture} ({arch.name}); "
            f"vLLM {DEFAULT_PROFILE} serves it, and this release could start it only through its Transformers "
            "backend, if at all: the plan is not verified for this image"]


def inkling_rules(v: Any, arch: ModelArchitecture) -> None:
    """What vLLM refuses of an Inkling model: a model dtype other than bfloat16 (vllm.dtype, or under auto the
    checkpoint's float16), since its conv-state cache takes bfloat16 only (vllm/models/inkling/nvidia/sconv_swa_attn.py
    InklingConvState: "sconv SWA cache supports bfloat16 only")."""
    if not arch.inkling:
        return
    dtype = v.dtype if v.dtype != "auto" else arch.torch_dtype if arch.torch_dtype in ("float16", "half") else ""
    if dtype in ("float16", "half", "float32", "float"):
        raise ConfigError("vllm.dtype", v.dtype, f"{arch.name} (Inkling) keeps its short-convolution states in a "
                                                 f"bfloat16 cache, and vLLM refuses a {dtype} model with it; use "
                                                 "bfloat16")


def gpu_rules(accelerator: AcceleratorSettings, v: Any) -> None:
    """What vLLM refuses on a GPU generation, checked on every rung's GPU with the same code: a fallback runs the
    same pod, so a dtype its GPU lacks fails there as it would on the primary."""
    for key, gpu in rung_gpus(accelerator):
        catalog = ACCELERATORS[gpu]
        if catalog.bfloat16:
            continue
        for field, value in (("vllm.dtype", v.dtype), ("vllm.kvCacheDtype", v.kv_cache_dtype)):
            if value != "bfloat16":
                continue
            if key == "accelerator":
                raise ConfigError(field, value, f"{catalog.display} has no bfloat16 (compute capability below 8.0) "
                                              "and vLLM refuses it; use float16 or auto")
            raise ConfigError(f"{key}.type", gpu,
                              f"{catalog.display} has no bfloat16 (compute capability below 8.0) and vLLM refuses "
                              f"{field} {value} there; use another fallback, or {field} float16 or auto")
