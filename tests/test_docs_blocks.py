"""Every ```python block of README.md and docs/*.md runs (docs/api.md is generated signatures).

Each block runs in a fresh namespace and a temporary working directory, as a parameter named
``file::heading#n``. A block written as a ``>>>`` session runs as a doctest (outputs compared,
with ELLIPSIS and NORMALIZE_WHITESPACE); any other block runs with ``exec``. Blocks use names
for the reader's data (``lengths``, ``table``, ``dataset``, ``model``, ``rank``, ...) or carry on
from a block above them in the same file; ``SETUPS`` gives each such section small, realistic
synthetic data under those names, so the block runs as written. A block needing an optional
package skips (pytest.importorskip) when it is missing; CI installs them all, so nothing skips
there.

The two blocks in ALSO_RUN_BY_TEST_TORCH are also run by tests/test_torch.py, which checks every
packed row against its sequences alone; here they run again (tiny model) as written.
"""
from __future__ import annotations

import contextlib
import dataclasses
import doctest
import io
import pathlib
import shutil
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
GENERATED = {"docs/api.md"}  # generated signatures, not examples
# run here as written, and by tests/test_torch.py with every packed row checked against its
# sequences alone (test_the_readme_collator_example_keeps_sequences_apart and
# test_the_documented_training_loop_keeps_sequences_apart)
ALSO_RUN_BY_TEST_TORCH = ["README.md::Packed rows stay apart in the model#1", "docs/balance.md::The training loop#1"]


@dataclasses.dataclass(frozen=True)
class Block:
    path: str     # relative to the repository root
    heading: str  # the nearest heading above the block, without the #s
    number: int   # 1, 2, ... among the python blocks under that heading
    line: int     # 1-based line of the first line of code
    code: str

    @property
    def id(self) -> str:
        return f"{self.path}::{self.heading}#{self.number}"


def python_blocks(text: str, path: str) -> list[Block]:
    """The fenced ```python blocks of a markdown text, with the heading each is under."""
    blocks, heading, counts = [], "", {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith(("```", "~~~")):
            fence = line.lstrip()[:3]
            indent = len(line) - len(line.lstrip())
            lang = line.strip()[3:].strip().split(" ")[0]
            j = i + 1
            while j < len(lines) and not lines[j].lstrip().startswith(fence):
                j += 1
            if j == len(lines):
                raise ValueError(f"{path}:{i + 1}: a code fence that is never closed")
            if lang in ("python", "py", "pycon", "python3"):
                counts[heading] = counts.get(heading, 0) + 1
                code = "\n".join(ln[indent:] for ln in lines[i + 1:j]) + "\n"
                blocks.append(Block(path, heading, counts[heading], i + 2, code))
            i = j + 1
            continue
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        i += 1
    return blocks


def doc_files() -> list[pathlib.Path]:
    docs = sorted(p for p in (ROOT / "docs").glob("*.md") if p.relative_to(ROOT).as_posix() not in GENERATED)
    return [ROOT / "README.md", *docs]


def all_blocks() -> list[Block]:
    return [b for p in doc_files() for b in python_blocks(p.read_text(encoding="utf-8"), p.relative_to(ROOT).as_posix())]


def run_block(block: Block, namespace: dict) -> None:
    """Run one block in ``namespace``: a ``>>>`` session as a doctest, anything else with exec.

    Raises AssertionError (a doctest's report) or the block's own exception.
    """
    if block.code.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(block.code, namespace, block.id, block.path, block.line - 1)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        report = io.StringIO()
        result = runner.run(test, out=report.write, clear_globs=False)
        if result.failed or not result.attempted:
            raise AssertionError(f"{block.id}: {result.failed} of {result.attempted} examples failed\n{report.getvalue()}")
    else:
        exec(compile(block.code, f"{block.path}:{block.line}", "exec"), namespace)


# ---------------------------------------------------------------------------------------------
# The reader's data, small and synthetic: one setup per (file, heading). Each takes the block's
# namespace, the temporary working directory (also the cwd) and an ExitStack for clean-up.

def _token_lists(n, low, high, seed=0, vocab=1000):
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, k).tolist() for k in rng.integers(low, high + 1, n)]


def _arrow_table(n=300, high=2048, seed=0):
    pa = pytest.importorskip("pyarrow", reason="the Arrow blocks need pyarrow: pip install 'packlib[arrow]'")
    ids = _token_lists(n, 1, high, seed)
    labels = [[-100] + x[1:] for x in ids]
    return pa.table({"input_ids": ids, "labels": labels})


def _tiny_model():
    torch = pytest.importorskip("torch", reason="the block runs a model: pip install torch")
    transformers = pytest.importorskip("transformers", reason="the block runs a transformers model")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").train()


def _needs_a_model(ns, tmp, stack):
    """A block that builds its own tiny model: torch and transformers, or a skip naming them."""
    pytest.importorskip("torch", reason="the block runs a model: pip install torch")
    pytest.importorskip("transformers", reason="the block runs a transformers model")


def _readme_notebook(ns, tmp, stack):
    matplotlib = pytest.importorskip("matplotlib", reason="table.plot() draws with matplotlib: pip install 'packlib[plot]'")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stack.callback(plt.close, "all")
    ns["tokenized_dataset"] = _token_lists(2000, 8, 512, seed=1)


def _readme_trainer(ns, tmp, stack):
    pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate: pip install 'packlib[torch]'")
    model = _tiny_model()
    datasets = pytest.importorskip("datasets", reason="pack_dataset packs a Hugging Face dataset: pip install datasets")
    ids = _token_lists(30, 4, 60, seed=2)  # one packed row of 2,048: four steps of one row
    ns.update(model=model, dataset=datasets.Dataset.from_dict({"input_ids": ids}))


def _readme_collator(ns, tmp, stack):
    ns["model"] = _tiny_model()


def _arrow_intro(ns, tmp, stack):
    table = _arrow_table(300, 2048, seed=4)
    datasets = pytest.importorskip("datasets", reason="pack_dataset packs a Hugging Face dataset: pip install datasets")
    ns.update(table=table, dataset=datasets.Dataset(table))
    # the doctest carries on from the block above it
    from packlib.formats.arrow import pack_table
    ns["pack_table"] = pack_table


def _arrow_steps(ns, tmp, stack):
    ns["table"] = _arrow_table(300, 4096, seed=5)  # some rows longer than 2048: overflow="truncate"


def _balance_intro(ns, tmp, stack):
    matplotlib = pytest.importorskip("matplotlib", reason="schedule.plot draws with matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stack.callback(plt.close, "all")
    ns["lengths"] = np.random.default_rng(6).integers(1, 8192, 3000)


def _balance_loop(ns, tmp, stack):
    torch = pytest.importorskip("torch", reason="the training loop needs torch")
    model = _tiny_model()
    lengths = np.random.default_rng(7).integers(1, 40, 60)
    rng = np.random.default_rng(8)
    ns.update(lengths=lengths, dataset=[{"input_ids": rng.integers(1, 1000, n)} for n in lengths],
              max_sequence_length=96, rank=1, world_size=2, accumulation=2, epochs=2, model=model,
              optimizer=torch.optim.SGD(model.parameters(), lr=1e-3), path=tmp / "checkpoint.pt")


def _balance_workers(ns, tmp, stack):
    pytest.importorskip("torchdata", reason="the block uses torchdata's StatefulDataLoader")
    _balance_loop(ns, tmp, stack)


def _learnable_dataset(completion_mask=False):
    """Sequences counting up from a random start (a tiny model learns them in a few steps)."""
    datasets = pytest.importorskip("datasets", reason="pack_dataset packs a Hugging Face dataset: pip install datasets")
    rng = np.random.default_rng(14)
    ids = [[(int(a) + j) % 1000 for j in range(n)] for a, n in zip(rng.integers(1, 1000, 100), rng.integers(4, 100, 100))]
    cols = {"input_ids": ids}
    if completion_mask:
        cols["completion_mask"] = [[0] * (len(x) // 3) + [1] * (len(x) - len(x) // 3) for x in ids]
    return datasets.Dataset.from_dict(cols)


def _training_trainer(ns, tmp, stack):
    ns.update(model=_tiny_model(), dataset=_learnable_dataset())


def _training_sft(ns, tmp, stack):
    pytest.importorskip("trl", reason="the block runs TRL's SFTTrainer: pip install trl")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models

    vocab = {f"t{i}": i for i in range(1000)}
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")),
                                                     pad_token="t0", eos_token="t1")
    ns.update(model=_tiny_model(), dataset=_learnable_dataset(completion_mask=True), tokenizer=tokenizer)


def _sft_examples():
    """Per-sample examples whose labels mask each prompt (-100), and their lengths."""
    ids = _learnable_dataset()["input_ids"][:40]
    labels = [[-100] * (len(x) // 3) + x[len(x) // 3:] for x in ids]
    return {"input_ids": ids, "labels": labels}, np.array([len(x) for x in ids])


def _training_balanced(ns, tmp, stack):
    pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate: pip install 'packlib[torch]'")
    transformers = pytest.importorskip("transformers")
    datasets = pytest.importorskip("datasets")
    cols, lengths = _sft_examples()
    args = transformers.TrainingArguments(str(tmp / "out"), per_device_train_batch_size=1, gradient_accumulation_steps=2,
                                          num_train_epochs=1, learning_rate=1e-2, report_to=[], use_cpu=True,
                                          save_strategy="no")
    ns.update(model=_tiny_model(), dataset=datasets.Dataset.from_dict(cols), lengths=lengths, args=args,
              max_sequence_length=128)


def _training_exactness(ns, tmp, stack):
    """The reader's model and data: a tiny Llama and examples of the balanced section."""
    _training_balanced(ns, tmp, stack)


def _training_unpacked(ns, tmp, stack):
    """The reader's model is a recurrent one: a tiny Mamba2."""
    _training_balanced(ns, tmp, stack)
    import transformers

    config = transformers.Mamba2Config(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_heads=4, head_dim=16,
                                       state_size=8, n_groups=1, expand=2, chunk_size=8)
    ns["model"] = transformers.Mamba2ForCausalLM(config)


def _training_balanced_sft(ns, tmp, stack):
    _training_sft(ns, tmp, stack)
    datasets = pytest.importorskip("datasets")
    cols, lengths = _sft_examples()
    ns.update(dataset=datasets.Dataset.from_dict(cols), lengths=lengths, max_sequence_length=128)


def _blending_ranks(ns, tmp, stack):
    pytest.importorskip("torch", reason="the block asks torch.distributed for the rank")
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this torch build")
    dist.init_process_group("gloo", init_method=(tmp / "pg").as_uri(), rank=0, world_size=1)
    stack.callback(dist.destroy_process_group)
    ns.update(weights=[0.5, 0.3, 0.2], total_samples=20_000, start_step=3, num_steps=6,
              datasets=[[f"doc {d}.{j}" for j in range(20_000)] for d in range(3)])


def _bucketing_intro(ns, tmp, stack):
    ns["dataset"] = [{"input_ids": x} for x in _token_lists(500, 1, 512, seed=9)]
    ns.update(lengths=np.array([len(x["input_ids"]) for x in ns["dataset"]]), rank=0, world_size=2)


def _formats_mlperf(ns, tmp, stack):
    from packlib.formats import mlperf_bert as mb

    (tmp / "unpacked").mkdir()
    for part in range(2):
        mb.write_unpacked(tmp / "unpacked" / f"part-{part:05d}", mb.synthetic_sequences(300, seed=part))


def _formats_hdf5(ns, tmp, stack):
    pytest.importorskip("h5py", reason="the HDF5 writer needs h5py: pip install 'packlib[hdf5]'")
    docs = np.random.default_rng(10).integers(2, 2050, 40)  # at most 2049 tokens: 2048 inputs
    ns["doc_offsets"] = np.concatenate([[0], np.cumsum(docs)])
    ns["tokens"] = np.random.default_rng(11).integers(1, 50_000, int(docs.sum()), dtype=np.int32)


def _formats_megatron(ns, tmp, stack):
    pytest.importorskip("pyarrow", reason="the block builds a pyarrow table: pip install 'packlib[arrow]'")


def _guide_lengths(ns, tmp, stack):
    ns["tokenized"] = _token_lists(2000, 8, 512, seed=12)


def _optimal_certificate(ns, tmp, stack):
    import packlib  # the block carries on from the first one of docs/optimal.md (packlib, h)

    ns.update(packlib=packlib, h=packlib.datasets.wikipedia_512())
    # sys.path.insert(0, "tests") reads the repository's tests/ from the repository root
    (tmp / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "naive_certificate.py", tmp / "tests")
    saved_path, had_module = list(sys.path), "naive_certificate" in sys.modules

    def restore():
        sys.path[:] = saved_path
        if not had_module:
            sys.modules.pop("naive_certificate", None)

    stack.callback(restore)


def _pairs(n, seed, vocab=1000):
    rng = np.random.default_rng(seed)
    ids = lambda k: rng.integers(1, vocab, k).tolist()  # noqa: E731
    return [{"prompt_ids": ids(rng.integers(2, 60)), "chosen_ids": ids(rng.integers(1, 100)),
             "rejected_ids": ids(rng.integers(1, 100))} for _ in range(n)]


def _preference_dpo(ns, tmp, stack):
    torch = pytest.importorskip("torch", reason="the DPO loop needs torch")
    pytest.importorskip("trl", reason="the block compares with TRL's DataCollatorForPreference")
    model, ref_model = _tiny_model(), _tiny_model().eval().requires_grad_(False)
    ns.update(model=model, ref_model=ref_model, dataset=_pairs(16, seed=30),
              optimizer=torch.optim.SGD(model.parameters(), lr=1e-3))


def _preference_grpo(ns, tmp, stack):
    torch = pytest.importorskip("torch", reason="the GRPO example needs torch")
    model = _tiny_model()
    old_model = _tiny_model().eval().requires_grad_(False)  # the sampling policy
    old_model.load_state_dict({k: v + 0.01 * torch.randn_like(v) for k, v in model.state_dict().items()})
    rng = np.random.default_rng(31)
    groups = [{"prompt_ids": rng.integers(1, 1000, rng.integers(2, 80)).tolist(),
               "completion_ids": [rng.integers(1, 1000, rng.integers(1, 60)).tolist() for _ in range(4)]}
              for _ in range(3)]
    ns.update(model=model, old_model=old_model, groups=groups, optimizer=torch.optim.SGD(model.parameters(), lr=1e-3),
              reward=lambda ids: float(np.mean(np.asarray(ids) % 2 == 0)))


def _preference_reward(ns, tmp, stack):
    torch = pytest.importorskip("torch", reason="the reward-model example needs torch")
    transformers = pytest.importorskip("transformers", reason="the block runs a transformers model")
    cfg = transformers.LlamaConfig(vocab_size=1000, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                   num_labels=1, pad_token_id=0)
    reward_model = transformers.AutoModelForSequenceClassification.from_config(cfg).train()
    dataset = [{"chosen_ids": e["prompt_ids"] + e["chosen_ids"], "rejected_ids": e["prompt_ids"] + e["rejected_ids"],
                "margin": float(i % 3)} for i, e in enumerate(_pairs(16, seed=33))]
    ns.update(reward_model=reward_model, dataset=dataset, optimizer=torch.optim.SGD(reward_model.parameters(), lr=1e-3))


def _preference_kto(ns, tmp, stack):
    model, ref_model = _tiny_model(), _tiny_model().eval().requires_grad_(False)
    rng = np.random.default_rng(34)
    examples = [{"prompt_ids": rng.integers(1, 1000, rng.integers(2, 40)).tolist(),
                 "completion_ids": rng.integers(1, 1000, rng.integers(1, 40)).tolist(), "label": bool(i % 2),
                 "ref_logps": -200.0 + i} for i in range(6)]
    for i, e in enumerate(examples):  # KTO's mismatched pairs: the next example's completion
        e["KL_completion_ids"] = examples[(i + 1) % len(examples)]["completion_ids"]
    ns.update(model=model, ref_model=ref_model, examples=examples)


def _preference_grpo_trainer(ns, tmp, stack):
    pytest.importorskip("trl", reason="the block runs TRL's GRPOTrainer: pip install trl")
    pytest.importorskip("datasets", reason="GRPOTrainer reads a datasets.Dataset")
    from tests import test_trainer_grpo as grpo

    ns.update(model=grpo._model(), tokenizer=grpo._tokenizer(), prompts=grpo._prompts(), reward=grpo._reward)


def _multimodal_trainer(ns, tmp, stack):
    pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate: pip install 'packlib[torch]'")
    _multimodal(ns, tmp, stack)
    from tests import naive_vision as nv

    ns.update(model=nv.tiny_model("qwen2_5_vl"))


def _preference_trl(kind):
    """TRL's data for ``kind`` (dpo, reward, kto), a word-level tokenizer and tiny models."""
    def setup(ns, tmp, stack):
        pytest.importorskip("trl", reason="the block runs TRL's trainers: pip install trl")
        pytest.importorskip("datasets", reason="TRL's trainers take a datasets.Dataset")
        from tests import _preference_trainers as trainers

        ns.update(dataset=trainers.dataset(kind), tokenizer=trainers.tokenizer())
        if kind == "reward":
            ns["reward_model"] = trainers.reward_model()
        else:
            ns.update(model=trainers.causal_lm(), ref_model=trainers.causal_lm())
    return setup


def _preference_plans(ns, tmp, stack):
    pytest.importorskip("torch", reason="the block collates with packlib.torch")
    ns["dataset"] = _pairs(300, seed=32)


def _multimodal(ns, tmp, stack):
    pytest.importorskip("torch", reason="the block runs a model: pip install torch")
    pytest.importorskip("transformers", reason="the block runs a transformers Qwen2-VL")
    from tests import naive_vision as nv

    examples = [e for seed in range(3) for e in nv.examples(seed)]  # 0-2 images each, tiny
    ns.update(model=nv.tiny_model("qwen2_vl"), examples=examples,
              lengths=np.array([e["input_ids"].shape[-1] for e in examples]))


def _multimodal_table(ns, tmp, stack):
    pytest.importorskip("pyarrow", reason="the block packs an Arrow table: pip install 'packlib[arrow]'")
    _multimodal(ns, tmp, stack)


def _pipeline_intro(ns, tmp, stack):
    pq = pytest.importorskip("pyarrow.parquet", reason="the pipeline reads Parquet: pip install 'packlib[arrow]'")
    (tmp / "data").mkdir()
    for part in range(3):
        pq.write_table(_arrow_table(200, 3000, seed=20 + part), tmp / "data" / f"in-{part}.parquet")


def _vision_files(ns, tmp, stack):
    pytest.importorskip("pyarrow.parquet", reason="the pipeline reads Parquet: pip install 'packlib[arrow]'")
    from tests.pipeline_vision import vision_table, write_shards

    write_shards(tmp / "vision", vision_table(120).drop_columns(["images", "cover"]), 2)  # processed examples


SETUPS = {
    ("README.md", "In a notebook: pack a length histogram"): _readme_notebook,
    ("README.md", "Packing a dataset for a trainer"): _readme_trainer,
    ("README.md", "Packed rows stay apart in the model"): _readme_collator,
    ("README.md", "Balanced steps in the Trainer"): _training_balanced,
    ("docs/arrow.md", "Packing Arrow tables and Hugging Face datasets"): _arrow_intro,
    ("docs/arrow.md", "The steps (for your own pipeline)"): _arrow_steps,
    ("docs/balance.md", "Compute-balanced steps for data-parallel training"): _balance_intro,
    ("docs/balance.md", "The training loop"): _balance_loop,
    ("docs/balance.md", "Resuming with DataLoader workers"): _balance_workers,
    ("docs/blending.md", "Every rank builds only its part (torch.distributed / MPI)"): _blending_ranks,
    ("docs/bucketing.md", "Readahead bucketing and streaming packing"): _bucketing_intro,
    ("docs/formats.md", "The MLPerf BERT packing tool"): _formats_mlperf,
    ("docs/formats.md", "HDF5 for GPT (Cerebras layout)"): _formats_hdf5,
    ("docs/formats.md", "Megatron-Bridge / NeMo packed SFT files"): _formats_megatron,
    ("docs/guide.md", "From lengths to packs to files"): _guide_lengths,
    ("docs/training.md", "`transformers.Trainer`, with its defaults"): _training_trainer,
    ("docs/training.md", "TRL's `SFTTrainer`"): _training_sft,
    ("docs/training.md", "Balanced steps in `transformers.Trainer` and Accelerate"): _training_balanced,
    ("docs/training.md", "Balanced steps in TRL's `SFTTrainer`"): _training_balanced_sft,
    ("docs/training.md", "Which models pack exactly"): _training_exactness,
    ("docs/training.md", "Models that cannot pack: unpacked rows, still balanced"): _training_unpacked,
    ("docs/optimal.md", "The certificate: check the bound without packlib"): _optimal_certificate,
    ("docs/pipeline.md", "Packing datasets larger than memory: `pack-dataset`"): _pipeline_intro,
    ("docs/preference.md", "A DPO loop"): _preference_dpo,
    ("docs/preference.md", "GRPO with TRL's default loss"): _preference_grpo,
    ("docs/preference.md", "A reward model"): _preference_reward,
    ("docs/preference.md", "KTO"): _preference_kto,
    ("docs/preference.md", "Plans keep pairs and groups whole"): _preference_plans,
    ("docs/preference.md", "TRL's `GRPOTrainer`, packed: `PackedGRPOTrainer`"): _preference_grpo_trainer,


    ("docs/preference.md", "`DPOTrainer`"): _preference_trl("dpo"),
    ("docs/preference.md", "`RewardTrainer`"): _preference_trl("reward"),
    ("docs/preference.md", "`KTOTrainer`"): _preference_trl("kto"),
    ("docs/prefix-trees.md", "Log-probs and losses per trajectory"): _needs_a_model,
    ("docs/multimodal.md", "Vision-language packing: Qwen2-VL, Qwen2.5-VL, Qwen3-VL"): _multimodal,
    ("docs/multimodal.md", "Planning rows on the true length"): _multimodal,
    ("docs/multimodal.md", "Balanced steps that count the vision tower"): _multimodal,
    ("docs/multimodal.md", "Packed datasets: images carried with their rows"): _multimodal_table,
    ("docs/multimodal.md", "Datasets larger than memory"): _vision_files,
    ("docs/multimodal.md", "In `transformers.Trainer`: `balance_trainer`, and resuming"): _multimodal_trainer,
    ("docs/pipeline.md", "Images and other columns carried whole: `--carry`"): _vision_files,
}

BLOCKS = all_blocks()


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_block_runs(block, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace = {"__name__": "__main__"}
    with contextlib.ExitStack() as stack:
        setup = SETUPS.get((block.path, block.heading))
        if setup is not None:
            setup(namespace, tmp_path, stack)
        run_block(block, namespace)


def test_the_collector_finds_the_blocks():
    """Not silently nothing: every page with examples contributes, and each setup has its block."""
    assert len(BLOCKS) >= 15
    assert {b.path for b in BLOCKS} >= {"README.md", "docs/arrow.md", "docs/balance.md", "docs/blending.md",
                                        "docs/bucketing.md", "docs/formats.md", "docs/guide.md",
                                        "docs/optimal.md", "docs/pipeline.md", "docs/preference.md"}
    assert not any(b.path in GENERATED for b in BLOCKS)
    assert any(b.code.lstrip().startswith(">>>") for b in BLOCKS)
    sections = {(b.path, b.heading) for b in BLOCKS}
    assert set(SETUPS) <= sections, f"setups for sections with no python block: {set(SETUPS) - sections}"
    assert len({b.id for b in BLOCKS}) == len(BLOCKS)
    assert set(ALSO_RUN_BY_TEST_TORCH) <= {b.id for b in BLOCKS}


MARKDOWN = """# Title

```bash
echo not python
```

## Good

```python
x = 1 + 1
assert x == 2
```

```python
>>> 1 + 1
2
>>> list(range(12))
[0, 1, ..., 11]
```

## Bad

```python
undefined_name
```

```python
>>> 1 + 1
3
```

```text
{"not": python}
```
"""


def test_the_runner_runs_good_blocks_and_fails_broken_ones():
    blocks = python_blocks(MARKDOWN, "x.md")
    assert [b.id for b in blocks] == ["x.md::Good#1", "x.md::Good#2", "x.md::Bad#1", "x.md::Bad#2"]
    assert blocks[0].line == 10 and blocks[0].code.startswith("x = 1")
    good_exec, good_doctest, bad_exec, bad_doctest = blocks
    run_block(good_exec, {})
    run_block(good_doctest, {})
    with pytest.raises(NameError):
        run_block(bad_exec, {})
    with pytest.raises(AssertionError, match="1 of 1 examples failed"):
        run_block(bad_doctest, {})
