"""The models' own forward and cache crop: what the engine's lanes and the drafters both run.

Kept beneath both, so the baseline lane never calls into the drafters for the target's step.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache


def crop_cache(cache: DynamicCache, length: int) -> None:
    """Keep the first `length` positions. transformers 5's crop takes a negative count to drop."""
    excess = cache.get_seq_length() - length
    if excess > 0:
        cache.crop(-excess)


def move_cache_position(cache: DynamicCache, source: int, dest: int) -> None:
    """Copy every layer's keys and values at position `source` to `dest`: a rival guess the target
    took keeps the entries its verify computed, at the position the text now has it."""
    for layer in cache.layers:
        layer.keys[..., dest, :] = layer.keys[..., source, :]  # (b, heads, seq, head_dim)
        layer.values[..., dest, :] = layer.values[..., source, :]


def rival_layout(num_cached: int, num_new: int, num_rivals: int, device: torch.device, dtype: torch.dtype) -> dict:
    """position_ids and a 4D attention mask for a forward whose last `num_rivals` ids are rival
    guesses for one position (a one-level tree, as EAGLE-2's draft trees): the ids before them run
    causally as ever; each rival sits at the same position and sees the text and itself, never
    another rival, so its logits are the ones a forward over the text and it alone would give."""
    num_text = num_new - num_rivals
    positions = torch.arange(num_cached, num_cached + num_new, device=device)  # (n_new,)
    positions[num_text:] = num_cached + num_text
    keys = torch.arange(num_cached + num_new, device=device)  # (kv,)
    sees = keys.view(1, -1) <= (num_cached + torch.arange(num_new, device=device)).view(-1, 1)  # (n_new, kv) causal
    sees[num_text:, num_cached + num_text :] = torch.eye(num_rivals, dtype=torch.bool, device=device)
    # An additive float mask: every attention implementation (eager, sdpa) reads it the same way.
    mask = torch.zeros(sees.shape, dtype=dtype, device=device).masked_fill(~sees, torch.finfo(dtype).min)
    return {"position_ids": positions.view(1, -1), "attention_mask": mask.view(1, 1, num_new, -1)}


def layout_for(model, cache: DynamicCache, num_new: int, num_rivals: int) -> dict:
    """The extra forward arguments when the last ids are rivals ({} for a plain causal forward)."""
    if not num_rivals:
        return {}
    return rival_layout(cache.get_seq_length(), num_new, num_rivals, model.device, model.dtype)


def forward_new_ids(model, all_ids: torch.Tensor, cache: DynamicCache, vocab_size: int, last_only: bool = False,
                    num_rivals: int = 0) -> torch.Tensor:
    """Run the ids the cache has not seen yet; return their logits (n_new, vocab) in float32.

    Logits are sliced to the shared vocabulary: checkpoints pad their embedding matrices
    (Qwen's 151936 rows for a 151665-token tokenizer) and the padding must never be sampled.
    `last_only` (a prefill) computes the output head at the last position alone: (1, vocab).
    `num_rivals`: the last ids are rival guesses for one position (rival_layout).
    """
    new_ids = all_ids[:, cache.get_seq_length() :]  # (1, n_new)
    keep = {"logits_to_keep": 1} if last_only else {}
    layout = layout_for(model, cache, new_ids.shape[1], num_rivals)
    output = model(input_ids=new_ids, past_key_values=cache, use_cache=True, **keep, **layout)
    return output.logits[0, :, :vocab_size].float()  # (n_new, vocab)


def forward_new_ids_with_hidden(model, all_ids: torch.Tensor, cache: DynamicCache, vocab_size: int,
                                last_only: bool = False, layers: tuple[int, ...] = (),
                                num_rivals: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """forward_new_ids, also returning the final hidden states (n_new, d) that fed the output head,
    and after them those of `layers` (indices into the model's hidden_states): (n_new, d·(1+len(layers))).

    The same two steps a causal LM's forward takes (base model, then output head), so the
    logits are the very ones forward_new_ids gives; only drafters that read the target use it.
    """
    new_ids = all_ids[:, cache.get_seq_length() :]  # (1, n_new)
    layout = layout_for(model, cache, new_ids.shape[1], num_rivals)
    output = model.base_model(input_ids=new_ids, past_key_values=cache, use_cache=True, output_hidden_states=bool(layers),
                              **layout)
    hidden = output.last_hidden_state  # (1, n_new, d)
    head_input = hidden[:, -1:] if last_only else hidden  # (1, n_out, d)
    logits = model.get_output_embeddings()(head_input)  # (1, n_out, vocab)
    if layers:
        hidden = torch.cat([hidden, lower_layer_states(output.hidden_states, layers)], dim=-1)  # (1, n_new, d·(1+n))
    return logits[0, :, :vocab_size].float(), hidden[0]


def lower_layer_states(hidden_states: tuple[torch.Tensor, ...], layers: tuple[int, ...]) -> torch.Tensor:
    """The states of `layers` (indices into a forward's hidden_states), side by side in that order:
    (b, n, d·len(layers)); the order a head that reads them (specviz.models.draft_head) expects,
    at run time and in its teacher pass alike."""
    return torch.cat([hidden_states[k] for k in layers], dim=-1)


def top_probability(logits: torch.Tensor) -> torch.Tensor:
    """The largest softmax probability of one row of logits (1, n): exp(max − logsumexp), as a
    0-d tensor, so a GPU is not made to wait for it unless a threshold needs it now."""
    return torch.exp(logits.max() - torch.logsumexp(logits, dim=-1)).squeeze()
