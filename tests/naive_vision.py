"""References for vision-language packing, computed without packlib: tiny random Qwen2-VL,
Qwen2.5-VL and Qwen3-VL models built from configs (no download), random processed examples,
each example run alone through the model, and the naive packed layouts a user would try
first (plain torch and transformers)."""
from __future__ import annotations

import numpy as np
import torch

VOCAB, IMG, VIDEO, START, END = 200, 190, 193, 191, 192
FAMILIES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
PATCH_DIM = 3 * 1 * 2 * 2  # channels x temporal patch x patch x patch


def _text_config(**extra):
    cfg = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=512, bos_token_id=None, eos_token_id=None,
               initializer_range=0.3,  # logits of magnitude ~10, so a wrong position shows (by 6 to 11)
               rope_parameters={"rope_type": "default", "mrope_section": [1, 1, 2], "rope_theta": 10000.0})
    cfg.update(extra)
    return cfg


def _vision_config(family):
    base = dict(depth=2, hidden_size=32, num_heads=2, initializer_range=0.3, patch_size=2, spatial_merge_size=2,
                temporal_patch_size=1, in_channels=3)
    if family == "qwen2_vl":
        return dict(base, embed_dim=32)
    if family == "qwen2_5_vl":  # block 0 windowed, block 1 full attention
        return dict(base, intermediate_size=64, out_hidden_size=32, window_size=8, fullatt_block_indexes=[1])
    return dict(base, intermediate_size=64, out_hidden_size=32, num_position_embeddings=64,
                deepstack_visual_indexes=[0])


def tiny_model(family: str, attn: str = "sdpa", seed: int = 0):
    """A tiny random model of ``family`` (2 layers, hidden 32, a 2-block vision tower; ``qwen3_vl_moe``:
    4 experts, 2 per token), float32, train mode."""
    import transformers as tf

    names = {"qwen2_vl": ("Qwen2VLConfig", "Qwen2VLForConditionalGeneration"),
             "qwen2_5_vl": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration"),
             "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration"),
             "qwen3_vl_moe": ("Qwen3VLMoeConfig", "Qwen3VLMoeForConditionalGeneration")}
    text = _text_config()
    if family.startswith("qwen3_vl"):
        moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32) if family == "qwen3_vl_moe" else {}
        text = _text_config(head_dim=8, rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1],
                                                         "rope_theta": 10000.0, "mrope_interleaved": True}, **moe)
    vision = _vision_config("qwen3_vl" if family == "qwen3_vl_moe" else family)
    config = getattr(tf, names[family][0])(text_config=text, vision_config=vision, image_token_id=IMG,
                                          video_token_id=VIDEO, vision_start_token_id=START, vision_end_token_id=END)
    config._attn_implementation = attn
    torch.manual_seed(seed)
    model = getattr(tf, names[family][1])(config).float()
    model.train()  # dropout is 0 in these configs: train() only keeps the config's use_cache=True default
    return model


def example(rng, images, text=(3, 12), merge=2):
    """A processed example: text runs around ``images`` (grids ``(t, h, w)``), each image
    ``<start> image-tokens <end>``, labels -100 on image tokens (as chat templates train)."""
    ids, types = [], []

    def add_text(n):
        ids.extend(rng.integers(0, 180, n).tolist())
        types.extend([0] * n)

    add_text(int(rng.integers(*text)))
    for t, h, w in images:
        n = t * h * w // (merge * merge)
        ids.extend([START] + [IMG] * n + [END])
        types.extend([0] + [1] * n + [0])
        add_text(int(rng.integers(*text)))
    ids_t = torch.tensor([ids])
    labels = ids_t.clone()
    labels[ids_t == IMG] = -100
    out = {"input_ids": ids_t, "attention_mask": torch.ones_like(ids_t), "labels": labels,
           "mm_token_type_ids": torch.tensor([types])}
    if images:
        grids = torch.tensor(images)
        out["pixel_values"] = torch.randn(int(grids.prod(dim=1).sum()), PATCH_DIM, generator=torch.Generator()
                                          .manual_seed(int(rng.integers(2**31))))
        out["image_grid_thw"] = grids
    return out


def examples(seed: int = 0):
    """Four examples: two images, none, one, one large (a row's first example is exact under
    every naive layout, so the checks look at the later ones)."""
    rng = np.random.default_rng(seed)
    return [example(rng, [(1, 4, 6), (1, 2, 2)]), example(rng, []), example(rng, [(1, 6, 4)]),
            example(rng, [(1, 8, 8)])]


def alone(model, exs):
    """Each example run alone: per example ``(logits, summed loss, trained tokens)``."""
    out = []
    for e in exs:
        kw = {k: v for k, v in e.items() if k != "attention_mask"}
        res = model(**kw, use_cache=False)
        n = int((e["labels"][0, 1:] != -100).sum())
        out.append((res.logits[0], res.loss * n, n))
    return out


def concatenated(exs):
    """The examples laid end to end without positions: ``input_ids``, ``labels`` (each
    example's first -100), ``mm_token_type_ids``, ``pixel_values``, ``image_grid_thw``."""
    labels = [e["labels"][0].clone() for e in exs]
    for lab in labels:
        lab[0] = -100
    return {"input_ids": torch.cat([e["input_ids"][0] for e in exs])[None], "labels": torch.cat(labels)[None],
            "mm_token_type_ids": torch.cat([e["mm_token_type_ids"][0] for e in exs])[None], **images(exs)}


def images(exs):
    """The examples' ``pixel_values`` and ``image_grid_thw`` in order (empty without images)."""
    with_images = [e for e in exs if "pixel_values" in e]
    if not with_images:
        return {}
    return {"pixel_values": torch.cat([e["pixel_values"] for e in with_images]),
            "image_grid_thw": torch.cat([e["image_grid_thw"] for e in with_images])}


def padded(exs):
    """The examples as a padded batch (right padding, a 2-D ``attention_mask``, positions left
    to the model), as the processor pads a batch."""
    T = max(e["input_ids"].shape[1] for e in exs)

    def pad(key, value):
        return torch.stack([torch.nn.functional.pad(e[key][0], (0, T - e[key].shape[1]), value=value) for e in exs])

    return {"input_ids": pad("input_ids", 0), "labels": pad("labels", -100), "attention_mask": pad("attention_mask", 0),
            "mm_token_type_ids": pad("mm_token_type_ids", 0), "use_cache": False, **images(exs)}


def own_mrope(model, exs):
    """Each example's own ``(3, 1, T_i)`` positions from the model's ``get_rope_index``, end to end."""
    rows = []
    for e in exs:
        pos, _ = model.model.get_rope_index(e["input_ids"], e["mm_token_type_ids"], e.get("image_grid_thw"))
        rows.append(pos)
    return torch.cat(rows, dim=2)


def restarting(exs):
    """Text positions restarting at 0 for each example, ``(1, T)``."""
    return torch.cat([torch.arange(e["input_ids"].shape[1]) for e in exs])[None]


def naive_layouts(model, exs):
    """The layouts a user would try first, by name: each a batch for ``model(**batch)``."""
    base = concatenated(exs)
    exact_pos = torch.cat([restarting(exs)[None], own_mrope(model, exs)], dim=0)
    return {
        "positions computed by the model": dict(base, use_cache=False),
        "2-D positions restarting": dict(base, position_ids=restarting(exs), use_cache=False),
        "own mRoPE, no packing signal": dict(base, position_ids=own_mrope(model, exs), use_cache=False),
        "use_cache left at its default": dict(base, position_ids=exact_pos),
        "2-D attention mask of ones": dict(base, position_ids=exact_pos, use_cache=False,
                                           attention_mask=torch.ones_like(base["input_ids"])),
    }
