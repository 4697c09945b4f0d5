# %% [markdown]
# # packlib quick start
# A notebook in plain-script form (`# %%` cells; open it in VS Code or Jupytext, or run it
# with `python docs/examples/quickstart.py`). The test suite runs it top to bottom.

# %%
import numpy as np

import packlib

# %% [markdown]
# ## 1. A length histogram
# `h[i]` counts sequences of length `i + 1`; `len(h)` is the max sequence length.
# packlib ships a real one: BERT pre-training on Wikipedia, 16.3 M sequences of up to 512.

# %%
h = packlib.datasets.wikipedia_512()
n, L = int(h.sum()), h.size
tokens = int((h * np.arange(1, L + 1)).sum())
print(f"{n:,} sequences, padded to {L}: {100 * tokens / (n * L):.2f} % of the compute is real tokens")

# %% [markdown]
# ## 2. Compare methods
# Efficiency = real tokens / (packs x L); the speed-up limit is what no padding at all
# would give.

# %%
table = packlib.compare(h, methods=["spfhp", "lpfhp", "nnls"], max_sequences_per_pack=(3, None))
print(table.to_markdown())

# %% [markdown]
# ## 3. One plan, then packs of real sample ids
# Your dataset's lengths, in dataset order (here: drawn to match the histogram).

# %%
plan = packlib.nnls_pack(h, max_sequences_per_pack=3)
print(plan)  # the packing report

lengths = np.repeat(np.arange(1, L + 1), h)
np.random.default_rng(0).shuffle(lengths)
packs = plan.assign(lengths, seed=0).shuffled(seed=0)
packs.validate(len(lengths))  # every sample exactly once, no pack too long or too deep
print(packs)
print("first pack:", packs[0].tolist(), "lengths", lengths[packs[0]].tolist())

# %% [markdown]
# ## 4. Or pack a list of lengths directly

# %%
small = np.random.default_rng(1).integers(10, 400, 10_000)
bfd = packlib.bfd_pack(small, max_sequence_length=512)
print(bfd, "lower bound:", -(-int(small.sum()) // 512), "packs")

# %% [markdown]
# ## 5. Save the plan; plot it (needs the `plot` extra)

# %%
import json

summary = plan.to_dict()  # the MLPerf packing-metadata keys, plus the plan itself
print(json.dumps({k: summary[k] for k in ("packing_efficiency", "new_number_of_samples", "top_8_strategies")}))
assert packlib.PackingPlan.from_dict(summary).num_packs == plan.num_packs

try:
    import matplotlib

    matplotlib.use("Agg")
    ax = plan.plot(log=True)
    ax.figure.savefig("packlib-plan.png")
    table.plot().figure.savefig("packlib-compare.png")  # the comparison table of section 2
    print("wrote packlib-plan.png and packlib-compare.png")
except ImportError:
    print("matplotlib not installed: pip install 'packlib[plot]'")
