"""Tiny random models for the packing check (tests/test_torch_check.py and
benchmarks/bench_model_exactness.py): one config per architecture of the table in
docs/training.md ("Which models pack exactly"), and a Llama whose one layer adds a running
mean over the row (a layer no list of architectures names). Importable without torch.
"""
from __future__ import annotations

VOCAB = 128
_COMMON = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=64)
_MAMBA = dict(mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8, mamba_n_groups=1, mamba_chunk_size=8)
#: name -> (transformers class prefix, config settings)
CONFIGS = {
    "Llama": ("Llama", _COMMON),
    "Qwen3": ("Qwen3", dict(_COMMON, head_dim=8)),
    "LFM2": ("Lfm2", dict(_COMMON, layer_types=["conv", "full_attention"])),
    "Mamba2": ("Mamba2", dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_heads=4, head_dim=16,
                              state_size=8, n_groups=1, expand=2, chunk_size=8)),
    "Granite 4 (GraniteMoeHybrid)": ("GraniteMoeHybrid", dict(
        _COMMON, layer_types=["mamba", "attention"], mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8,
        mamba_n_groups=1, mamba_chunk_size=8, num_local_experts=2, num_experts_per_tok=1,
        shared_intermediate_size=32)),
    "Nemotron-H": ("NemotronH", dict(_COMMON, hybrid_override_pattern="M*", mamba_num_heads=4, mamba_head_dim=16,
                                     ssm_state_size=8, n_groups=1, chunk_size=8, head_dim=8)),
    "Zamba2": ("Zamba2", dict(_COMMON, mamba_d_state=8, mamba_headdim=16, n_mamba_heads=4, mamba_ngroups=1,
                              chunk_size=8, layers_block_type=["mamba", "hybrid"], hybrid_layer_ids=[1],
                              num_mem_blocks=1, use_shared_attention_adapter=False, adapter_rank=4)),
    "Bamba": ("Bamba", dict(_COMMON, attn_layer_indices=[1], **_MAMBA)),
    "RecurrentGemma": ("RecurrentGemma", dict(_COMMON, num_key_value_heads=1, lru_width=32, attention_window_size=16,
                                              block_types=["recurrent", "attention"])),
    "Jamba": ("Jamba", dict(_COMMON, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
                            expert_layer_offset=1, num_experts=2, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2)),
    "Falcon-H1": ("FalconH1", dict(_COMMON, head_dim=8, mamba_d_ssm=64, **_MAMBA)),
    "Qwen3-Next": ("Qwen3Next", dict(_COMMON, head_dim=8, layer_types=["linear_attention", "full_attention"],
                                     linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
                                     linear_value_head_dim=8, num_experts=2, num_experts_per_tok=1,
                                     moe_intermediate_size=32, shared_expert_intermediate_size=32)),
    "Qwen3.5": ("Qwen3_5Text", dict(_COMMON, head_dim=8, layer_types=["linear_attention", "full_attention"],
                                    linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
                                    linear_value_head_dim=8)),
}


def build(name: str, seed: int = 0):
    """The tiny random model ``name`` of :data:`CONFIGS` (or ``"running mean"``), float32, or
    ``None`` where this transformers has no such class."""
    import torch
    import transformers

    torch.manual_seed(seed)
    if name == "running mean":
        return running_mean_llama(seed)
    prefix, settings = CONFIGS[name]
    config_class = getattr(transformers, prefix + "Config", None)
    model_class = getattr(transformers, prefix + "ForCausalLM", None) or \
        getattr(transformers, prefix.replace("Text", "") + "ForCausalLM", None)
    if config_class is None or model_class is None:
        return None
    return model_class(config_class(**settings))


def running_mean_llama(seed: int = 0, vocab: int = VOCAB):
    """A tiny Llama whose first layer's MLP adds the running mean of its input over the row:
    a layer that mixes the sequence axis, which position_ids do not stop."""
    import torch
    import transformers

    class RunningMean(torch.nn.Module):
        def __init__(self, mlp):
            super().__init__()
            self.mlp = mlp

        def forward(self, x):
            steps = torch.arange(1, x.shape[1] + 1, device=x.device, dtype=x.dtype)[None, :, None]
            return self.mlp(x) + x.cumsum(1) / steps

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**dict(_COMMON, vocab_size=vocab, num_attention_heads=2, num_key_value_heads=1,
                                             hidden_size=16, intermediate_size=32))
    model = transformers.LlamaForCausalLM(config)
    model.model.layers[0].mlp = RunningMean(model.model.layers[0].mlp)
    return model


def examples(n=(11, 7, 13), seed: int = 0, vocab: int = VOCAB):
    """Three sequences of random token ids, as ``{"input_ids": ...}``."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [{"input_ids": rng.integers(1, vocab, k).tolist()} for k in n]
