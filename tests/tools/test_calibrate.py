"""bench/calibrate.py's model directories: what vLLM reads with --load-format dummy, built here for real."""

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from bench.calibrate import model_dir, parse_entry

ROOT = Path(__file__).resolve().parents[2]


def test_a_cut_model_directory_has_the_cut_config_and_a_tokenizer_of_its_vocabulary(tmp_path):
    config, layers, text = parse_entry("models/Qwen3-Next-80B-A3B-Instruct.json:8")
    assert not text
    out, data = model_dir(tmp_path, config, layers)
    written = json.loads((out / "config.json").read_text())
    assert written == data and written["num_hidden_layers"] == 8
    tok = AutoTokenizer.from_pretrained(out)
    assert len(tok) == written["vocab_size"]


def test_a_vision_model_gets_its_image_processor_and_vision_tokens(tmp_path):
    config, layers, _ = parse_entry("models/Qwen2.5-VL-7B-Instruct.json")
    out, data = model_dir(tmp_path, config, layers)
    assert json.loads((out / "preprocessor_config.json").read_text())["image_processor_type"] == \
        "Qwen2VLImageProcessor"
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.convert_tokens_to_ids("<|image_pad|>") == data["image_token_id"]


@pytest.mark.parametrize("name", ["Qwen3-VL-8B-Instruct", "Qwen3.6-27B"])
def test_a_qwen3_vl_processor_family_gets_the_qwen3_vl_processor_and_its_video_processor(tmp_path, name):
    """Qwen3.6-27B (qwen3_5) is profiled through Qwen3-VL's processor, as vLLM's Qwen3_5ProcessingInfo is Qwen3-VL's:
    without these files vLLM cannot start its encoder profile."""
    config, layers, _ = parse_entry(f"models/{name}.json")
    out, data = model_dir(tmp_path, config, layers)
    image = json.loads((out / "preprocessor_config.json").read_text())
    assert image["processor_class"] == "Qwen3VLProcessor"
    assert image["patch_size"] == data["vision_config"]["patch_size"]
    assert json.loads((out / "video_preprocessor_config.json").read_text())["video_processor_type"] == \
        "Qwen3VLVideoProcessor"
    tok = AutoTokenizer.from_pretrained(out)
    assert tok.convert_tokens_to_ids("<|image_pad|>") == data["image_token_id"]
    assert tok.convert_tokens_to_ids("<|video_pad|>") == data["video_token_id"]


@pytest.mark.parametrize("name", ["gemma-3-4b-it", "gemma-3-12b-it"])
def test_a_gemma3_wrapper_gets_the_processor_that_expands_an_image_into_its_tokens(tmp_path, name):
    """vLLM profiles Gemma 3's vision tower through transformers' Gemma3Processor, loaded from the model directory:
    built here from the written files (the PIL image processor: the test environment has no torchvision), it turns
    the begin-of-image token of a prompt and one image at the tower's size into begin, mm_tokens_per_image image
    tokens and end, with the ids the config gives them."""
    from PIL import Image
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
    from transformers.models.gemma3.processing_gemma3 import Gemma3Processor

    config, layers, _ = parse_entry(f"models/{name}.json")
    out, data = model_dir(tmp_path, config, layers)
    image = json.loads((out / "preprocessor_config.json").read_text())
    assert (image["image_processor_type"], image["processor_class"]) == ("Gemma3ImageProcessor", "Gemma3Processor")
    side = data["vision_config"]["image_size"]
    assert image["size"] == {"height": side, "width": side}
    tokens = json.loads((out / "processor_config.json").read_text())["image_seq_length"]
    assert tokens == data["mm_tokens_per_image"]
    tok = AutoTokenizer.from_pretrained(out)
    settings = {k: v for k, v in image.items() if k not in ("image_processor_type", "processor_class")}
    processor = Gemma3Processor(image_processor=Gemma3ImageProcessorPil(**settings), tokenizer=tok,
                                image_seq_length=tokens)
    ids = list(processor(text=tok.boi_token, images=[Image.new("RGB", (side, side))])["input_ids"][0])
    assert ids == [data["boi_token_index"], *[data["image_token_index"]] * tokens, data["eoi_token_index"]]
    # vLLM's Gemma 3 processor looks newline tokens up by text (a KeyError at engine start where one is missing)
    source = (Path(importlib.util.find_spec("vllm").origin).parent / "model_executor" / "models" / "gemma3_mm.py")
    looked_up = [ast.literal_eval(f'"{key}"') for key in re.findall(r'vocab\["([^"]+)"\]', source.read_text())]
    assert looked_up and set(looked_up) <= set(tok.get_vocab())


def test_a_text_entry_starts_the_decoder_of_a_wrapper_with_the_vocabulary_vllm_reads(tmp_path):
    """gemma-3-27b-it's text_config names no vocab_size: the tokenizer must cover transformers' default (262,208),
    which is what vLLM sizes the embedding with; the decoder runs under Gemma3ForCausalLM."""
    config, layers, text = parse_entry("models/gemma-3-27b-it.json:2:text")
    assert (layers, text) == (2, True)
    out, data = model_dir(tmp_path, config, layers, text)
    assert data["architectures"] == ["Gemma3ForCausalLM"] and data["num_hidden_layers"] == 2
    assert data["torch_dtype"] == "bfloat16", "the wrapper's dtype carried into the decoder"
    assert len(AutoTokenizer.from_pretrained(out)) == 262_208


def test_a_bad_entry_is_one_line_and_exit_status():
    for entry in ("models/missing.json", "models/gpt-oss-20b.json:0", "models/gpt-oss-20b.json:x",
                  "models/gpt-oss-20b.json:2:3"):
        proc = subprocess.run([sys.executable, "bench/calibrate.py", entry], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode != 0 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert entry in proc.stderr


def test_a_nas_model_directory_ships_its_config_class_and_vllm_reads_it_as_the_planner(tmp_path):
    """nemotron-nas's published config class is remote code: the directory carries this project's class
    (bench/remote_code) under auto_map, cut with its block_configs, and transformers (as vLLM with
    --trust-remote-code) builds the config from it with each block's sections as attributes."""
    from transformers import AutoConfig

    from planner.model_config import parse_hf_config, remote_code

    config, layers, _ = parse_entry("bench/configs/nemotron-super-49b.json:7")
    out, data = model_dir(tmp_path, config, layers)
    assert remote_code(data) == "configuration_decilm.DeciLMConfig"
    assert len(data["block_configs"]) == data["num_hidden_layers"] == 7
    loaded = AutoConfig.from_pretrained(out, trust_remote_code=True)
    assert [b.attention.no_op for b in loaded.block_configs] == [b["attention"]["no_op"] for b in data["block_configs"]]
    ours = parse_hf_config(data, "nas", "x")
    assert ours.layer_kv_heads == tuple(0 if b.attention.no_op else loaded.num_attention_heads
                                        // b.attention.n_heads_in_group for b in loaded.block_configs)
    vllm_config = pytest.importorskip("vllm.config")
    model = vllm_config.ModelConfig(model=str(out), tokenizer=str(out), trust_remote_code=True,
                                    max_model_len=4096, skip_tokenizer_init=True)
    assert model.get_total_num_kv_heads() == max(ours.layer_kv_heads)
    assert model.get_num_layers(vllm_config.ParallelConfig()) == ours.num_layers


def test_repeated_extra_flags_all_reach_the_prediction(tmp_path):
    """--extra repeats (argparse extend): a batch run with --max-num-seqs and a state dtype predicts with both."""
    proc = subprocess.run([sys.executable, "bench/calibrate.py", "models/Kimi-Linear-48B-A3B-Instruct.json:12",
                           "--predict-only", "--extra=--max-num-seqs=32", "--extra=--mamba-ssm-cache-dtype=bfloat16",
                           "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    written = json.loads((tmp_path / "predictions.json").read_text())
    assert written["settings"]["extra"] == ["--max-num-seqs=32", "--mamba-ssm-cache-dtype=bfloat16"]
    from bench.calibrate import predict_row

    both = predict_row("models/Kimi-Linear-48B-A3B-Instruct.json:12", "nvidia-h200-141gb",
                       extra=("--max-num-seqs=32", "--mamba-ssm-cache-dtype=bfloat16"))
    assert written["rows"][0]["kv_cache_tokens_predicted"] == both["kv_cache_tokens_predicted"]


def test_a_length_vllm_would_refuse_is_not_predicted(tmp_path):
    """vLLM refuses a max_model_len above the config's max_position_embeddings before it loads anything, so a
    prediction at that length could never be checked: calibrate says so in one line and writes none."""
    proc = subprocess.run([sys.executable, "bench/calibrate.py", "bench/configs/zamba2-2.7b.json", "--predict-only",
                           "--max-model-len", "8192", "--out", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0 and not (tmp_path / "predictions.json").exists()
    assert proc.stderr.strip().splitlines()[-1] == ("calibrate: --max-model-len 8192: bench/configs/zamba2-2.7b.json "
                                                    "supports at most 4096 tokens (its max_position_embeddings)")
