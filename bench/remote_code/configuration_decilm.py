"""A nemotron-nas config class written for this project (not NVIDIA's configuration_decilm.py): LlamaConfig plus
block_configs, each block's sections readable as attributes, as vLLM's nemotron_nas.py reads them."""

from transformers import LlamaConfig


class Section(dict):
    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class DeciLMConfig(LlamaConfig):
    model_type = "nemotron-nas"

    def __init__(self, block_configs=None, **kwargs):
        self.block_configs = [Section({k: Section(v) for k, v in block.items()}) for block in block_configs or []]
        # the published configs leave per-layer sizes null at the top (intermediate_size, num_key_value_heads):
        # LlamaConfig's defaults stand in, which vLLM's nemotron_nas.py never reads
        super().__init__(**{k: v for k, v in kwargs.items() if v is not None})
