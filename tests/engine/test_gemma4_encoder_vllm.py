"""Gemma 4's encoder profile as vLLM 0.32.0 builds it (planner/memory.py gemma4_items, gemma4_modality,
with_item_floor, tower_chunk; planner/sizing.py refuse_unsupported_soft_tokens), held to
vllm/model_executor/models/gemma4_mm.py (compiled from its source: the module imports a processor that needs
torchvision, which the CPU test environment does not install) and vllm/engine/arg_utils.py (run). Its bytes on a GPU:
bench/tower_peak.py (docs/benchmarks.md)."""

from __future__ import annotations

import ast
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from planner.catalog import ACCELERATORS
from planner.config import PROJECT_DIR
from planner.errors import ConfigError
from planner.memory import (
    default_engine,
    encoder_item,
    gemma4_items,
    gemma4_modality,
    multimodal_inputs,
    tower_chunk,
    with_item_floor,
)
from planner.model_config import parse_hf_config
from planner.sizing import refuse_unsupported_soft_tokens
from tests.engine.test_encoder_profile_vllm import both_refuse, compiled, source_path

pytest.importorskip("torch")
pytest.importorskip("vllm")

GEMMA4_MM = source_path("vllm", "model_executor", "models", "gemma4_mm.py")
CONFIG = json.loads((PROJECT_DIR / "models" / "gemma-4-31B-it.json").read_text())
KWARGS = [{}, {"max_soft_tokens": 560}, {"images_kwargs": {"max_soft_tokens": 1120}},
          {"max_soft_tokens": 70, "images_kwargs": {"max_soft_tokens": 1120}}, {"max_soft_tokens": 300}]
LIMITS = [None, {"video": 0}, {"image": 0}, {"image": 2, "video": 1}, {"video": {"count": 1, "num_frames": 8}},
          {"video": {"num_frames": 3}}, {"video": {"num_frames": 40}}]


def module_constants() -> dict:
    """gemma4_mm.py's module-level constants (_SUPPORTED_SOFT_TOKENS, _VIDEO_MAX_FRAMES, ...)."""
    tree = ast.parse(GEMMA4_MM.read_text())
    return {t.id: ast.literal_eval(a.value) for a in tree.body if isinstance(a, ast.Assign)
            for t in a.targets if isinstance(t, ast.Name) and isinstance(a.value, (ast.Constant, ast.Tuple))}


def namespace(value):
    if isinstance(value, dict):
        return SimpleNamespace(**{k: namespace(v) for k, v in value.items()})
    return value


def mm_config(limits: dict | None, kwargs: dict | None = None):
    from vllm.config.multimodal import MultiModalConfig

    return MultiModalConfig(mm_processor_kwargs=kwargs or {}, limit_per_prompt=limits or {})


def processing_info(kwargs: dict, limits: dict | None):
    """Gemma4ProcessingInfo's token methods of vLLM 0.32.0, on the model's config and a multimodal config of these
    --mm-processor-kwargs and --limit-mm-per-prompt (vLLM's own MultiModalConfig)."""
    config = mm_config(limits, kwargs)
    scope = {**module_constants(), **compiled(GEMMA4_MM, ("_get_max_soft_tokens",))}
    methods = compiled(GEMMA4_MM, ("get_mm_max_tokens_per_item", "get_supported_mm_limits"), "Gemma4ProcessingInfo",
                       scope)
    ctx = SimpleNamespace(get_merged_mm_kwargs=config.merge_mm_processor_kwargs,
                          model_config=SimpleNamespace(get_multimodal_config=lambda: config))
    hf = namespace(CONFIG)
    return type("Info", (), {**methods, "ctx": ctx, "get_hf_config": lambda self: hf,
                             "has_audio": lambda self: CONFIG.get("audio_config") is not None})()


def gemma4(extra: tuple[str, ...] = (), accelerator: str = "nvidia-h200-141gb"):
    a = parse_hf_config(CONFIG, "gemma-4-31B-it", "test")
    return a, replace(default_engine(ACCELERATORS[accelerator], "0.32.0", extra_args=extra), max_model_len=8192)


def flags(kwargs: dict, limits: dict | None) -> tuple[str, ...]:
    return ((("--mm-processor-kwargs", json.dumps(kwargs)) if kwargs else ())
            + (("--limit-mm-per-prompt", json.dumps(limits)) if limits else ()))


@pytest.mark.parametrize("limits", LIMITS)
@pytest.mark.parametrize("kwargs", KWARGS)
def test_the_items_are_the_ones_vllm_counts_and_profiles(kwargs, limits):
    """Gemma4ProcessingInfo.get_mm_max_tokens_per_item (an image: max_soft_tokens where it is a supported value, the
    flat key over images_kwargs', else default_output_length; a video: 32 frames of 70 soft tokens and 8 more), and
    the modality MultiModalBudget profiles: the one of the most tokens an item among those left on."""
    from vllm.multimodal.encoder_budget import MultiModalBudget

    a, engine = gemma4(flags(kwargs, limits))
    info = processing_info(kwargs, limits)
    tokens = info.get_mm_max_tokens_per_item(8192, {m: 1 for m in info.get_supported_mm_limits()})
    planned = gemma4_items(a, engine)
    assert {m: planned[m][0] for m in planned} == dict(tokens)
    served = {m: t for m, t in tokens.items() if mm_config(limits).get_limit_per_prompt(m) != 0}
    expected = MultiModalBudget.get_modality_with_max_tokens(SimpleNamespace(mm_max_toks_per_item=served))
    assert gemma4_modality(a, engine) == expected
    from vllm.multimodal.processing.dummy_inputs import BaseDummyInputsBuilder

    frames = BaseDummyInputsBuilder._get_dummy_videos(  # Gemma4DummyInputsBuilder asks for max(32, 2) frames
        None, width=224, height=224, num_frames=32, num_videos=1,
        overrides=mm_config(limits).limit_per_prompt.get("video"))[0].shape[0]
    assert planned["video"][1] == frames
    patches, item_tokens = encoder_item(a, engine)
    assert item_tokens == tokens[expected]
    assert patches == planned[expected][1] * planned[expected][2]


def vllm_batched_tokens(accelerator: str, given: int | None, limits: dict | None, monkeypatch) -> int:
    """max_num_batched_tokens as vLLM 0.32.0's EngineArgs sets it for the OpenAI server on this GPU
    (_set_default_max_num_seqs_and_batched_tokens_args, with its _get_min_mm_batched_tokens reading the processing
    info above)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.platforms import current_platform
    from vllm.usage.usage_lib import UsageContext

    acc = ACCELERATORS[accelerator]
    monkeypatch.setattr(type(current_platform), "get_device_total_memory",
                        classmethod(lambda cls, i=0: acc.memory_bytes), raising=False)
    monkeypatch.setattr(type(current_platform), "get_device_name", classmethod(lambda cls, i=0: acc.device_name),
                        raising=False)
    for check in ("is_cpu", "is_tpu"):
        monkeypatch.setattr(type(current_platform), check, classmethod(lambda cls: False))
    info = processing_info({}, limits)
    info.supported_mm_limits = info.get_supported_mm_limits()
    monkeypatch.setattr(MULTIMODAL_REGISTRY, "get_processing_info", lambda model_config: info)
    args = EngineArgs(max_num_batched_tokens=given)
    args.enable_chunked_prefill = True  # _set_default_chunked_prefill_and_prefix_caching_args, before: supported
    a, _ = gemma4()
    model = SimpleNamespace(is_multimodal_model=True, is_mm_prefix_lm=a.image_prefix_lm, max_model_len=8192,
                            model="gemma-4-31B-it")
    args._set_default_max_num_seqs_and_batched_tokens_args(UsageContext.OPENAI_API_SERVER, model,
                                                           SimpleNamespace(use_batched_dp_moe=False))
    return args.max_num_batched_tokens


@pytest.mark.parametrize("limits", [None, {"video": 0}])
@pytest.mark.parametrize("given", [None, 2048, 1024])
@pytest.mark.parametrize("accelerator", ["nvidia-l4", "nvidia-tesla-t4", "nvidia-h100-80gb", "nvidia-h200-141gb"])
def test_a_defaulted_batch_is_raised_to_the_largest_item_as_vllm_raises_it(accelerator, given, limits, monkeypatch):
    """vLLM raises a defaulted max_num_batched_tokens of a prefix-LM model to its largest item of any supported
    modality (Gemma 4: the video, 2,496 tokens, even where --limit-mm-per-prompt turns video off); a given one
    stands."""
    extra = flags({}, limits) + (("--max-num-batched-tokens", str(given)) if given else ())
    a, engine = gemma4(extra, accelerator)
    assert with_item_floor(a, engine).max_num_batched_tokens == vllm_batched_tokens(accelerator, given, limits,
                                                                                    monkeypatch)


@pytest.mark.parametrize("free_share", [1.0, 0.5, 0.15, 0.02])
@pytest.mark.parametrize("kwargs", [{}, {"max_soft_tokens": 1120}, {"max_soft_tokens": 70}])
@pytest.mark.parametrize("accelerator", ["nvidia-l4", "nvidia-h100-80gb", "nvidia-h200-141gb"])
def test_the_tower_runs_in_vllms_chunks(accelerator, kwargs, free_share):
    """Gemma4ForConditionalGeneration._encoder_chunk: with the GPU free at least a fifth, the chunk the plan takes;
    with less free, never a larger one (the plan's is the larger, the safe side)."""
    chunk = compiled(GEMMA4_MM, ("_encoder_chunk",), "Gemma4ForConditionalGeneration")["_encoder_chunk"]
    a, engine = gemma4(flags(kwargs, {"video": 0}), accelerator)
    patches = gemma4_items(a, engine)["image"][2]
    total = ACCELERATORS[accelerator].memory_bytes
    theirs = chunk(patches, int(total * free_share), total, CONFIG["vision_config"]["position_embedding_size"])
    ours = tower_chunk(a, engine, patches)
    assert ours == theirs if free_share >= 0.2 else theirs <= ours


SOFT_TOKENS = [70, 140, 280, 560, 1120, 300, 0, 1, "280", True, 280.0, None]


@pytest.mark.parametrize("value", SOFT_TOKENS, ids=repr)
def test_a_max_soft_tokens_gemma4_refuses_is_refused_at_preview(value):
    """The condition on which Gemma4MultiModalProcessor raises 'Unsupported max_soft_tokens value' (compiled from its
    source) against the plan's refusal; a text-only serve builds no dummy batch and is planned."""
    tree = ast.parse(GEMMA4_MM.read_text())
    test = next(n.test for n in ast.walk(tree) if isinstance(n, ast.If) and "_SUPPORTED_SOFT_TOKENS" in
                ast.unparse(n.test) and any(isinstance(s, ast.Raise) for s in n.body))
    raises = eval("lambda val: " + ast.unparse(test), module_constants())
    kwargs = {} if value is None else {"max_soft_tokens": value}
    a, engine = gemma4(flags(kwargs, None))
    try:
        refuse_unsupported_soft_tokens(a, engine)
        refused = False
    except ConfigError as err:
        assert "max_soft_tokens" in str(err) and "1120" in str(err) and "\n" not in str(err)
        refused = True
    assert refused == raises(value)
    text_only = gemma4((*flags(kwargs, None), "--language-model-only"))
    refuse_unsupported_soft_tokens(*text_only)


@pytest.mark.parametrize("extra", [(), ("--max-num-batched-tokens", "2048"), ("--max-num-batched-tokens", "2496"),
                                   ("--max-num-batched-tokens", "2048", "--limit-mm-per-prompt", '{"video": 0}'),
                                   ("--max-num-batched-tokens", "1024", "--limit-mm-per-prompt", '{"video": 0}',
                                    "--mm-processor-kwargs", '{"max_soft_tokens": 1120}')])
def test_an_item_over_a_given_batch_is_refused_where_vllm_refuses_it(extra, monkeypatch):
    """vLLM 0.32.0's compute_mm_encoder_budget (chunked multimodal input forced off for Gemma 4's bidirectional
    attention over an item) on the batch vLLM's EngineArgs sets, against the plan's refusal."""

    a, engine = gemma4(extra)
    given = int(extra[1]) if extra else None
    limits = json.loads(extra[extra.index("--limit-mm-per-prompt") + 1]) if "--limit-mm-per-prompt" in extra else None
    batched = vllm_batched_tokens("nvidia-h200-141gb", given, limits, monkeypatch)
    assert a.image_prefix_lm and multimodal_inputs(a, engine)
    scheduler = SimpleNamespace(disable_chunked_mm_input=True, max_num_batched_tokens=batched,
                                max_num_encoder_input_tokens=batched, encoder_cache_size=batched)
    vllm_refuses, refused = both_refuse(a, engine, scheduler, {gemma4_modality(a, engine): encoder_item(a, engine)[1]})
    assert refused == vllm_refuses


def test_a_gemma4_with_an_audio_tower_keeps_its_encoder_profile_unplanned(tmp_path):
    """The audio tower's profile is not read: such a config (E2B / E4B) keeps the one-line warning that the KV tokens
    may be over-stated; the vision-only 31B plans its tower without one."""
    from tests.helpers import accel, sizing

    with_audio = {**CONFIG, "audio_config": {"model_type": "gemma4_audio", "hidden_size": 1024}}
    assert not parse_hf_config(with_audio, "gemma-4-audio", "test").encoder_input
    assert parse_hf_config(CONFIG, "gemma-4-31B-it", "test").encoder_input
    path = tmp_path / "config.json"
    path.write_text(json.dumps(with_audio))
    def warned() -> list[str]:
        plan = sizing(model={"id": "google/gemma-4", "configFile": str(path)}, accelerator=accel("nvidia-h200-141gb"))
        return [w for w in plan.warnings if "vision encoder" in w]

    assert len(warned()) == 1
    path.write_text(json.dumps(CONFIG))
    assert not warned()


TOWER_ROWS = json.loads((PROJECT_DIR / "docs" / "benchmarks" / "results.json").read_text())["encoder_tower_traces"]


@pytest.mark.parametrize("row", TOWER_ROWS["rows"], ids=lambda r: f"{r['run']}-{r['sized_for']}-{' '.join(r['extra'])}")
def test_todays_tower_bytes_stay_within_the_gpu_runs(row):
    """Gemma 4's tower on an H200 (bench/tower_peak.py, docs/benchmarks.md "Gemma 4's tower"): today's planner for
    the same batch is at most 2% under what it allocated (the side that over-states KV tokens) and 5% over."""
    import sys

    sys.path.insert(0, str(PROJECT_DIR))
    from bench.tower_peak import batch

    planned = batch(CONFIG, row["sized_for"], tuple(row["extra"]))
    assert (planned["units"], planned["patches"], planned["chunk"]) == (row["units"], row["patches"], row["chunk"])
    assert 0.98 <= planned["predicted_gib"] / row["measured_gib"] <= 1.05, planned["predicted_gib"]


@pytest.mark.parametrize("frames", [8, 1, 0, -1, 2.5, 8.0, "8", " 8", "8x", True, False, None, [8]], ids=repr)
def test_a_video_num_frames_is_taken_or_refused_as_vllms_config_takes_it(frames):
    """--limit-mm-per-prompt's video num_frames as vLLM's MultiModalConfig validates it (VideoDummyOptions, pydantic's
    lax int over 0): the plan refuses at preview in one line what vLLM refuses, and reads what it takes."""
    from pydantic import ValidationError

    limits = {"video": {"count": 1, "num_frames": frames}}
    try:
        taken = mm_config(limits).limit_per_prompt["video"].num_frames
    except ValidationError:
        taken = "refused"
    try:
        planned = gemma4(flags({}, limits))[1].video_frames
    except ConfigError as err:
        assert "num_frames" in str(err) and "\n" not in str(err)
        planned = "refused"
    assert planned == taken
