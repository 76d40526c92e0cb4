"""The multimodal encoder's profile as vLLM 0.32.0 runs it (planner/memory.py encoder_profile_gib): which runner
profiles it, the dummy image of the Qwen-VL families and the number of items in the dummy batch, each from vLLM's
own code; the GPU rows are validations 55-57 (docs/benchmarks.md)."""

from __future__ import annotations

import inspect
import json
from types import SimpleNamespace

import pytest

from planner.catalog import ACCELERATORS
from planner.config import PROJECT_DIR
from planner.layout import Layout
from planner.memory import default_engine, encoder_items, peak_features
from planner.model_config import parse_hf_config

pytest.importorskip("torch")
pytest.importorskip("vllm")

H200 = ACCELERATORS["nvidia-h200-141gb"]


def arch(name: str):
    return parse_hf_config(json.loads((PROJECT_DIR / "models" / f"{name}.json").read_text()), name, "test")


def vllm_method(module: str, cls: str, name: str):
    """A method of vLLM 0.32.0's source, compiled alone: its module imports torchvision (transformers' Qwen2-VL image
    processor), which the CPU test environment does not install."""
    import ast
    import importlib.util
    import math
    from pathlib import Path

    path = Path(importlib.util.find_spec("vllm").origin).parent / "model_executor" / "models" / module
    tree = ast.parse(path.read_text())
    node = next(f for c in tree.body if isinstance(c, ast.ClassDef) and c.name == cls
                for f in c.body if isinstance(f, ast.FunctionDef) and f.name == name)
    namespace = {"math": math, "ImageSize": lambda width, height: SimpleNamespace(width=width, height=height)}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)
    return namespace[name]


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
    assert a.encoder_input[:1] == (patches,) and a.encoder_input[3] == patches // merge ** 2


@pytest.mark.parametrize(("name", "seqs"), [("gemma-3-4b-it", 1024), ("gemma-3-4b-it", 128), ("gemma-3-4b-it", 1),
                                            ("Qwen3-VL-8B-Instruct", 1024)])
def test_the_dummy_batch_holds_as_many_items_as_vllms_budget(name, seqs):
    """MultiModalBudget._get_max_items with the encoder budget of compute_mm_encoder_budget, at vLLM's default
    limit per prompt (999) and chunked prefill on."""
    from vllm.multimodal.encoder_budget import MultiModalBudget
    from vllm.v1.core.encoder_cache_manager import compute_mm_encoder_budget

    a = arch(name)
    engine = default_engine(H200, "0.32.0", extra_args=("--max-num-seqs", str(seqs)))
    tokens = a.encoder_input[3]
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
