"""What a round's event says beside its drafts (specviz.decoding.rounds tells each draft's q, p, r and
verdict): the step inspector's top-k of q, p and the residual.
Plain values, built once per round from the tensors the engine computed, so every consumer of the stream
reads the same numbers.
"""

from __future__ import annotations

from typing import Sequence

import torch

from specviz.decoding.events import PositionDetail

INSPECT_TOP_K = 8  # tokens shown per distribution in the step inspector


def top_pairs(probs: torch.Tensor, k: int = INSPECT_TOP_K, keep: tuple[int, ...] = ()) -> tuple[tuple[int, float], ...]:
    """The k likeliest (id, probability), then any id of `keep` not among them: the tokens this
    round actually drafted and emitted, whose probabilities the inspector must always show."""
    values, indices = probs.topk(min(k, probs.shape[-1]))
    pairs = list(zip(indices.tolist(), values.tolist()))
    shown = {token_id for token_id, _ in pairs}
    pairs += [(token_id, float(probs[token_id])) for token_id in dict.fromkeys(keep) if token_id not in shown]
    return tuple(pairs)


def describe_positions(draft_ids: Sequence[int], draft_probs: torch.Tensor, target_probs: torch.Tensor,
                       num_accepted: int, next_id: int, residual: torch.Tensor | None,
                       temperature_one: bool = False) -> tuple[PositionDetail, ...]:
    """Top-k of q (draft_probs (γ, vocab)), p (target_probs (γ+1, vocab): at each drafted position, then
    after the last) and the residual where the correction was drawn, for the step inspector, always with
    the drafted token and the target's own token (next_id) at their positions. A chain passes its drafts
    as verified; a tree round the chain its walk judged, each node picked (q one-hot on it). `temperature_one`:
    the rows are each model's softmax at temperature 1, not the rule's q and p (PositionDetail)."""
    details = []
    for i in range(target_probs.shape[0]):
        keep = tuple(draft_ids[i : i + 1]) + ((next_id,) if i == num_accepted else ())
        draft_top = top_pairs(draft_probs[i], keep=keep) if i < draft_probs.shape[0] else ()
        residual_top = top_pairs(residual, keep=keep) if residual is not None and i == num_accepted else ()
        details.append(PositionDetail(draft_top, top_pairs(target_probs[i], keep=keep), residual_top, temperature_one))
    return tuple(details)
