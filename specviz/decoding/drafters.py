"""Drafters: who proposes the γ tokens the target verifies.

A drafter is built per run from (pair, config, the run's probabilities function, the run's
generator), so every drafter shares the run's seeded randomness, and the speculative loop only
talks to the `Drafter` interface. Each is declared once in specviz.catalogue (name, factory,
words); the head drafter, which reads the target's hidden states, lives in specviz.decoding.head.

- `model`: the pair's draft model with its own KV cache (q = its sampling distribution);
- `prompt-lookup`: no second model; copies the tokens that followed the last earlier
  occurrence of the text's trailing n-gram (as transformers' `prompt_lookup_num_tokens` and
  vLLM's ngram proposer do); in a tree round every earlier occurrence offers its branch. q is one-hot on the copied token, so the same rejection rule
  accepts it with probability p(token) and the output stays exactly the target's.
"""

from __future__ import annotations

from typing import Callable, ClassVar, NamedTuple

import torch
from transformers import DynamicCache

from specviz.catalogue import drafter_info
from specviz.decoding.config import DecodeConfig
from specviz.decoding.forward import crop_cache, forward_new_hidden, forward_new_ids, top_probability
from specviz.decoding.sampling import ProbsFn, sample
from specviz.decoding.tree import DraftTree, grow_tree, keep_fed_path
from specviz.models.pairs import ModelPair
from specviz.models.rows import RowScorer, scorer_for
from specviz.models.slot_calls import given_back, pooled_cache, prepare_pooled, run_hidden_rows, run_rows
from specviz.models.slots import uses_slots


class Proposal(NamedTuple):
    """What a drafter proposes for one round; it may propose fewer tokens than asked (even none)."""

    draft_ids: torch.Tensor  # (γ',) with γ' ≤ the γ asked for
    draft_probs: torch.Tensor | None  # (γ', vocab) q at each drafted position (one-hot for copying drafters)
    num_forwards: int  # draft model forwards spent
    # The drafter's own top probability at each drafted position (its softmax at temperature
    # 1, whatever the run's temperature): how sure it was. None for drafters without a model.
    confidences: tuple[float, ...] | None = None
    stopped_unsure: bool = False  # drafting stopped before γ: confidence fell below the threshold
    # Rival guesses for the first drafted position (greedy, where the drafter was unsure of its top
    # guess): (token id, the drafter's probability), likeliest first, verified beside the first draft.
    rivals: tuple[tuple[int, float], ...] = ()
    # Greedy: the drafter's logits (1, vocab) at each drafted position. The rule's q is one-hot there, so the
    # inspector draws these instead (its softmax at temperature 1: how sure the drafter was of each token).
    draft_logits: tuple[torch.Tensor, ...] = ()


class Drafter:
    """The contract between the engine and a drafting strategy: every member the engine calls.

    A drafter declares what it can do as class attributes and overrides what it does; the defaults are a
    drafter that keeps nothing (no cache to roll back, close or reshape) and reads nothing of the target.
    Each one is built per run by `build`, so it shares the run's seeded generator and probabilities function.
    """

    grows_trees: ClassVar[bool] = False  # propose_tree drafts a tree (DecodeConfig.tree); else tree runs draft chains
    reads_target: ClassVar[bool] = False  # the engine hands it the target's hidden states from every target forward
    target_layers: tuple[int, ...] = ()  # with reads_target: the target's lower layers it reads, beside the last

    @classmethod
    def build(cls, pair: ModelPair, config: DecodeConfig, to_probs: ProbsFn, generator: torch.Generator) -> "Drafter":
        """The drafter for one run of `config` on `pair`."""
        raise NotImplementedError

    @classmethod
    def describe(cls, pair: ModelPair, config: DecodeConfig) -> str:
        """What drafts in a run of `config` on `pair`, said beside its figures (the CLI, bench records)."""
        return drafter_info(config.drafter).label

    def prefill(self, prompt_ids: torch.Tensor) -> int:
        """See the prompt (1, n); return the number of forwards spent."""
        return 0

    def propose(self, committed_ids: torch.Tensor, num_tokens: int) -> Proposal:
        """Draft up to num_tokens tokens after committed_ids (1, n)."""
        raise NotImplementedError

    def propose_tree(self, committed_ids: torch.Tensor, depth: int, budget: int) -> DraftTree:
        """A tree of at most `budget` nodes and depth `depth` after committed_ids (1, n); only where grows_trees."""
        raise NotImplementedError(f"{type(self).__name__} drafts chains only")

    def observe_target(self, hidden: torch.Tensor, start: int) -> None:
        """With reads_target: the target's hidden states (m, d·(1+layers)) for positions start..start+m-1."""

    def take_positions(self, sources: list[int], dest: int) -> None:
        """With reads_target: the states at positions `sources` (guesses the target took) move to dest, dest+1, …"""

    def keep_tree_path(self, tree: DraftTree, path: tuple[int, ...]) -> None:
        """After a tree round: keep what it computed for the accepted path while drafting, drop the other branches."""

    def rollback(self, num_committed: int) -> None:
        """Forget everything past the first num_committed tokens."""

    def close(self) -> None:
        """The run is over (or stopped): give back what it holds (a slot cache goes back to the pool)."""


DrafterFactory = Callable[[ModelPair, DecodeConfig, ProbsFn, torch.Generator], Drafter]


def draft_tokens(logits: torch.Tensor, confidence: torch.Tensor,
                 advance: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]], num_tokens: int,
                 to_probs: ProbsFn, generator: torch.Generator, vocab_size: int, threshold: float,
                 num_rivals: int = 0, keep_logits: bool = False) -> Proposal:
    """The drafting loop every model-based drafter shares: pick a token from the drafter's logits
    (1, vocab), then `advance(token)` gives the next logits and confidence, up to num_tokens.

    A round stops after a token the drafter was less sure of than `threshold` (0 = never): where a
    (γ+1)-token verify costs more than a step, drafts that will be rejected cost twice. The unsure
    token itself is still proposed (as transformers' threshold does): it is accepted about as
    often as the drafter was sure of it; the ones after it far less.

    Greedy, where that stop ends the round at its first token, the drafter's next `num_rivals`
    likeliest tokens are offered beside it (`rivals`): the target judges them in the same verify.

    `keep_logits` (greedy runs the inspector shows): each draft's logits are kept (Proposal.draft_logits).
    """
    rivals, asked = (), num_tokens
    if to_probs.greedy and num_rivals and threshold > 0 and float(confidence) < threshold:
        rivals = rival_guesses(logits, num_rivals)
        num_tokens = 1
    drafted, probs, confidences, kept_logits = [], [], [], []
    stopped_unsure = False
    for step in range(num_tokens):
        if to_probs.greedy:
            # Same token the one-hot q would give, without building q each step: drafting is the
            # hot loop, and q is built once per round below.
            next_id = logits.argmax(-1)  # (1,)
            if keep_logits:
                kept_logits.append(logits.clone())  # a copy: a drafter may reuse the buffer for its next row
        else:
            step_probs = to_probs(logits)  # (1, vocab)
            next_id = sample(step_probs, generator)  # (1,)
            probs.append(step_probs)
        drafted.append(next_id)
        confidences.append(confidence)
        if step == num_tokens - 1:
            break
        if threshold > 0 and float(confidence) < threshold:
            stopped_unsure = True
            break
        logits, confidence = advance(next_id)
    draft_ids = torch.cat(drafted)  # (γ',)
    if to_probs.greedy:
        draft_probs = torch.nn.functional.one_hot(draft_ids, vocab_size).float()  # (γ', vocab)
    else:
        draft_probs = torch.cat(probs)  # (γ', vocab)
    return Proposal(draft_ids, draft_probs, len(drafted), tuple(torch.stack(confidences).tolist()),
                    stopped_unsure or (bool(rivals) and asked > 1), rivals, tuple(kept_logits))


def rival_guesses(logits: torch.Tensor, num_rivals: int) -> tuple[tuple[int, float], ...]:
    """The drafter's 2nd..(1+num_rivals)th likeliest tokens from logits (1, vocab), with their
    probabilities (softmax at temperature 1); tokens it cannot propose (-inf: outside its rows) never."""
    probs = logits[0].float().softmax(-1)  # (vocab,)
    values, indices = probs.topk(1 + num_rivals)  # (1+k,)
    return tuple((token_id, value) for token_id, value in zip(indices.tolist()[1:], values.tolist()[1:]) if value > 0)


class ModelDrafter(Drafter):
    """Drafts with a small causal LM and its own KV cache.

    With a scorer (its head rows, specviz.models.rows), only those rows of its output head are
    computed; q is then zero outside them, which keeps the output exactly the target's.
    """

    grows_trees = True

    def __init__(self, model, vocab_size: int, to_probs: ProbsFn, generator: torch.Generator,
                 scorer: RowScorer | None = None, confidence_threshold: float = 0.0, num_rivals: int = 0,
                 keep_logits: bool = False):
        self.model = model
        self.confidence_threshold = confidence_threshold
        self.num_rivals = num_rivals
        self.keep_logits = keep_logits  # for the inspector (DecodeConfig.inspect): draft_tokens' keep_logits
        self.vocab_size = vocab_size
        self.to_probs = to_probs
        self.generator = generator
        self.cache = DynamicCache()
        self.scorer = scorer  # the draft's head rows (specviz.models.rows), or None for its whole head

    @classmethod
    def build(cls, pair: ModelPair, config: DecodeConfig, to_probs: ProbsFn, generator: torch.Generator) -> "ModelDrafter":
        scorer = None
        if pair.draft_head_rows is not None and not config.full_draft_head:
            scorer = scorer_for(pair.draft_scorer, pair.draft, pair.draft_head_rows, pair.vocab_size)
        drafter = cls(pair.draft, pair.vocab_size, to_probs, generator, scorer, config.draft_confidence, config.rivals,
                      config.inspect)
        if uses_slots(pair.target):  # the draft runs in slots where its target does: graphed on CUDA, from the pool
            drafter.cache = pooled_cache(pair.draft, pair.context_length)
        return drafter

    @classmethod
    def describe(cls, pair: ModelPair, config: DecodeConfig) -> str:
        return f"draft model, {draft_head_variant(pair, config.full_draft_head)}"

    def close(self) -> None:
        """The run is over: a slot cache goes back to the pool, its graphs with it."""
        self.cache = given_back(self.model, self.cache)

    def prefill(self, prompt_ids: torch.Tensor) -> int:
        # Only the cache matters here: the head runs at the last position alone, not at every one.
        forward_new_ids(self.model, prompt_ids, self.cache, self.vocab_size, last_only=True)
        return 1

    def next_logits(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (1, vocab) for the token after input_ids (-inf outside head_rows when set),
        and the draft's top probability there at temperature 1 (its confidence)."""
        if self.scorer is None:
            logits = forward_new_ids(self.model, input_ids, self.cache, self.vocab_size)[-1:]  # (1, vocab)
            return logits, top_probability(logits)
        hidden = forward_new_hidden(self.model, input_ids, self.cache)  # (n_new, d)
        logits, row_logits = self.scorer(hidden[-1:])  # (1, vocab), (1, rows)
        return logits, top_probability(row_logits)  # the softmax over the rows is q's support anyway

    def propose(self, committed_ids: torch.Tensor, num_tokens: int) -> Proposal:
        device = committed_ids.device
        drafted_ids = committed_ids

        def advance(next_id: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            nonlocal drafted_ids
            drafted_ids = torch.cat([drafted_ids, next_id.view(1, 1)], dim=1)  # (1, n+1)
            logits, confidence = self.next_logits(drafted_ids)
            return logits.to(device), confidence

        logits, confidence = self.next_logits(committed_ids)
        return draft_tokens(logits.to(device), confidence, advance, num_tokens, self.to_probs, self.generator,
                            self.vocab_size, self.confidence_threshold, self.num_rivals, self.keep_logits)

    def propose_tree(self, committed_ids: torch.Tensor, depth: int, budget: int) -> DraftTree:
        """A draft tree after committed_ids (1, n) (specviz.decoding.tree): one forward per level over the
        whole frontier, under the tree's mask, in the draft's own cache after the text."""
        root_logits, _ = self.next_logits(committed_ids)  # (1, vocab); the cache now holds all n committed ids
        self.tree_start = self.cache.get_seq_length()
        fed_ids, fed_parents = committed_ids, []

        def expand(token_ids: list[int], parent_slots: list[int]) -> torch.Tensor:
            nonlocal fed_ids
            fed_ids = torch.cat([fed_ids, fed_ids.new_tensor([token_ids])], dim=1)  # (1, n + fed)
            fed_parents.extend(parent_slots)
            return self.level_logits(fed_ids, fed_parents).to(committed_ids.device)  # (K, vocab)

        return grow_tree(root_logits.to(committed_ids.device), expand, depth, budget)

    def level_logits(self, all_ids: torch.Tensor, parents: list[int]) -> torch.Tensor:
        """Logits (K, vocab) of the tree nodes the cache lacks (-inf outside head_rows when set)."""
        if self.scorer is None:
            return forward_new_ids(self.model, all_ids, self.cache, self.vocab_size, parents=parents)  # (K, vocab)
        return self.scorer(forward_new_hidden(self.model, all_ids, self.cache, parents))[0]  # (K, vocab)

    def keep_tree_path(self, tree: DraftTree, path: tuple[int, ...]) -> None:
        """Keep the accepted path's entries this draft computed while growing the tree, behind the text."""
        keep_fed_path(self.cache, self.tree_start, tree, path)

    def rollback(self, num_committed: int) -> None:
        crop_cache(self.cache, num_committed - 1)


def draft_head_variant(pair: ModelPair, full_draft_head: bool) -> str:
    """Which output head the draft model computed: said beside every figure of it."""
    if pair.draft_head_rows is None or full_draft_head:
        return f"full head ({pair.vocab_size} rows)"
    return f"head_rows.json ({len(pair.draft_head_rows)} of {pair.vocab_size} rows)"


def prepare_draft_graphs(pair: ModelPair, longest: int) -> int:
    """The draft model's graphs (slot_calls.prepare_graphs) for runs of up to `longest` positions: its logits and,
    for a scorer over its head rows, its hidden states, at every key width."""
    filler = torch.zeros(1, 1, dtype=torch.long, device=pair.device)  # (1, 1)
    steps = [lambda c: run_rows(pair.draft, c, filler), lambda c: run_hidden_rows(pair.draft, c, filler)]
    return prepare_pooled(pair.draft, pair.context_length, pair.device, longest, steps)


def find_continuation(ids: list[int], max_ngram: int, num_tokens: int) -> list[int]:
    """The tokens after the latest earlier occurrence of ids' trailing n-gram (longest n first).

    For n from max_ngram down to 1, look for the last n ids earlier in the sequence (the
    most recent match wins: it is most likely what the text is copying now) and return up to
    num_tokens ids that followed it; [] when no n-gram recurs.
    """
    found = find_continuations(ids, max_ngram, num_tokens)
    return found[0] if found else []


def find_continuations(ids: list[int], max_ngram: int, num_tokens: int) -> list[list[int]]:
    """Every earlier occurrence's continuation of the text's trailing n-gram, for the longest n that
    recurs, the latest occurrence first: the branches of a copying tree (the first is a chain's pick)."""
    length = len(ids)
    for n in range(min(max_ngram, length - 1), 0, -1):
        tail = ids[length - n :]
        found = [ids[start + n : start + n + num_tokens] for start in range(length - n - 1, -1, -1)
                 if ids[start : start + n] == tail]
        if found:
            return found
    return []


def copying_tree(branches: list[list[int]], budget: int, device: torch.device) -> DraftTree:
    """The branches merged where they agree (a trie: siblings differ, each node after its parent), at most
    `budget` nodes, earlier branches first; q is one-hot on every copied token, and no model gave it a probability."""
    token_ids, parents, child_of = [], [], {}  # child_of: (parent, token) → node
    for branch in branches:
        parent = -1
        for token_id in branch:
            if (parent, token_id) not in child_of:
                if len(token_ids) == budget:
                    break
                child_of[parent, token_id] = len(token_ids)
                token_ids.append(token_id), parents.append(parent)
            parent = child_of[parent, token_id]
    node_ids = torch.tensor(token_ids, dtype=torch.long, device=device)  # (N,)
    return DraftTree(node_ids, tuple(parents), None, (-1,) * len(token_ids), 0)


class PromptLookupDrafter(Drafter):
    """Copies from the prompt and the text so far; no model, no cache, nothing to roll back."""

    grows_trees = True

    def __init__(self, vocab_size: int, max_ngram: int):
        self.vocab_size = vocab_size
        self.max_ngram = max_ngram

    @classmethod
    def build(cls, pair: ModelPair, config: DecodeConfig, to_probs: ProbsFn, generator: torch.Generator) -> "PromptLookupDrafter":
        return cls(pair.vocab_size, config.ngram)

    @classmethod
    def describe(cls, pair: ModelPair, config: DecodeConfig) -> str:
        return f"prompt lookup (n-grams up to {config.ngram})"

    def propose(self, committed_ids: torch.Tensor, num_tokens: int) -> Proposal:
        copied = find_continuation(committed_ids[0].tolist(), self.max_ngram, num_tokens)
        draft_ids = torch.tensor(copied, dtype=torch.long, device=committed_ids.device)  # (γ',)
        draft_probs = torch.nn.functional.one_hot(draft_ids, self.vocab_size).float()  # (γ', vocab)
        return Proposal(draft_ids, draft_probs, 0)

    def propose_tree(self, committed_ids: torch.Tensor, depth: int, budget: int) -> DraftTree:
        """Several earlier matches as branches: the target checks them all in one pass."""
        branches = find_continuations(committed_ids[0].tolist(), self.max_ngram, depth)
        return copying_tree(branches, budget, committed_ids.device)
