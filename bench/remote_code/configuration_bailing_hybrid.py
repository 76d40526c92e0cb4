"""A bailing_hybrid config class written for this project (not inclusionAI's configuration file): config.json's fields
as attributes, which is all vLLM's bailing_moe_linear.py reads (getattr with its own defaults where a field may be
left out), so a Ling 2.5 shaped config starts with --trust-remote-code on a host without the published code."""

from transformers import PretrainedConfig


class BailingHybridConfig(PretrainedConfig):
    model_type = "bailing_hybrid"
