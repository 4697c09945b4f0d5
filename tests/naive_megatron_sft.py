"""Megatron-Bridge's own SFT packing code, loaded from its installed wheel, and a plain-Python
reference of the file it writes.

Megatron-Bridge 0.3.1's package ``__init__`` imports its GPU-only model layers, so the two
modules that matter here are loaded by path: ``megatron/bridge/data/datasets/packing_utils.py``
(``create_hist``, ``create_packing_strategy``, ``fill_packing_strategy``; needs only numpy
and tqdm) and ``megatron/bridge/data/datasets/sft.py`` (``GPTSFTPackedDataset`` and its
``collate_fn``). ``sft.py``'s imports are satisfied by the real files of megatron-core
(``msc_utils``, ``tokenizers``) and megatron-bridge (``data/datasets/utils.py``); only two
modules are stubbed, both out of reach on CPU or irrelevant to reading a packed file:
``megatron.bridge.utils.common_utils`` (imports the distributed model wrappers; ``utils.py``
takes ``get_rank_safe`` from it) and ``megatron.bridge.training.tokenizers.tokenizer``
(imports every tokenizer backend; ``sft.py`` uses the name only in annotations). The stubs
and the namespace packages live in ``sys.modules`` only while the files load.

Install: ``pip install --no-deps megatron-bridge==0.3.1 megatron-core==0.16.1``.
"""
from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import numpy as np

_CACHE: dict = {}


def _site() -> Path | None:
    spec = importlib.util.find_spec("megatron")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        if (Path(loc) / "bridge" / "data" / "datasets" / "sft.py").exists():
            return Path(loc)
    return None


def missing_reason() -> str | None:
    """Why Megatron-Bridge's code cannot be loaded here (None: it can)."""
    root = _site()
    if root is None:
        return ("megatron-bridge is not installed: pip install --no-deps megatron-bridge==0.3.1 "
                "megatron-core==0.16.1")
    if not (root / "core" / "msc_utils.py").exists():
        return "megatron-core is not installed: pip install --no-deps megatron-core==0.16.1"
    for name in ("torch", "datasets", "tqdm"):
        if importlib.util.find_spec(name) is None:
            return f"Megatron-Bridge's sft.py needs {name}, which is not installed"
    return None


def _load_file(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _package(name: str, path: Path):
    pkg = types.ModuleType(name)
    pkg.__path__ = [str(path)]
    sys.modules[name] = pkg
    return pkg


def load() -> types.SimpleNamespace:
    """``packing_utils`` and ``sft`` of the installed Megatron-Bridge, as ``.packing`` and ``.sft``."""
    if "mb" in _CACHE:
        return _CACHE["mb"]
    reason = missing_reason()
    if reason:
        raise ImportError(reason)
    root = _site()
    before = set(sys.modules)
    saved = {k: sys.modules[k] for k in before if k == "megatron" or k.startswith("megatron.")}
    try:
        for name, sub in [("megatron", ""), ("megatron.core", "core"), ("megatron.bridge", "bridge"),
                          ("megatron.bridge.data", "bridge/data"),
                          ("megatron.bridge.data.datasets", "bridge/data/datasets"),
                          ("megatron.bridge.utils", "bridge/utils"), ("megatron.bridge.training", "bridge/training"),
                          ("megatron.bridge.training.tokenizers", "bridge/training/tokenizers")]:
            _package(name, root / sub)
        stub = types.ModuleType("megatron.bridge.utils.common_utils")
        stub.get_rank_safe = lambda: 0
        sys.modules[stub.__name__] = stub
        tok = types.ModuleType("megatron.bridge.training.tokenizers.tokenizer")
        tok.MegatronTokenizer = object
        sys.modules[tok.__name__] = tok
        ds = root / "bridge" / "data" / "datasets"
        packing = _load_file("megatron.bridge.data.datasets.packing_utils", ds / "packing_utils.py")
        sft = _load_file("megatron.bridge.data.datasets.sft", ds / "sft.py")
    finally:
        for k in set(sys.modules) - before:
            if k == "megatron" or k.startswith("megatron."):   # torch, datasets, ... stay loaded
                del sys.modules[k]
        sys.modules.update(saved)
    _CACHE["mb"] = types.SimpleNamespace(packing=packing, sft=sft)
    return _CACHE["mb"]


class Tokenizer:
    """The two attributes ``GPTSFTPackedDataset`` reads from a tokenizer."""

    def __init__(self, eos_id: int = 0):
        self.eos_id = eos_id
        self.eod = eos_id


def read_packed(path, max_seq_length: int, *, eos_id: int = 0, metadata=None, pad_cu_seqlens: bool = False):
    """Megatron-Bridge's reader on a packed file: ``GPTSFTPackedDataset`` as its recipes build it
    (``prompt_template`` is required by the base class and unused for packed data)."""
    mb = load()
    return mb.sft.GPTSFTPackedDataset(
        str(path), Tokenizer(eos_id), max_seq_length=max_seq_length, pad_seq_length_to_mult=1,
        prompt_template="{input} {answer}", truncation_field="input",
        pad_cu_seqlens=pad_cu_seqlens, pad_to_max_length=pad_cu_seqlens,
        pack_metadata_file_path=None if metadata is None else str(metadata))


def megatron_write(rows, pack_size: int, output, metadata_output=None, *, algorithm="first_fit_shuffle",
                   seed: int = 0, pad_id: int = 0):
    """What ``prepare_packed_sequence_data`` does after tokenising: ``rows`` are its dicts
    (``input_ids`` and ``loss_mask`` or ``answer_start_idx``). Megatron-Bridge's own code
    packs and fills; the file and the metadata are written as it writes them. Its shuffles
    draw from numpy's global random state, which is seeded here."""
    mb = load()
    np.random.seed(seed)
    sequences, histogram = mb.packing.create_hist(np.array(rows), pack_size)
    assignments, meta = mb.packing.create_packing_strategy(histogram, pack_size, algorithm)
    out = mb.packing.fill_packing_strategy(assignments, sequences, pack_size, pad_id)
    np.save(output, out)
    if metadata_output is not None:
        p = Path(metadata_output)
        old = json.loads(p.read_text()) if p.exists() else []
        old.append(meta)
        p.write_text(json.dumps(old))
    return out, meta


def naive_loss_mask(ids, loss_mask=None, answer_start_idx=None) -> list:
    """The written loss mask of one sequence, by Megatron-Bridge's two rules."""
    if loss_mask is not None:
        return [bool(x) for x in loss_mask[1:]] + [False]
    return [i >= answer_start_idx - 1 for i in range(len(ids))]
