"""The models' own forward and cache crop: what the engine's lanes and the drafters both run.

Kept beneath both, so the baseline lane never calls into the drafters for the target's step.
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

import torch
from transformers import DynamicCache

from specviz.models.pairs import ModelPair
from specviz.models.slot_calls import given_back, logits_and_states, pooled_cache, run_hidden_rows, run_rows
from specviz.models.slots import SlotCache, to_device, uses_slots


@contextlib.contextmanager
def target_cache_for(pair: ModelPair, drafter=None) -> Iterator[DynamicCache | SlotCache]:
    """The target's KV cache for one lane's run: a DynamicCache, or where the target runs in slots
    (specviz.models.slots: CUDA) a slot cache from the pool, its graphs kept for the next run. When the
    run ends (or is stopped), the cache goes back, and the drafter closes (its own cache goes back too)."""
    cache = pooled_cache(pair.target, pair.context_length) if uses_slots(pair.target) else DynamicCache()
    try:
        yield cache
    finally:
        given_back(pair.target, cache)
        if drafter is not None:
            drafter.close()


def crop_cache(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` positions. transformers 5's crop takes a negative count to drop."""
    excess = cache.get_seq_length() - length
    if excess > 0:
        cache.crop(-excess)


def move_cache_positions(cache: DynamicCache, sources: Sequence[int], dest: int) -> None:
    """Copy every layer's keys and values at positions `sources` to dest, dest+1, …: the guesses the
    target took (a rival, a tree's accepted path) keep the entries its verify computed, at the
    positions the text now has them. (The sources are gathered first, so they may overlap the dest.)"""
    if not sources:
        return
    index = to_device(list(sources), cache.layers[0].keys.device)  # (m,)
    for layer in cache.layers:
        layer.keys[..., dest : dest + len(sources), :] = layer.keys[..., index, :]  # (b, heads, m, head_dim)
        layer.values[..., dest : dest + len(sources), :] = layer.values[..., index, :]


def node_depths(parents: Sequence[int]) -> list[int]:
    """Each tree node's depth (1 for a child of the text's last id, parent -1); a node comes after its parent."""
    depths: list[int] = []
    for node, parent in enumerate(parents):
        if parent >= node:
            raise ValueError(f"tree node {node} comes before its parent {parent}")
        depths.append(1 if parent < 0 else depths[parent] + 1)
    return depths


def tree_layout(num_keys: int, num_new: int, parents: Sequence[int], device: torch.device, dtype: torch.dtype) -> dict:
    """position_ids and a 4D attention mask for a forward over a draft tree (EAGLE-2, SpecInfer): the
    `num_keys` positions are the text, then len(parents) tree nodes, each after its parent (parents[i],
    -1 for the text's last id); the forward's queries are the last `num_new` of them (the cache holds the
    rest). The text runs causally as ever; a node sits at the text's length + its depth − 1 and sees the
    text, its ancestors and itself, never a sibling's branch, so its logits are those that single steps
    along its own path give. Rival guesses are the one-level tree (every parent -1)."""
    num_text = num_keys - len(parents)
    positions = torch.arange(num_keys, device=device)  # (kv,)
    positions[num_text:] = num_text - 1 + to_device(node_depths(parents), device)
    sees = positions.new_ones(num_keys, num_keys, dtype=torch.bool).tril()  # (kv, kv) causal
    sees[num_text:, num_text:] = False
    for node, parent in enumerate(parents):  # a node sees what its parent sees among the nodes, and itself
        if parent >= 0:
            sees[num_text + node, num_text:] = sees[num_text + parent, num_text:]
        sees[num_text + node, num_text + node] = True
    sees = sees[num_keys - num_new :]  # (n_new, kv)
    # An additive float mask: every attention implementation (eager, sdpa) reads it the same way.
    mask = torch.zeros(sees.shape, dtype=dtype, device=device).masked_fill(~sees, torch.finfo(dtype).min)
    return {"position_ids": positions[num_keys - num_new :].view(1, -1), "attention_mask": mask.view(1, 1, num_new, -1)}


def layout_for(model, cache: DynamicCache, num_new: int, parents: Sequence[int]) -> dict:
    """The extra forward arguments when the trailing ids are tree nodes ({} for a plain causal forward)."""
    if not parents:
        return {}
    return tree_layout(cache.get_seq_length() + num_new, num_new, parents, model.device, model.dtype)


def forward_new_ids(model, all_ids: torch.Tensor, cache: DynamicCache, vocab_size: int, last_only: bool = False,
                    parents: Sequence[int] = ()) -> torch.Tensor:
    """Run the ids the cache has not seen yet; return their logits (n_new, vocab) in float32.

    Logits are sliced to the shared vocabulary: checkpoints pad their embedding matrices
    (Qwen's 151936 rows for a 151665-token tokenizer) and the padding must never be sampled.
    `last_only` (a prefill) computes the output head at the last position alone: (1, vocab).
    `parents`: the trailing ids are draft-tree nodes with these parents (tree_layout; rival guesses
    for one position are a one-level tree, every parent -1).
    """
    new_ids = all_ids[:, cache.get_seq_length() :]  # (1, n_new)
    if isinstance(cache, SlotCache):
        return run_rows(model, cache, new_ids, parents, last_only=last_only)[0][:, :vocab_size].float()
    keep = {"logits_to_keep": 1} if last_only else {}
    layout = layout_for(model, cache, new_ids.shape[1], parents)
    output = model(input_ids=new_ids, past_key_values=cache, use_cache=True, **keep, **layout)
    return output.logits[0, :, :vocab_size].float()  # (n_new, vocab)


def forward_new_hidden(model, all_ids: torch.Tensor, cache: DynamicCache | SlotCache,
                       parents: Sequence[int] = ()) -> torch.Tensor:
    """The final hidden states (n_new, d) of the ids the cache has not seen: a drafter that scores its own head
    rows (specviz.models.pairs.RowScorer) reads them instead of logits. `parents` as forward_new_ids takes them."""
    new_ids = all_ids[:, cache.get_seq_length() :]  # (1, n_new)
    if isinstance(cache, SlotCache):
        return run_hidden_rows(model, cache, new_ids, parents)
    layout = layout_for(model, cache, new_ids.shape[1], parents)
    return model.base_model(input_ids=new_ids, past_key_values=cache, use_cache=True, **layout).last_hidden_state[0]


def forward_new_ids_with_hidden(model, all_ids: torch.Tensor, cache: DynamicCache, vocab_size: int,
                                last_only: bool = False, layers: tuple[int, ...] = (),
                                parents: Sequence[int] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """forward_new_ids, also returning the final hidden states (n_new, d) that fed the output head,
    and after them those of `layers` (indices into the model's hidden_states): (n_new, d·(1+len(layers))).

    The same two steps a causal LM's forward takes (base model, then output head), so the
    logits are the very ones forward_new_ids gives; only drafters that read the target use it.
    """
    new_ids = all_ids[:, cache.get_seq_length() :]  # (1, n_new)
    if isinstance(cache, SlotCache):
        logits, hidden = run_rows(model, cache, new_ids, parents, layers=tuple(layers), last_only=last_only)
        return logits[:, :vocab_size].float(), hidden
    layout = layout_for(model, cache, new_ids.shape[1], parents)
    output = model.base_model(input_ids=new_ids, past_key_values=cache, use_cache=True, output_hidden_states=bool(layers),
                              **layout)
    logits, hidden = logits_and_states(model, output, tuple(layers), last_only)  # (1, n_out, vocab), (1, n_new, ·)
    return logits[0, :, :vocab_size].float(), hidden[0]


def target_forward(pair: ModelPair, drafter, all_ids: torch.Tensor, cache: DynamicCache,
                   last_only: bool = False, parents: Sequence[int] = ()) -> torch.Tensor:
    """The target's logits for the ids its cache lacks; a drafter that reads the target also gets
    the hidden states of those positions (the final ones, then those of the lower layers it names in
    `target_layers`), from this same forward (no extra target pass). `parents`: the trailing ids are
    draft-tree nodes (forward.tree_layout)."""
    if not drafter.reads_target:
        return forward_new_ids(pair.target, all_ids, cache, pair.vocab_size, last_only=last_only, parents=parents)
    start = cache.get_seq_length()
    logits, hidden = forward_new_ids_with_hidden(pair.target, all_ids, cache, pair.vocab_size, last_only=last_only,
                                                 layers=drafter.target_layers, parents=parents)
    drafter.observe_target(hidden, start)  # (n_new, d·(1+n)) for positions start..
    return logits


def top_probability(logits: torch.Tensor) -> torch.Tensor:
    """The largest softmax probability of one row of logits (1, n): exp(max − logsumexp), as a
    0-d tensor, so a GPU is not made to wait for it unless a threshold needs it now."""
    return torch.exp(logits.max() - torch.logsumexp(logits, dim=-1)).squeeze()
