"""Prefix-tree rows (PackedCollator(share_prefix=True), packlib/torch/collate/_tree*.py,
_trie.py, packlib/_kernels/trie.py, packlib/torch/logps/_tree.py): the trie against a
plain-Python one (tests/naive_tree.py), its masks against the naive ancestor mask, and a
tiny random Llama's per-trajectory log-probs, token-mean loss and gradients against each
trajectory run alone (no packlib). Needs torch and transformers; skips without them.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the prefix-tree tests build torch tensors: pip install torch==2.13.0")

from .naive_tree import naive_depths, naive_tree_mask, naive_trie  # noqa: E402
from packlib.torch import (PackedCollator, model_inputs, sequence_logps, shared_prompt_block_mask,  # noqa: E402
                           shared_prompt_mask, split_trees, token_logps, tree_block_mask, tree_mask,
                           tree_sizes)
from packlib.torch.collate._trie import build_trie  # noqa: E402

VOCAB = 97
sequences = st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=9), min_size=1, max_size=7)


def _dense(block_mask, T):
    """The elementwise mask a BlockMask stands for: full blocks all True, partial blocks
    its mask_mod, the rest False."""
    bs = block_mask.BLOCK_SIZE[0]
    out = torch.zeros(T, T, dtype=torch.bool)
    q, k = torch.meshgrid(torch.arange(T), torch.arange(T), indexing="ij")
    by_mod = block_mask.mask_mod(0, 0, q, k)
    for nums, idx, full in ((block_mask.kv_num_blocks, block_mask.kv_indices, False),
                            (block_mask.full_kv_num_blocks, block_mask.full_kv_indices, True)):
        for qb in range(nums.shape[-1]):
            for kb in idx[0, 0, qb, :int(nums[0, 0, qb])].tolist():
                rows, cols = slice(qb * bs, (qb + 1) * bs), slice(kb * bs, (kb + 1) * bs)
                out[rows, cols] = True if full else by_mod[rows, cols]
    return out


@settings(max_examples=60, deadline=None)
@given(sequences)
def test_the_trie_holds_each_sequence_once_and_matches_a_naive_trie(seqs):
    trie = build_trie([np.array(s, np.int64) for s in seqs])
    ids, parent, nodes = naive_trie(seqs)
    assert trie.ids.tolist() == ids and trie.parent.tolist() == parent  # no token merged with a differing one
    assert trie.depth.tolist() == naive_depths(parent)
    for s, mine, theirs in zip(seqs, trie.node_of, nodes):
        assert mine.tolist() == theirs
        walk, at = [], int(mine[-1])  # the sequence, read back by walking its last token's ancestors
        while at != -1:
            walk.append(int(trie.ids[at]))
            at = int(trie.parent[at])
        assert walk[::-1] == s
    mask = naive_tree_mask(parent)
    for i in range(len(ids)):  # the subtree of i is [i, end[i])
        assert [q for q in range(len(ids)) if mask[q][i]] == list(range(i, int(trie.end[i])))


@settings(max_examples=40, deadline=None)
@given(sequences, st.sampled_from([2, 4, 8]))
def test_the_masks_equal_the_naive_ancestor_mask(seqs, block_size):
    seqs = [[7] + s for s in seqs]  # a first token nothing predicts, then trained tokens
    batch = PackedCollator(share_prefix=True, attention_mask="4d")([{"input_ids": s} for s in seqs])
    _, parent, _ = naive_trie(seqs)
    naive = torch.tensor(naive_tree_mask(parent))
    T = naive.shape[0]
    assert batch["input_ids"].shape == (1, T)  # the row holds the trie's tokens, nothing else
    assert torch.equal(batch["attention_mask"][0, 0] == 0, naive)
    assert torch.equal(_dense(tree_block_mask(batch, block_size=block_size), T), naive)


def test_shared_prompt_block_mask_is_the_trees_special_case():
    rng = np.random.default_rng(3)
    groups = [{"prompt_ids": rng.integers(1, VOCAB, rng.integers(1, 30)).tolist(),
               "completion_ids": [rng.integers(1, VOCAB, rng.integers(1, 30)).tolist() for _ in range(3)]}
              for _ in range(3)]
    for share in (True, False):
        batch = PackedCollator(share_prompt=share, attention_mask="4d")(groups)
        T = batch["input_ids"].shape[1]
        dense = shared_prompt_mask(batch)[0, 0] == 0 if share else batch["attention_mask"][0, 0] == 0
        assert torch.equal(_dense(shared_prompt_block_mask(batch, block_size=8), T), dense)


# ---------------------------------------------------------------- workloads

def stepwise_agent(rng, turns=4, system=12):
    """One trajectory's step-wise samples: sample t is the conversation up to turn t's answer,
    training that answer only."""
    history, samples = rng.integers(1, VOCAB, system).tolist(), []
    for _ in range(turns):
        history += rng.integers(1, VOCAB, rng.integers(3, 9)).tolist()  # the user / the tool
        answer = rng.integers(1, VOCAB, rng.integers(2, 8)).tolist()
        samples.append({"input_ids": history + answer, "completion_mask": [0] * len(history) + [1] * len(answer)})
        history = history + answer
    return samples


def branching_group(rng, k=4, prompt=20):
    """A GRPO group whose answers share their first tokens (sampled from a search)."""
    stem = rng.integers(1, VOCAB, 6).tolist()
    comps = [stem[:rng.integers(0, 7)] + rng.integers(1, VOCAB, rng.integers(1, 10)).tolist() for _ in range(k)]
    return {"prompt_ids": rng.integers(1, VOCAB, prompt).tolist(), "completion_ids": comps}


def multi_turn(rng, n=3):
    """Whole trajectories with several trained spans that branch at a turn; one has its first
    answer rewritten (a template that strips earlier thoughts): the tree forks there."""
    base = stepwise_agent(rng, turns=3)[-1]
    out = []
    for j in range(n):
        ids = list(base["input_ids"])
        mask = [1 if i > 12 and (i // 5) % 2 else 0 for i in range(len(ids))]
        cut = int(rng.integers(14, len(ids)))
        tail = rng.integers(1, VOCAB, rng.integers(2, 8)).tolist()
        ids, mask = ids[:cut] + tail, mask[:cut] + [1] * len(tail)
        if j == n - 1:
            ids[13] = (ids[13] % (VOCAB - 1)) + 1
        out.append({"input_ids": ids, "completion_mask": mask})
    return out


def _trajectories(examples):
    """``(ids, start, trained)`` of each trajectory in TRL's order, read without packlib."""
    out = []
    for e in examples:
        if "completion_ids" in e:
            comps = e["completion_ids"] if isinstance(e["completion_ids"][0], list) else [e["completion_ids"]]
            out += [(e["prompt_ids"] + c, len(e["prompt_ids"]), [True] * len(c)) for c in comps]
        else:
            m = e["completion_mask"]
            first = next(i for i, x in enumerate(m) if x and i > 0)
            out.append((e["input_ids"], first, [bool(x) for x in m[first:]]))
    return out


def _alone(model, examples):
    """Each trajectory's per-token log-probs and mask, each run alone (no packlib)."""
    trajs = _trajectories(examples)
    width = max(len(t[0]) - t[1] for t in trajs)
    logps = torch.zeros(len(trajs), width)
    mask = torch.zeros(len(trajs), width, dtype=torch.int64)
    rows = []
    for i, (ids, start, trained) in enumerate(trajs):
        logits = model(input_ids=torch.tensor([ids])).logits[0].float()
        lp = torch.log_softmax(logits[start - 1:-1], -1).gather(1, torch.tensor(ids[start:])[:, None])[:, 0]
        keep = torch.tensor(trained)
        rows.append(torch.where(keep, lp, 0.0))
        mask[i, :len(trained)] = keep.long()
    for i, r in enumerate(rows):
        logps = logps.index_put((torch.full((r.numel(),), i), torch.arange(r.numel())), r)
    return logps, mask


def _config():
    import transformers

    return transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)


@pytest.fixture(scope="module")
def model():
    transformers = pytest.importorskip("transformers", reason="the model tests build a transformers Llama")
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(_config(), attn_implementation="sdpa").train()


WORKLOADS = {
    "stepwise": lambda rng: stepwise_agent(rng) + stepwise_agent(rng, turns=3),
    "grpo_branching": lambda rng: [branching_group(rng), branching_group(rng)],
    "multi_turn": lambda rng: multi_turn(rng),
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_each_trajectorys_logps_loss_and_gradients_equal_it_alone(model, name):
    examples = WORKLOADS[name](np.random.default_rng(5))
    batch = PackedCollator(share_prefix=True, attention_mask="4d")(examples)
    T = batch["input_ids"].shape[1]
    assert T == len(naive_trie([t[0] for t in _trajectories(examples)])[0])
    assert T < sum(len(t[0]) for t in _trajectories(examples))

    def loss_of(logps, mask):  # DAPO / GRPO token mean, an advantage per trajectory
        adv = torch.linspace(-1.0, 1.0, logps.shape[0])[:, None]
        return -(logps * adv * mask).sum() / mask.sum()

    model.zero_grad()
    ref, ref_mask = _alone(model, examples)
    ref_loss = loss_of(ref, ref_mask)
    ref_loss.backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    got, mask = token_logps(model(**model_inputs(batch)).logits, batch)
    loss = loss_of(got, mask)
    loss.backward()
    assert torch.equal(mask, ref_mask)
    assert float((got - ref).abs().max().detach()) <= 2e-5
    assert abs(float(loss.detach()) - float(ref_loss.detach())) <= 1e-5 * abs(float(ref_loss.detach()))
    for p, g in zip(model.parameters(), ref_grads):
        assert float((p.grad - g).norm()) <= 1e-4 * float(g.norm())
    with torch.no_grad():
        sums = sequence_logps(model(**model_inputs(batch)).logits, batch)
    assert torch.allclose(sums, ref.detach().sum(1), atol=1e-4)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_attention_with_the_tree_block_mask_equals_each_trajectory_alone(model, monkeypatch):
    transformers = pytest.importorskip("transformers")
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    hf_flex = pytest.importorskip("transformers.integrations.flex_attention")
    # flex_attention on CPU runs forward only; eager here (compiling it takes a minute on CPU)
    monkeypatch.setattr(hf_flex, "compile_friendly_flex_attention",
                        lambda q, k, v, training=False, **kw: flex.flex_attention(q, k, v, **kw))
    flex_model = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(_config()),
                                                               attn_implementation="flex_attention").eval()
    flex_model.load_state_dict(model.state_dict())
    rng = np.random.default_rng(6)
    examples = stepwise_agent(rng, turns=3)
    batch = PackedCollator(share_prefix=True)(examples)
    batch["attention_mask"] = tree_block_mask(batch, block_size=16)
    with torch.no_grad():
        got, mask = token_logps(flex_model(**model_inputs(batch)).logits, batch)
        ref, ref_mask = _alone(model.eval(), examples)
    model.train()
    assert torch.equal(mask, ref_mask) and float((got - ref).abs().max()) <= 2e-5


def test_token_keys_follow_their_tokens_and_example_keys_are_carried():
    turns = [{"input_ids": [1, 2, 3, 4], "completion_mask": [0, 0, 1, 1], "adv": [0, 0, 0.5, 0.25], "id": 7},
             {"input_ids": [1, 2, 3, 4, 5, 6], "completion_mask": [0, 0, 0, 0, 1, 1], "adv": [0, 0, 0, 0, 1.0, 2.0],
              "id": 8}]
    batch = PackedCollator(share_prefix=True, token_keys=["adv"])(turns)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5, 6]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 4, 5]]
    assert batch["adv"].tolist() == [[0.5, 0.25], [1.0, 2.0]] and batch["id"].tolist() == [7, 8]
    logps, mask = token_logps(torch.zeros(1, 6, 8), batch)
    assert logps.shape == batch["adv"].shape and mask.tolist() == [[1, 1], [1, 1]]
    with pytest.raises(ValueError, match="tree_block_mask"):
        model_inputs(batch)  # positions are depths: a tree batch without its mask is refused
    batch["attention_mask"] = tree_mask(batch)
    assert set(model_inputs(batch)) == {"input_ids", "position_ids", "attention_mask", "use_cache"}
    group = PackedCollator(share_prefix=True, token_keys=["old"])(
        [{"prompt_ids": [1, 2], "completion_ids": [[3, 4], [3]], "old": [[0.1, 0.2], [0.3]]}])
    assert torch.allclose(group["old"], torch.tensor([[0.1, 0.2], [0.3, 0.0]]))
    assert group["input_ids"].tolist() == [[1, 2, 3, 4]] and group["tree_end"].tolist() == [[4, 4, 4, 4]]


def test_a_sequence_that_is_a_prefix_of_another_lies_inside_it():
    batch = PackedCollator(share_prefix=True)([{"input_ids": [1, 2, 3]}, {"input_ids": [1, 2, 3, 4]},
                                              {"input_ids": [1, 2, 3]}])
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4]]
    logps, mask = token_logps(torch.randn(1, 4, 8), batch)
    assert mask.tolist() == [[1, 1, 0], [1, 1, 1], [1, 1, 0]] and torch.equal(logps[0], logps[2])


def test_tree_sizes_count_the_tries_tokens_and_pairs():
    rng = np.random.default_rng(9)
    samples = stepwise_agent(rng) + stepwise_agent(rng)
    ids = [0] * 4 + [1] * 4
    tokens, pairs = tree_sizes(samples, tree_ids=ids)
    for t in range(2):
        seqs = [s["input_ids"] for s, i in zip(samples, ids) if i == t]
        _, parent, _ = naive_trie(seqs)
        assert tokens[t] == len(parent) == len(seqs[-1]) and pairs[t] == sum(d + 1 for d in naive_depths(parent))
    assert tree_sizes([branching_group(rng)])[0].shape == (1,)


@pytest.mark.parametrize("kwargs, examples, match", [
    ({}, [{"input_ids": [1, 2, 3], "completion_mask": [0, 1]}], r"examples\[0\]\['completion_mask'\] holds 2"),
    ({}, [{"input_ids": [1, 2], "labels": [1, 2, 3]}], r"examples\[0\]\['labels'\] holds 3"),
    ({}, [{"input_ids": [1, 2]}, {"input_ids": [1, 2, 3], "completion_mask": [1, 0, 0]}],
     r"examples\[1\] trains no token"),
    ({"token_keys": ["adv"]}, [{"input_ids": [1, 2], "adv": [1.0]}], r"examples\[0\]\['adv'\] holds 1 values"),
    ({"token_keys": ["adv"]}, [{"prompt_ids": [1], "completion_ids": [[2], [3]], "adv": [[1.0], [1.0, 2.0]]}],
     r"examples\[0\]\['adv'\]\[1\] holds 2"),
    ({"max_sequence_length": 3}, [{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}], "over max_sequence_length"),
])
def test_bad_input_is_refused_naming_the_example(kwargs, examples, match):
    with pytest.raises(ValueError, match=match):
        PackedCollator(share_prefix=True, **kwargs)(examples)


def test_settings_that_cannot_express_a_tree_are_refused():
    with pytest.raises(ValueError, match="share_prefix=True alone"):
        PackedCollator(share_prefix=True, share_prompt=True)
    with pytest.raises(ValueError, match="flex_attention with tree_block_mask"):
        PackedCollator(share_prefix=True, flash_attn_kwargs=True)
    with pytest.raises(ValueError, match="share_prefix=True"):
        PackedCollator(token_keys=["adv"])
    with pytest.raises(ValueError, match="share_prefix"):
        tree_block_mask(PackedCollator()([{"input_ids": [1, 2]}]))
    assert "share_prefix=True" in repr(PackedCollator(share_prefix=True))


def test_balance_plans_rows_of_whole_trees_by_their_cost():
    import packlib

    rng = np.random.default_rng(11)
    trees = [stepwise_agent(rng, turns=int(rng.integers(2, 6))) for _ in range(12)]
    examples = [s for t in trees for s in t]
    tokens, pairs = tree_sizes(examples, tree_ids=[i for i, t in enumerate(trees) for _ in t])
    a, b = packlib.transformer_cost(32)
    L = 200
    schedule = packlib.balance(tokens, L, world_size=2, cost=(a, 0.0), extra_costs=2 * b * pairs, drop_last=False)
    seen = []
    collator = PackedCollator(share_prefix=True, max_sequence_length=L)
    for r in range(2):
        for step in schedule.rank(r):
            for row in step:
                batch = collator([s for i in row.tolist() for s in trees[i]])  # whole trees, within the row
                assert batch["input_ids"].shape[1] <= tokens[row].sum() <= L
                seen += row.tolist()
    assert sorted(seen) == list(range(len(trees)))
    costs = schedule.sample_costs
    assert np.allclose(costs, a * tokens + 2 * b * pairs)
    with pytest.raises(ValueError, match="exceeds max_sequence_length"):
        packlib.balance(tokens, int(tokens.max()) - 1, world_size=2, drop_last=False)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(1, 3), st.booleans()), min_size=2, max_size=9), min_size=1,
                max_size=6))
def test_each_trajectorys_tokens_are_read_at_their_parent(trajs):
    trajs = [t if any(f for _, f in t[1:]) else t[:-1] + [(t[-1][0], True)] for t in trajs]
    examples = [{"input_ids": [x for x, _ in t], "completion_mask": [int(f) for _, f in t]} for t in trajs]
    batch = PackedCollator(share_prefix=True, token_keys=["w"])(
        [dict(e, w=[float(i) for i in range(len(e["input_ids"]))]) for e in examples])
    seqs = [e["input_ids"] for e in examples]
    _, parent, nodes = naive_trie(seqs)
    logits = torch.randn(1, len(parent), 5, dtype=torch.float64).float()
    logps, mask = token_logps(logits, batch)
    table = torch.log_softmax(logits[0], -1)
    for i, (seq, t) in enumerate(zip(seqs, trajs)):
        first = next(d for d in range(1, len(t)) if t[d][1])
        for c, d in enumerate(range(first, len(seq))):
            want = float(table[parent[nodes[i][d]], seq[d]]) if t[d][1] else 0.0
            assert mask[i, c] == int(t[d][1]) and abs(float(logps[i, c]) - want) < 1e-6
            assert float(batch["w"][i, c]) == d  # a per-token key follows its trajectory's token
        assert int(mask[i].sum()) == sum(f for _, f in t[1:])


def test_tree_sizes_errors_name_the_example_and_the_collator_pickles():
    import pickle

    good = {"input_ids": [1, 2, 3], "completion_mask": [0, 1, 1]}
    with pytest.raises(ValueError, match=r"examples\[2\] trains no token"):
        tree_sizes([good, good, {"input_ids": [1, 2], "completion_mask": [0, 0]}], tree_ids=[0, 0, 1])
    with pytest.raises(ValueError, match="one tree id per example"):
        tree_sizes([good, good], tree_ids=[0])
    collator = pickle.loads(pickle.dumps(PackedCollator(share_prefix=True, token_keys=("adv",))))
    assert collator.share_prefix and collator.token_keys == ("adv",)


@settings(max_examples=40, deadline=None)
@given(sequences, st.lists(st.integers(0, 2), min_size=7, max_size=7), st.integers(0, 12))
def test_split_trees_cuts_trees_larger_than_a_row_at_nodes(seqs, trees, extra):
    seqs = [[7] + s for s in seqs]
    examples = [{"input_ids": s} for s in seqs]
    tree_ids = trees[:len(seqs)]
    L = max(len(s) for s in seqs) + extra
    new = split_trees(examples, L, tree_ids=tree_ids)
    tokens, _ = tree_sizes(examples, tree_ids=new)
    assert (tokens <= L).all() and sorted(set(new.tolist())) == list(range(tokens.size))
    for t in set(tree_ids):  # a part never mixes trees
        parts = {int(new[i]) for i, x in enumerate(tree_ids) if x == t}
        assert not parts & {int(new[i]) for i, x in enumerate(tree_ids) if x != t}
    whole = tree_sizes(examples, tree_ids=tree_ids)[0]
    for t, size in zip(sorted(set(tree_ids)), whole.tolist()):
        if size <= L:  # a tree that fits stays whole
            assert len({int(new[i]) for i, x in enumerate(tree_ids) if x == t}) == 1
    with pytest.raises(ValueError, match=r"examples\[\d+\] alone lays out"):
        split_trees(examples, max(len(s) for s in seqs) - 1, tree_ids=tree_ids)
