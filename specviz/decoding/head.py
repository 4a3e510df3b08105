"""The head drafter: drafts with a DraftHead (specviz.models.draft_head) over the target's hidden states.

Within a round the head drafts on its own predicted features; after every verify the engine
hands it the target's true hidden states (from the verify that runs anyway: no extra target
pass), and the positions it predicted are replaced by them. Any q keeps the rejection rule
exact, so the output stays the target's.
"""

from __future__ import annotations

from typing import Sequence

import torch
from transformers import DynamicCache

from specviz.decoding.config import DecodeConfig
from specviz.decoding.drafters import Drafter, Proposal, draft_tokens
from specviz.decoding.forward import crop_cache, top_probability, tree_layout
from specviz.decoding.sampling import ProbsFn
from specviz.decoding.tree import DraftTree, grow_tree
from specviz.models.draft_head import DraftHead
from specviz.models.pairs import ModelPair
from specviz.models.rows import RowScorer, scorer_for
from specviz.models.slot_calls import given_back, pooled_cache, prepare_pooled, run_head_rows
from specviz.models.slots import SlotCache, uses_slots


class HeadDrafter(Drafter):
    """Drafts with a DraftHead over the target's hidden states; the engine feeds it those states.

    Positions 0..n-2 of the committed text have true target features (the target's cache holds
    committed[:-1]); the head's KV cache holds its layer's entries for the positions it has read
    with true features, so a round only feeds what the last verify added. Hence it reads nothing at the
    prompt (the target's prefill hands it the prompt's states) and keeps none of a tree's entries (they were
    read from predicted states; take_positions moves the accepted path's true ones).
    """

    grows_trees = True
    reads_target = True

    def __init__(self, head: DraftHead, target, scorer: RowScorer, vocab_size: int, to_probs: ProbsFn,
                 generator: torch.Generator, confidence_threshold: float = 0.0, num_rivals: int = 0,
                 keep_logits: bool = False):
        self.head = head
        self.target_layers = head.target_layers  # the target's lower layers it reads, besides the final one
        self.embed = target.get_input_embeddings()
        self.scorer = scorer  # the target's own output head, its head rows only (specviz.models.rows)
        self.vocab_size = vocab_size
        self.to_probs = to_probs
        self.generator = generator
        self.confidence_threshold = confidence_threshold
        self.num_rivals = num_rivals
        self.keep_logits = keep_logits  # for the inspector (DecodeConfig.inspect): draft_tokens' keep_logits
        self.cache: DynamicCache | SlotCache = DynamicCache()
        self.features: torch.Tensor | None = None  # (1, known, d·(1+n)): the target's true hidden states

    @classmethod
    def build(cls, pair: ModelPair, config: DecodeConfig, to_probs: ProbsFn, generator: torch.Generator) -> "HeadDrafter":
        scorer = scorer_for(pair.head_scorer, pair.target, pair.head_rows, pair.vocab_size)
        drafter = cls(pair.head, pair.target, scorer, pair.vocab_size, to_probs, generator, config.draft_confidence,
                      config.rivals, config.inspect)
        if uses_slots(pair.target):  # the head runs in slots where its target does: graphed on CUDA, from the pool
            drafter.cache = pooled_cache(pair.head.body, pair.context_length)
        return drafter

    @classmethod
    def describe(cls, pair: ModelPair, config: DecodeConfig) -> str:
        return f"{super().describe(pair, config)}, {len(pair.head_rows)} of {pair.vocab_size} output rows"

    def close(self) -> None:
        """The run is over: a slot cache goes back to the pool, its graphs with it."""
        self.cache = given_back(self.head.body, self.cache)

    def forward_head(self, features: torch.Tensor, next_ids: torch.Tensor, parents: Sequence[int] = ()) -> torch.Tensor:
        """The head's states (m, d) for features (1, m, F) and the next tokens (1, m) after its cache;
        `parents`: the trailing positions are tree nodes (forward.tree_layout), the last m of them new."""
        if isinstance(self.cache, SlotCache):
            return run_head_rows(self.head, self.embed, self.cache, features, next_ids, parents)
        start, num_new = self.cache.get_seq_length(), next_ids.shape[1]
        if parents:
            layout = tree_layout(start + num_new, num_new, parents, next_ids.device, self.head.body.norm.weight.dtype)
        else:
            layout = {"position_ids": torch.arange(start, start + num_new, device=next_ids.device).view(1, -1)}
        return self.head(features, self.embed(next_ids), self.cache, **layout)[0]  # (m, d)

    def observe_target(self, hidden: torch.Tensor, start: int) -> None:
        """The target's hidden states (m, d·(1+n)) for positions start..start+m-1: the final one, then
        the lower layers the head reads."""
        known = hidden.unsqueeze(0)  # (1, m, d·(1+n))
        self.features = known if self.features is None else torch.cat([self.features[:, :start], known], dim=1)

    def row_logits(self, predicted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Full-vocabulary logits (1, vocab), -inf outside the rows, and the head's top probability."""
        logits, row_logits = self.scorer(predicted)  # (1, vocab), (1, rows)
        return logits, top_probability(row_logits)

    def catch_up(self, committed_ids: torch.Tensor) -> torch.Tensor:
        """Read the true states the last verify added; return the predicted state at the last committed
        position (1, d), which scores the next token."""
        num_committed = committed_ids.shape[1]
        start = self.cache.get_seq_length()
        features = self.features[:, start : num_committed - 1]  # (1, m, d·(1+n))
        return self.forward_head(features, committed_ids[:, start + 1 : num_committed])[-1:]  # (1, d)

    def propose(self, committed_ids: torch.Tensor, num_tokens: int) -> Proposal:
        num_committed = committed_ids.shape[1]
        predicted = self.catch_up(committed_ids)  # (1, d)

        def advance(next_id: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            # the next input sits after the cache: the head's own prediction, no true state yet
            nonlocal predicted
            predicted = self.forward_head(predicted.unsqueeze(1), next_id.view(1, 1))  # (1, d)
            return self.row_logits(predicted)

        logits, confidence = self.row_logits(predicted)
        proposal = draft_tokens(logits, confidence, advance, num_tokens, self.to_probs, self.generator,
                                self.vocab_size, self.confidence_threshold, self.num_rivals, self.keep_logits)
        # Keep only what was read with true states: the verify's states replace the rest.
        crop_cache(self.cache, num_committed - 1)
        return proposal

    def propose_tree(self, committed_ids: torch.Tensor, depth: int, budget: int) -> DraftTree:
        """A draft tree (specviz.decoding.tree): one head forward per level over the whole frontier, each
        node reading its parent's predicted state and its own embedding, under the tree's mask."""
        num_committed = committed_ids.shape[1]
        root = self.catch_up(committed_ids)  # (1, d)
        predicted, fed_parents = [], []  # per fed slot: its predicted state (d,), its parent slot

        def expand(token_ids: list[int], parent_slots: list[int]) -> torch.Tensor:
            fed_parents.extend(parent_slots)
            inputs = torch.stack([root[0] if slot < 0 else predicted[slot] for slot in parent_slots])  # (K, d)
            out = self.forward_head(inputs.unsqueeze(0), committed_ids.new_tensor([token_ids]), fed_parents)  # (K, d)
            predicted.extend(out)
            return self.scorer(out)[0]  # (K, vocab)

        tree = grow_tree(self.row_logits(root)[0], expand, depth, budget)
        crop_cache(self.cache, num_committed - 1)  # its tree entries were read from predicted states: dropped
        return tree

    def take_positions(self, sources: list[int], dest: int) -> None:
        """The guesses the target took (a rival, a tree's accepted path): their true states (handed over
        from rows `sources` of the verify) become the states at dest, dest+1, …, where the text now has them."""
        self.features[:, dest : dest + len(sources)] = self.features[:, sources]

    def rollback(self, num_committed: int) -> None:
        if self.features is not None:
            self.features = self.features[:, : num_committed - 1]
        crop_cache(self.cache, num_committed - 1)


def prepare_head_graphs(pair: ModelPair, longest: int) -> int:
    """The head's graphs (slot_calls.prepare_graphs) for runs of up to `longest` positions: its catch-up over the
    target's states and its drafting over its own predictions, at every key width."""
    size = pair.head.config.hidden_size
    filler = torch.zeros(1, 1, dtype=torch.long, device=pair.device)  # (1, 1)
    embed = pair.target.get_input_embeddings()
    widths = (size * (1 + len(pair.head.target_layers)), size)  # the target's states, the head's own
    dtype = pair.target.dtype
    steps = [lambda c, w=w: run_head_rows(pair.head, embed, c, torch.zeros(1, 1, w, dtype=dtype, device=pair.device),
                                          filler) for w in widths]
    return prepare_pooled(pair.head.body, pair.context_length, pair.device, longest, steps)
