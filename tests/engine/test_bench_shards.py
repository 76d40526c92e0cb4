"""bench/shards.py's predictions: the planner's per-stage weights from the tensors transformers builds for a config."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from bench.shards import checkpoint_tensors, parse, predict


def test_a_tied_checkpoint_lists_its_table_once_and_the_last_stage_holds_a_copy():
    """Llama-3.2-3B ties its embeddings: the tensors hold the table once (as save_pretrained writes it), and with two
    stages each holds a whole table (the input on the first, the tied lm_head's copy on the last), where the even
    split gave each half of one."""
    from bench.calibrate import entry_config, parse_entry

    tensors = checkpoint_tensors(entry_config(*parse_entry("models/Llama-3.2-3B-Instruct.json")))
    assert "model.embed_tokens.weight" in tensors and "lm_head.weight" not in tensors
    row = predict(*parse("models/Llama-3.2-3B-Instruct.json@1x2"))
    table = 128256 * 3072 * 2 / 2**30
    first, last = row["stages_gib_predicted"]
    assert first == pytest.approx(last, abs=0.01)
    assert first - row["even_split_gib"] == pytest.approx(table / 2, abs=0.01)


def test_a_layout_is_named_as_tp_x_pp():
    assert parse("models/Qwen3-30B-A3B.json:24@2x1") == ("models/Qwen3-30B-A3B.json:24", 2, 1)
    with pytest.raises(SystemExit):
        parse("models/Qwen3-30B-A3B.json")
