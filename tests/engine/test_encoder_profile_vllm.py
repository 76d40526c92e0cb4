"""The multimodal encoder's profile as vLLM 0.32.0 runs it (planner/memory.py encoder_profile_gib): which runner
profiles it, the dummy image of the Qwen-VL families, the dummy video that replaces it with a long max_model_len and
the number of items in the dummy batch, each from vLLM's own code; the GPU rows are validations 55-61
(docs/benchmarks.md)."""

from __future__ import annotations

import inspect
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from planner.catalog import ACCELERATORS
from planner.config import PROJECT_DIR
from planner.layout import Layout
from planner.memory import default_engine, encoder_item, encoder_items, peak_features
from planner.model_config import parse_hf_config

pytest.importorskip("torch")
pytest.importorskip("vllm")

H200 = ACCELERATORS["nvidia-h200-141gb"]


def arch(name: str):
    return parse_hf_config(json.loads((PROJECT_DIR / "models" / f"{name}.json").read_text()), name, "test")


def source_path(package: str, *parts: str):
    import importlib.util
    from pathlib import Path

    return Path(importlib.util.find_spec(package).origin).parent.joinpath(*parts)


def compiled(path, names: tuple[str, ...], cls: str = "", namespace: dict | None = None) -> dict:
    """Functions (or, with `cls`, methods of that class) of a source file compiled alone, with its module-level
    constants: the modules of vLLM 0.32.0's Qwen-VL processing and transformers' smart_resize import torchvision,
    which the CPU test environment does not install."""
    import ast
    import math
    from collections import namedtuple
    from collections.abc import Mapping
    from typing import Any, Literal, cast

    tree = ast.parse(path.read_text())
    body = next(c.body for c in tree.body if isinstance(c, ast.ClassDef) and c.name == cls) if cls else tree.body
    nodes = [f for f in body if isinstance(f, ast.FunctionDef) and f.name in names]
    constants = [a for a in tree.body if isinstance(a, ast.Assign) and isinstance(a.value, ast.Constant)]
    scope = {"math": math, "cast": cast, "Any": Any, "Literal": Literal, "Mapping": Mapping,
             "ImageSize": namedtuple("ImageSize", "width height"), **(namespace or {})}
    exec(compile(ast.Module(body=constants + nodes, type_ignores=[]), str(path), "exec"), scope)
    assert {f.name for f in nodes} == set(names)
    return {name: scope[name] for name in names}


def vllm_method(module: str, cls: str, name: str):
    """A method of vLLM 0.32.0's model source, compiled alone (compiled)."""
    return compiled(source_path("vllm", "model_executor", "models", module), (name,), cls)[name]


def test_both_runners_of_0_32_profile_the_encoder_and_0_25s_v2_does_not():
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner as V2Runner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner as V1Runner

    assert "profile_encoder_cache" in inspect.getsource(V2Runner.profile_run)
    assert "embed_multimodal" in inspect.getsource(V1Runner.profile_run)
    qwen = arch("Qwen3-VL-8B-Instruct")
    encoder = {(version, v1): peak_features(qwen, Layout(1, 1, 1),
                                            default_engine(H200, version, "v1" if v1 else "default")).encoder
               for version in ("0.32.0", "0.25.1") for v1 in (False, True)}
    assert encoder[("0.25.1", False)] == 0, "0.25.1 serves Qwen3-VL on Model Runner V2, whose profile runs no encoder"
    assert encoder[("0.32.0", False)] == encoder[("0.32.0", True)] == encoder[("0.25.1", True)] > 0


@pytest.mark.parametrize(("name", "max_pixels"), [("Qwen2.5-VL-7B-Instruct", 12_845_056),
                                                   ("Qwen3-VL-8B-Instruct", 16_777_216), ("Qwen3.6-27B", 16_777_216)])
def test_the_dummy_image_is_the_one_vllm_builds_for_the_published_processor(name, max_pixels):
    """vLLM's Qwen2-VL processing info factors the largest image into patches (get_image_size_with_most_features);
    its tokens are the merged patches. The processor's largest size is the published preprocessor_config.json's."""
    a = arch(name)
    vision = json.loads((PROJECT_DIR / "models" / f"{name}.json").read_text())["vision_config"]
    patch, merge = vision.get("patch_size", 14), vision.get("spatial_merge_size", 2)
    info = SimpleNamespace(get_hf_config=lambda: SimpleNamespace(
        vision_config=SimpleNamespace(patch_size=patch, spatial_merge_size=merge)))
    size = vllm_method("qwen2_vl.py", "Qwen2VLProcessingInfo", "get_image_size_with_most_features")(
        info, max_pixels=max_pixels)
    patches = (size.width // patch) * (size.height // patch)
    assert a.encoder_input.patches == patches and a.encoder_input.tokens == patches // merge ** 2


@pytest.mark.parametrize(("name", "seqs"), [("gemma-3-4b-it", 1024), ("gemma-3-4b-it", 128), ("gemma-3-4b-it", 1),
                                            ("Qwen3-VL-8B-Instruct", 1024)])
def test_the_dummy_batch_holds_as_many_items_as_vllms_budget(name, seqs):
    """MultiModalBudget._get_max_items with the encoder budget of compute_mm_encoder_budget, at vLLM's default
    limit per prompt (999) and chunked prefill on."""
    from vllm.multimodal.encoder_budget import MultiModalBudget
    from vllm.v1.core.encoder_cache_manager import compute_mm_encoder_budget

    a = arch(name)
    engine = default_engine(H200, "0.32.0", extra_args=("--max-num-seqs", str(seqs)))
    tokens = a.encoder_input.tokens
    scheduler = SimpleNamespace(max_num_encoder_input_tokens=engine.max_num_batched_tokens,
                                encoder_cache_size=engine.max_num_batched_tokens, disable_chunked_mm_input=False,
                                enable_chunked_prefill=True, max_num_batched_tokens=engine.max_num_batched_tokens)
    compute, cache = compute_mm_encoder_budget(scheduler, {"image": tokens})
    budget = SimpleNamespace(get_encoder_budget=lambda: min(compute, cache), mm_limits={"image": 999},
                             max_model_len=131072, scheduler_config=scheduler, max_num_reqs=seqs)
    _, items = MultiModalBudget._get_max_items(budget, "image", tokens)
    assert encoder_items(a, engine) == items


def test_the_encoder_term_moves_the_plan_where_it_sets_the_peak():
    """At 128 sequences on the V1 runner the encoder phase is Gemma-3-4B's peak: 32 SigLIP images of 4,096 patches
    (validation 55: 3.40 GiB profiled); turned off with the multimodal inputs."""
    a = arch("gemma-3-4b-it")
    served = peak_features(a, Layout(1, 1, 1), default_engine(H200, "0.25.1", "v1",
                                                               extra_args=("--max-num-seqs", "128")))
    assert 3.0 < served.encoder < 4.0 and served.encoder_outputs > 0
    text = peak_features(a, Layout(1, 1, 1), default_engine(H200, "0.25.1", "v1",
                                                             extra_args=("--max-num-seqs", "128",
                                                                         "--language-model-only")))
    assert text.encoder == text.encoder_outputs == 0


QWEN2_VL_INFO = ("_get_vision_info", "get_num_image_tokens", "get_num_video_tokens",
                 "get_image_size_with_most_features", "get_max_image_tokens", "_get_max_video_frames",
                 "get_num_frames_with_most_features", "get_max_video_tokens", "get_mm_max_tokens_per_item",
                 "_get_vision_size")


@pytest.mark.parametrize("max_len", [4096, 8192, 16384, 32768, 49152, 65536, 128000, 262144])
@pytest.mark.parametrize("name", ["Qwen2.5-VL-7B-Instruct", "Qwen2.5-VL-3B-Instruct"])
def test_the_profiled_item_is_the_modality_of_the_most_tokens_as_vllm_picks_it(name, max_len):
    """Qwen2VLProcessingInfo's image and video token counts (vLLM 0.32.0, compiled from its source with
    transformers' smart_resize) at the published processor and `max_len`, one item of each active modality as
    MultiModalBudget asks them, and its get_modality_with_max_tokens: the plan's item (image, or a video of
    temporal groups of the largest image) holds that modality's tokens, and merge^2 patches per token.
    Validations 59-61 ran the video at 32,768-65,536 tokens (4.43-8.82 GiB profiled, 2.2 GiB an image)."""
    from vllm.multimodal.encoder_budget import MultiModalBudget

    resize = compiled(source_path("transformers", "models", "qwen2_vl", "image_processing_qwen2_vl.py"),
                      ("smart_resize",))["smart_resize"]
    methods = compiled(source_path("vllm", "model_executor", "models", "qwen2_vl.py"), QWEN2_VL_INFO,
                       "Qwen2VLProcessingInfo", {"smart_resize": resize, "Qwen2VLImageProcessor": object})
    vision = json.loads((PROJECT_DIR / "models" / f"{name}.json").read_text())["vision_config"]
    processor = SimpleNamespace(size={"shortest_edge": 3136, "longest_edge": 12_845_056})  # preprocessor_config.json
    info_class = type("Info", (), {**methods, "get_image_processor": lambda self: processor,
                                   "_merge_and_resolve_mm_processor_kwargs": lambda self, kwargs: {},
                                   "get_hf_config": lambda self: SimpleNamespace(vision_config=SimpleNamespace(
                                       patch_size=vision["patch_size"], spatial_merge_size=vision["spatial_merge_size"],
                                       temporal_patch_size=vision["temporal_patch_size"]))})
    tokens = info_class().get_mm_max_tokens_per_item(seq_len=max_len, mm_counts={"image": 1, "video": 1})
    modality = MultiModalBudget.get_modality_with_max_tokens(SimpleNamespace(mm_max_toks_per_item=tokens))
    a = arch(name)
    patches, planned = encoder_item(a, replace(default_engine(H200, "0.32.0"), max_model_len=max_len))
    groups = planned // a.encoder_input.tokens
    assert planned == tokens[modality] and patches == planned * vision["spatial_merge_size"] ** 2
    assert (modality == "video" and groups > 1) == (tokens["video"] > tokens["image"])


@pytest.mark.parametrize(("name", "module", "cls"), [("Qwen2.5-VL-7B-Instruct", "qwen2_vl.py", "Qwen2VLProcessingInfo"),
                                                     ("Qwen3-VL-8B-Instruct", "qwen2_vl.py", "Qwen2VLProcessingInfo"),
                                                     ("Qwen3.6-27B", "qwen2_vl.py", "Qwen2VLProcessingInfo"),
                                                     ("gemma-3-4b-it", "gemma3_mm.py", "Gemma3ProcessingInfo"),
                                                     ("gemma-4-31B-it", "gemma4_mm.py", "Gemma4ProcessingInfo")])
def test_the_modalities_are_those_vllms_processing_info_supports(name, module, cls):
    """get_supported_mm_limits of the family's processing info (the Qwen-VL families inherit Qwen2-VL's; Gemma 4
    adds audio where the config has an audio tower): what --limit-mm-per-prompt must set to 0 for a text-only
    serve (ModelConfig._supports_multimodal_inputs)."""
    config = json.loads((PROJECT_DIR / "models" / f"{name}.json").read_text())
    supported = vllm_method(module, cls, "get_supported_mm_limits")(
        SimpleNamespace(has_audio=lambda: config.get("audio_config") is not None))
    assert set(arch(name).modalities) == set(supported)


@pytest.mark.parametrize(("limits", "groups", "served"), [(None, 4, True), ({"image": 0}, 4, True),
                                                          ({"video": 0}, 1, True), ({"video": {"count": 0}}, 1, True),
                                                          ({"image": 2, "video": 1}, 4, True),
                                                          ({"image": 0, "video": 0}, 0, False)])
def test_limit_mm_per_prompt_turns_off_the_modalities_it_sets_to_0(limits, groups, served):
    """vLLM allows 999 items of a modality the flag does not name (MultiModalConfig.get_limit_per_prompt) and serves
    text only where every supported modality is at 0; the encoder profile runs the largest item of the modalities
    left on (Qwen2.5-VL at 65,536 tokens: a video of 4 images' patches, or one image without video)."""
    from vllm.config.multimodal import MultiModalConfig

    from planner.memory import multimodal_inputs

    a = arch("Qwen2.5-VL-3B-Instruct")
    extra = () if limits is None else ("--limit-mm-per-prompt", json.dumps(limits))
    engine = replace(default_engine(H200, "0.32.0", extra_args=extra), max_model_len=65536)
    config = MultiModalConfig(limit_per_prompt=limits or {})
    assert served == any(config.get_limit_per_prompt(m) > 0 for m in a.modalities) == multimodal_inputs(a, engine)
    features = peak_features(a, Layout(1, 1, 1), engine)
    assert (features.encoder > 0) == served
    if served:
        assert encoder_item(a, engine)[1] == groups * a.encoder_input.tokens


def test_a_windowed_tower_is_read_where_vllm_builds_window_attention():
    """vLLM's Qwen2.5-VL tower reads window_size from its vision config (window attention between the
    fullatt_block_indexes blocks); Qwen2-VL's and Qwen3-VL's towers have none. The windowed tower holds more per patch
    (planner/memory.py ENCODER_WINDOW_STATES)."""
    source = source_path("vllm", "model_executor", "models", "qwen2_5_vl.py").read_text()
    assert "window_size" in source and "window_size" not in source_path(
        "vllm", "model_executor", "models", "qwen3_vl.py").read_text()
    assert arch("Qwen2.5-VL-7B-Instruct").encoder_input.windowed
    assert not arch("Qwen3-VL-8B-Instruct").encoder_input.windowed
    assert not arch("gemma-3-4b-it").encoder_input.windowed


def processor_kwarg_names(module: str, cls: str) -> set[str]:
    """The keyword names a transformers Qwen2-VL processor class declares (read from its source: the module imports
    torchvision), with its base's (`size` among them): what vLLM routes a flat --mm-processor-kwargs key by
    (BaseProcessingInfo.get_supported_mm_processor_kwargs)."""
    import ast

    from transformers.processing_utils import ImagesKwargs, VideosKwargs

    tree = ast.parse(source_path("transformers", "models", "qwen2_vl", module).read_text())
    node = next(c for c in tree.body if isinstance(c, ast.ClassDef) and c.name == cls)
    base = ImagesKwargs if "Image" in cls else VideosKwargs
    return set(base.__annotations__) | {a.target.id for a in node.body if isinstance(a, ast.AnnAssign)}


PROCESSOR_KWARGS = [{"max_pixels": 1_003_520}, {"max_pixels": 25_690_112},
                    {"images_kwargs": {"max_pixels": 25_690_112}}, {"videos_kwargs": {"max_pixels": 1_003_520}},
                    {"size": {"longest_edge": 4_000_000}},
                    {"max_pixels": 600_000, "videos_kwargs": {"max_pixels": 200_000}},
                    {"min_pixels": 20_000_000, "max_pixels": 25_690_112}, {"max_pixels": 165_424}]


@pytest.mark.parametrize("limits", [None, {"video": 0}, {"image": 0}])
@pytest.mark.parametrize("max_len", [8192, 32768, 131072])
@pytest.mark.parametrize("kwargs", PROCESSOR_KWARGS, ids=lambda k: json.dumps(k, separators=(",", ":")))
def test_mm_processor_kwargs_size_the_profiled_item_as_vllm_resolves_them(kwargs, max_len, limits):
    """--mm-processor-kwargs through vLLM 0.32.0's own merge and scope routing (MultiModalConfig
    .merge_mm_processor_kwargs, _resolve_mm_processor_kwargs with the scopes' keyword names from transformers'
    Qwen2-VL processors) into Qwen2VLProcessingInfo's token counts (compiled from its source with transformers'
    smart_resize): the plan's item is the modality of the most tokens among those left on. A larger max_pixels grows
    the image and can shrink the video (fewer frames fit); a prime token count is factored as vLLM factors it."""
    from vllm.config.multimodal import MultiModalConfig
    from vllm.multimodal.encoder_budget import MultiModalBudget
    from vllm.multimodal.processing.context import _resolve_mm_processor_kwargs

    supported = {"images_kwargs": processor_kwarg_names("image_processing_qwen2_vl.py", "Qwen2VLImageProcessorKwargs"),
                 "videos_kwargs": processor_kwarg_names("video_processing_qwen2_vl.py",
                                                         "Qwen2VLVideoProcessorInitKwargs")}
    assert {"min_pixels", "max_pixels", "size"} <= supported["images_kwargs"] & supported["videos_kwargs"]
    config = MultiModalConfig(mm_processor_kwargs=kwargs)
    resize = compiled(source_path("transformers", "models", "qwen2_vl", "image_processing_qwen2_vl.py"),
                      ("smart_resize",))["smart_resize"]
    methods = compiled(source_path("vllm", "model_executor", "models", "qwen2_vl.py"),
                       (*QWEN2_VL_INFO, "_complete_mm_processor_size_aliases"), "Qwen2VLProcessingInfo",
                       {"smart_resize": resize, "Qwen2VLImageProcessor": object})
    vision = json.loads((PROJECT_DIR / "models" / "Qwen2.5-VL-7B-Instruct.json").read_text())["vision_config"]
    processor = SimpleNamespace(size={"shortest_edge": 3136, "longest_edge": 12_845_056})  # preprocessor_config.json

    def merged(self, request):
        request = self._complete_mm_processor_size_aliases(request)
        return _resolve_mm_processor_kwargs(config.merge_mm_processor_kwargs(request),
                                            supported_mm_processor_kwargs=supported)

    info_class = type("Info", (), {**methods, "get_image_processor": lambda self: processor,
                                   "_merge_and_resolve_mm_processor_kwargs": merged,
                                   "get_hf_config": lambda self: SimpleNamespace(vision_config=SimpleNamespace(
                                       patch_size=vision["patch_size"], spatial_merge_size=vision["spatial_merge_size"],
                                       temporal_patch_size=vision["temporal_patch_size"]))})
    on = {m: 1 for m in ("image", "video") if not limits or limits.get(m) != 0}
    tokens = {m: t for m, t in info_class().get_mm_max_tokens_per_item(seq_len=max_len, mm_counts=on).items()
              if m in on}
    modality = MultiModalBudget.get_modality_with_max_tokens(SimpleNamespace(mm_max_toks_per_item=tokens))
    extra = ("--mm-processor-kwargs", json.dumps(kwargs)) + \
        (("--limit-mm-per-prompt", json.dumps(limits)) if limits else ())
    engine = replace(default_engine(H200, "0.32.0", extra_args=extra), max_model_len=max_len)
    patches, planned = encoder_item(arch("Qwen2.5-VL-7B-Instruct"), engine)
    assert planned == tokens[modality] and patches == planned * vision["spatial_merge_size"] ** 2


def test_mm_processor_kwargs_in_dotted_form_are_the_same_flag():
    """vLLM's parser folds `--mm-processor-kwargs.max_pixels N` into the JSON flag (planner/vllm_flags.py
    folded_dotted), so the plan reads it too: a larger image than the published processor's."""
    a = arch("Qwen2.5-VL-7B-Instruct")
    whole = default_engine(H200, "0.32.0", extra_args=("--mm-processor-kwargs", '{"max_pixels": 25690112}'))
    dotted = default_engine(H200, "0.32.0", extra_args=("--mm-processor-kwargs.max_pixels", "25690112"))
    assert encoder_item(a, whole) == encoder_item(a, dotted) == (131_072, 32_768)
    assert encoder_item(a, default_engine(H200, "0.32.0")) == (65_536, 16_384)


@pytest.mark.parametrize("kwargs", [{}, {"max_pixels": 33_554_432}, {"images_kwargs": {"max_pixels": 2_000_000}},
                                    {"size": {"longest_edge": 5_000_000, "shortest_edge": 4_000_000}}])
def test_a_qwen3_vl_image_is_sized_by_the_image_scope(kwargs):
    """Qwen3-VL's image is built and resized by Qwen2-VL's processing info with transformers' qwen2_vl smart_resize
    (vLLM 0.32.0 qwen3_vl.py image_smart_resize) and the published image processor's size (shortest_edge 65,536,
    longest_edge 16,777,216), 16-pixel patches merged 2 x 2."""
    from vllm.config.multimodal import MultiModalConfig
    from vllm.multimodal.processing.context import _resolve_mm_processor_kwargs

    names = processor_kwarg_names("image_processing_qwen2_vl.py", "Qwen2VLImageProcessorKwargs")
    config = MultiModalConfig(mm_processor_kwargs=kwargs)
    resize = compiled(source_path("transformers", "models", "qwen2_vl", "image_processing_qwen2_vl.py"),
                      ("smart_resize",))["smart_resize"]
    methods = compiled(source_path("vllm", "model_executor", "models", "qwen2_vl.py"), QWEN2_VL_INFO,
                       "Qwen2VLProcessingInfo", {"smart_resize": resize, "Qwen2VLImageProcessor": object})
    processor = SimpleNamespace(size={"shortest_edge": 65_536, "longest_edge": 16_777_216})
    info_class = type("Info", (), {**methods, "get_image_processor": lambda self: processor,
                                   "_merge_and_resolve_mm_processor_kwargs": lambda self, request:
                                   _resolve_mm_processor_kwargs(config.merge_mm_processor_kwargs(request),
                                                                supported_mm_processor_kwargs={"images_kwargs": names}),
                                   "get_hf_config": lambda self: SimpleNamespace(vision_config=SimpleNamespace(
                                       patch_size=16, spatial_merge_size=2, temporal_patch_size=2))})
    extra = ("--mm-processor-kwargs", json.dumps(kwargs)) if kwargs else ()
    engine = replace(default_engine(H200, "0.32.0", extra_args=extra), max_model_len=8192)
    assert encoder_item(arch("Qwen3-VL-8B-Instruct"), engine)[1] == info_class().get_max_image_tokens()


def gemma3_image_kwargs_class():
    """transformers' Gemma3ImageProcessorKwargs as a TypedDict (its module imports torchvision): the keys its
    processor's _merge_kwargs routes into images_kwargs."""
    import ast
    from typing import TypedDict

    tree = ast.parse(source_path("transformers", "models", "gemma3", "image_processing_gemma3.py").read_text())
    node = next(c for c in tree.body if isinstance(c, ast.ClassDef) and c.name == "Gemma3ImageProcessorKwargs")
    kinds = {"bool": bool, "int": int, "float": float}
    return TypedDict("Gemma3ImageProcessorKwargs", {a.target.id: kinds[ast.unparse(a.annotation)]  # type: ignore
                                                    for a in node.body if isinstance(a, ast.AnnAssign)}, total=False)


@pytest.mark.parametrize("kwargs", [{}, {"do_pan_and_scan": True}, {"images_kwargs": {"do_pan_and_scan": True}},
                                    {"do_pan_and_scan": True, "pan_and_scan_max_num_crops": 2},
                                    {"do_pan_and_scan": True, "pan_and_scan_max_num_crops": 7},
                                    {"do_pan_and_scan": True, "pan_and_scan_max_num_crops": 1},
                                    {"do_pan_and_scan": True, "pan_and_scan_min_crop_size": 1000},
                                    {"do_pan_and_scan": True, "pan_and_scan_min_ratio_to_activate": 5.0},
                                    {"do_pan_and_scan": True, "images_kwargs": {"pan_and_scan_max_num_crops": 3},
                                     "pan_and_scan_max_num_crops": 6}])
def test_gemma3_pan_and_scan_crops_are_the_ones_vllm_profiles(kwargs):
    """Gemma3ProcessingInfo (vLLM 0.32.0, compiled from its source) builds a dummy image max_num_crops times taller
    than wide and counts its pan-and-scan crops from the processor's merged images_kwargs (transformers'
    ProcessorMixin._merge_kwargs with Gemma3ProcessorKwargs' defaults, after vLLM's MultiModalConfig merge and
    _resolve_mm_processor_kwargs); the plan's item is the image and its crops, each a SigLIP image."""
    from transformers.models.gemma3.processing_gemma3 import Gemma3ProcessorKwargs
    from transformers.processing_utils import ProcessorMixin
    from vllm.config.multimodal import MultiModalConfig
    from vllm.multimodal.processing.context import _resolve_mm_processor_kwargs

    config = MultiModalConfig(mm_processor_kwargs=kwargs)
    wrapper = json.loads((PROJECT_DIR / "models" / "gemma-3-4b-it.json").read_text())
    image_processor = SimpleNamespace(valid_kwargs=gemma3_image_kwargs_class(), do_pan_and_scan=None,
                                      pan_and_scan_min_crop_size=None, pan_and_scan_max_num_crops=None,
                                      pan_and_scan_min_ratio_to_activate=None)
    processor = SimpleNamespace(tokenizer=SimpleNamespace(init_kwargs={}), image_processor=image_processor,
                                image_seq_length=wrapper["mm_tokens_per_image"])
    processor._merge_kwargs = lambda cls, tokenizer_init_kwargs, **merged: ProcessorMixin._merge_kwargs(
        processor, cls, tokenizer_init_kwargs=tokenizer_init_kwargs, **merged)
    ctx = SimpleNamespace(get_merged_mm_kwargs=lambda request: _resolve_mm_processor_kwargs(
        config.merge_mm_processor_kwargs(request)))
    methods = compiled(source_path("vllm", "model_executor", "models", "gemma3_mm.py"),
                       ("get_num_crops", "get_num_image_tokens", "get_image_size_with_most_features"),
                       "Gemma3ProcessingInfo", {"Gemma3Processor": object, "Gemma3ImageProcessor": object,
                                                "Gemma3ProcessorKwargs": Gemma3ProcessorKwargs,
                                                "logger": SimpleNamespace(warning_once=lambda *a: None)})
    side = wrapper["vision_config"]["image_size"]
    info = type("Info", (), {**methods, "ctx": ctx, "get_hf_processor": lambda self: processor,
                             "get_hf_config": lambda self: SimpleNamespace(
                                 vision_config=SimpleNamespace(image_size=side))})()
    size = info.get_image_size_with_most_features()
    tokens = info.get_num_image_tokens(image_width=size.width, image_height=size.height, processor=processor,
                                       mm_kwargs={})
    engine = default_engine(H200, "0.32.0", extra_args=("--mm-processor-kwargs", json.dumps(kwargs)))
    a = arch("gemma-3-4b-it")
    patches, planned = encoder_item(a, engine)
    assert planned == tokens and patches == tokens // wrapper["mm_tokens_per_image"] * a.encoder_input.patches


def namespace(value):
    """A config dict as attribute access, nested, the way transformers' config objects read."""
    if isinstance(value, dict):
        return SimpleNamespace(**{k: namespace(v) for k, v in value.items()})
    return value


PREFIX_CONFIGS = [json.loads((PROJECT_DIR / "models" / f"{n}.json").read_text())
                  for n in ("gemma-3-4b-it", "Qwen2.5-VL-7B-Instruct", "gemma-4-31B-it", "Kimi-K2.5")] + [
    {"model_type": "paligemma"}, {"model_type": "qwen2_vl", "is_mm_prefix_lm": True},
    {"model_type": "gemma4", "text_config": {"use_bidirectional_attention": "vision"}},
    {"model_type": "gemma4", "text_config": {"use_bidirectional_attention": None}},
    {"model_type": "deepseek_v4", "vision_n_layers": 2}, {"model_type": "deepseek_v4"}]


@pytest.mark.parametrize("config", PREFIX_CONFIGS, ids=lambda c: c.get("_name_or_path", c["model_type"]))
def test_bidirectional_item_attention_is_read_as_vllm_reads_it(config):
    """vLLM 0.32.0's is_mm_prefix_lm (model_arch_config_convertor.py: the family's convertor, else the base's list),
    called on the config, against planner/layers.py image_prefix_lm."""
    import vllm.config  # noqa: F401  (the convertor module is imported through it)
    from vllm.transformers_utils.model_arch_config_convertor import (
        MODEL_ARCH_CONFIG_CONVERTORS,
        ModelArchConfigConvertorBase,
    )

    from planner.layers import image_prefix_lm

    convertor = MODEL_ARCH_CONFIG_CONVERTORS.get(config["model_type"], ModelArchConfigConvertorBase)
    hf = namespace(config)
    stub = SimpleNamespace(hf_config=hf, hf_text_config=getattr(hf, "text_config", hf))
    assert image_prefix_lm(config) == convertor.is_mm_prefix_lm(stub, True)


@pytest.mark.parametrize(("name", "extra"), [
    ("gemma-3-4b-it", ("--max-num-batched-tokens", "2048", "--mm-processor-kwargs",
                       '{"do_pan_and_scan": true, "pan_and_scan_max_num_crops": 20}')),
    ("gemma-3-4b-it", ("--max-num-batched-tokens", "2048", "--mm-processor-kwargs",
                       '{"do_pan_and_scan": true, "pan_and_scan_max_num_crops": 7}')),
    ("gemma-3-4b-it", ("--max-num-batched-tokens", "1024", "--mm-processor-kwargs", '{"do_pan_and_scan": true}')),
    ("gemma-3-4b-it", ("--max-num-batched-tokens", "2048", "--language-model-only", "--mm-processor-kwargs",
                       '{"do_pan_and_scan": true, "pan_and_scan_max_num_crops": 20}')),
    ("Qwen2.5-VL-3B-Instruct", ("--disable-chunked-mm-input",)),
    ("Qwen2.5-VL-3B-Instruct", ("--disable-chunked-mm-input", "--max-num-batched-tokens", "16384")),
    ("Qwen2.5-VL-3B-Instruct", ("--max-num-batched-tokens", "2048")),
    ("Qwen2.5-VL-3B-Instruct", ("--disable-chunked-mm-input", "--no-disable-chunked-mm-input"))])
def test_an_item_over_one_batch_is_refused_where_vllm_refuses_it(name, extra):
    """vLLM 0.32.0's compute_mm_encoder_budget raises where chunked multimodal input is off (the flag, or forced for
    bidirectional item attention) and the largest item is over max_num_batched_tokens; the plan refuses the same
    stacks at preview (planner/sizing.py refuse_items_over_a_batch) and plans the others."""

    from planner.memory import multimodal_inputs

    a = arch(name)
    engine = replace(default_engine(H200, "0.32.0", extra_args=extra), max_model_len=8192)
    forced = a.image_prefix_lm and multimodal_inputs(a, engine)  # vllm/platforms/cuda.py
    scheduler = SimpleNamespace(disable_chunked_mm_input=not engine.chunked_mm_input or forced,
                                max_num_batched_tokens=engine.max_num_batched_tokens,
                                max_num_encoder_input_tokens=engine.max_num_batched_tokens,
                                encoder_cache_size=engine.max_num_batched_tokens)
    items = {"image": encoder_item(a, engine)[1]} if multimodal_inputs(a, engine) else {}
    assert both_refuse(a, engine, scheduler, items) in ((True, True), (False, False))


def both_refuse(a, engine, scheduler, items: dict[str, int]) -> tuple[bool, bool]:
    """(vLLM 0.32.0's compute_mm_encoder_budget raises on this scheduler and these items, the plan refuses the stack
    at preview in one line naming --max-num-batched-tokens)."""
    from vllm.v1.core.encoder_cache_manager import compute_mm_encoder_budget

    from planner.errors import ConfigError
    from planner.sizing import refuse_items_over_a_batch

    try:
        compute_mm_encoder_budget(scheduler, items)
        vllm_refuses = False
    except ValueError:
        vllm_refuses = True
    try:
        refuse_items_over_a_batch(a, engine)
        refused = False
    except ConfigError as err:
        assert "--max-num-batched-tokens" in str(err) and "\n" not in str(err)
        refused = True
    return vllm_refuses, refused
