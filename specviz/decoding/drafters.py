"""Drafters: who proposes the γ tokens the target verifies.

A drafter is built per run from (pair, config, the run's probabilities function, the run's
generator), so every drafter shares the run's seeded randomness, and the speculative loop only
talks to the `Drafter` interface. Each is declared once in specviz.catalogue (name, factory,
words).

- `model`: the pair's draft model with its own KV cache (q = its sampling distribution);
- `head`: a DraftHead (specviz.models.draft_head) over the target's hidden states. Within a round it drafts on
  its own predicted features; after every verify the engine hands it the target's true hidden states (from the
  verify that runs anyway: no extra target pass), and the positions it predicted are replaced by them;
- `prompt-lookup`: no second model; copies the tokens that followed the last earlier occurrence of the text's
  trailing n-gram (as transformers' `prompt_lookup_num_tokens` and vLLM's ngram proposer do), in a tree round
  from every earlier occurrence. q is one-hot on the copied token, so the same rejection rule accepts it with
  probability p(token) and the output stays exactly the target's.
"""

from __future__ import annotations

import functools
from typing import Callable, ClassVar, NamedTuple, Sequence

import torch
from transformers import DynamicCache

from specviz.catalogue import drafter_info
from specviz.decoding.config import DecodeConfig
from specviz.decoding.forward import crop_cache, forward_new_hidden, forward_new_ids, top_probability, tree_layout
from specviz.decoding.sampling import ProbsFn, sample
from specviz.decoding.tree import DraftTree, grow_tree, keep_fed_path, read_top_children, top_children
from specviz.models.pairs import ModelPair, RowScorer, scorer_for
from specviz.models.slot_calls import (given_back, pooled_cache, prepare_pooled, run_head_chain, run_head_rows,
                                       run_hidden_rows, run_rows)
from specviz.models.slots import SlotCache, to_device, uses_slots


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
    first_id: int | None = None  # the first draft's id, where it was read off the device already (else None)


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
# A greedy drafter's next k drafts after a first pick (1,), without a host read: ids (k,), confidences (k,), logits
# (k, vocab); None where it cannot (the loop then steps)
ChainFn = Callable[[torch.Tensor, int], "tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None"]


def reads_wait(device: torch.device) -> bool:
    """Whether reading a value off this device waits for it (a GPU's queued kernels): there a round reads what it
    needs at once, even a figure it may not use; on a CPU a read costs nothing, so work that may not be needed is
    skipped instead."""
    return device.type != "cpu"


class NetworkDrafter(Drafter):
    """A drafter with a network of its own (the draft model, the head), drafting chains by `draft_tokens`, in a KV
    cache that runs in slots where its target does (graphed on CUDA, from the pool) and goes back when the run ends."""

    def __init__(self, pair: ModelPair, config: DecodeConfig, to_probs: ProbsFn, generator: torch.Generator,
                 body: torch.nn.Module):
        self.vocab_size = pair.vocab_size
        self.to_probs = to_probs
        self.generator = generator
        self.config = config
        self.body = body  # the network whose cache this is
        self.cache = pooled_cache(body, pair.context_length) if uses_slots(pair.target) else DynamicCache()

    @classmethod
    def build(cls, pair: ModelPair, config: DecodeConfig, to_probs: ProbsFn, generator: torch.Generator) -> "Drafter":
        return cls(pair, config, to_probs, generator)

    def close(self) -> None:
        self.cache = given_back(self.body, self.cache)

    def draft_tokens(self, logits: torch.Tensor, confidence: torch.Tensor,
                     advance: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]], num_tokens: int,
                     chain: ChainFn | None = None) -> Proposal:
        """The drafting loop: pick a token from the drafter's logits (1, vocab), then `advance(token)` gives the
        next logits and confidence, up to num_tokens. Greedy, a `chain` may draft all the rest at once
        (chained_proposal).

        A round stops after a token the drafter was less sure of than DecodeConfig.draft_confidence (0 = never):
        where a (γ+1)-token verify costs more than a step, drafts that will be rejected cost twice. The unsure token
        itself is still proposed (as transformers' threshold does): it is accepted about as often as the drafter was
        sure of it; the ones after it far less.

        Greedy, where that stop ends the round at its first token, the drafter's next DecodeConfig.rivals
        likeliest tokens are offered beside it (`rivals`): the target judges them in the same verify.

        With DecodeConfig.inspect (greedy runs the inspector shows), each draft's logits are kept (draft_logits).
        """
        to_probs, threshold, num_rivals = self.to_probs, self.config.draft_confidence, self.config.rivals
        rivals, asked = (), num_tokens
        # Each confidence is read off the device once (on a GPU a read waits for it): at its step where the stop
        # (or the rivals' check) needs it there, else with the rest after the loop.
        read: list[float] = []
        first_id = None  # the first draft's id on the host, where the rivals' read brought it along
        if to_probs.greedy and num_rivals and threshold > 0:
            if reads_wait(logits.device):  # one wait for the confidence, the first draft and the rivals alike
                children, (sure, first_id) = read_top_children(logits, 1 + num_rivals, confidence, logits.argmax())
                read.append(sure)
                first_id = int(first_id)
            else:  # reads are free here: the rivals' top-k only where the first draft is unsure
                read.append(float(confidence))
                children = top_children(logits, 1 + num_rivals) if read[0] < threshold else [[]]
            if read[0] < threshold:
                rivals = tuple(children[0][1:])  # its 2nd..(1+num_rivals)th likeliest
                num_tokens = 1
        if to_probs.greedy and chain is not None and num_tokens > 1:
            first = logits.argmax(-1)  # (1,)
            chained = chain(first, num_tokens - 1)
            if chained is not None:
                return self.chained_proposal(first, logits, confidence, chained, num_tokens)
        drafted, probs, confidences, kept_logits = [], [], [], []
        stopped_unsure = False
        for step in range(num_tokens):
            if to_probs.greedy:
                # Same token the one-hot q would give, without building q each step: drafting is the
                # hot loop, and q is built once per round below.
                next_id = logits.argmax(-1)  # (1,)
                if self.config.inspect:
                    kept_logits.append(logits.clone())  # a copy: a drafter may reuse the buffer for its next row
            else:
                step_probs = to_probs(logits)  # (1, vocab)
                next_id = sample(step_probs, self.generator)  # (1,)
                probs.append(step_probs)
            drafted.append(next_id)
            confidences.append(confidence)
            if step == num_tokens - 1:
                break
            if threshold > 0:
                if len(read) == step:
                    read.append(float(confidence))
                if read[step] < threshold:
                    stopped_unsure = True
                    break
            logits, confidence = advance(next_id)
        draft_ids = torch.cat(drafted)  # (γ',)
        if to_probs.greedy:
            draft_probs = torch.nn.functional.one_hot(draft_ids, self.vocab_size).float()  # (γ', vocab)
        else:
            draft_probs = torch.cat(probs)  # (γ', vocab)
        unread = confidences[len(read):]
        read += torch.stack(unread).tolist() if unread else []
        return Proposal(draft_ids, draft_probs, len(drafted), tuple(read),
                        stopped_unsure or (bool(rivals) and asked > 1), rivals, tuple(kept_logits), first_id)

    def chained_proposal(self, first: torch.Tensor, logits: torch.Tensor, confidence: torch.Tensor,
                         chained: tuple[torch.Tensor, torch.Tensor, torch.Tensor], num_tokens: int) -> Proposal:
        """A greedy chain's proposal from all num_tokens drafts, computed without a read between them (a `chain`:
        first's successors' ids (k,), confidences (k,), logits (k, vocab)) and read in one transfer, cut where the
        loop would have stopped: after the first draft less sure than the threshold. The drafts kept are the loop's
        own (each a step's argmax over the same states); the ones after the cut cost the device, not the host."""
        ids, confidences, chain_logits = chained
        # one transfer (a token id is exact in float64): the first id, then every draft's confidence
        values = torch.cat([first.double(), confidence.double().view(1), confidences.double()]).tolist()
        first_id, sure = int(values[0]), values[1:]
        threshold, num_drafted = self.config.draft_confidence, num_tokens
        if threshold > 0:
            num_drafted = next((step + 1 for step in range(num_tokens - 1) if sure[step] < threshold), num_tokens)
        draft_ids = torch.cat([first, ids[: num_drafted - 1]])  # (γ',): a copy (the chain's outputs are rewritten)
        draft_probs = torch.nn.functional.one_hot(draft_ids, self.vocab_size).float()  # (γ', vocab)
        kept_logits = ()
        if self.config.inspect:
            kept_logits = (logits.clone(), *(chain_logits[step : step + 1].clone() for step in range(num_drafted - 1)))
        return Proposal(draft_ids, draft_probs, num_tokens, tuple(sure[:num_drafted]), num_drafted < num_tokens, (),
                        kept_logits, first_id)


class ModelDrafter(NetworkDrafter):
    """Drafts with a small causal LM. With a scorer (its head rows, specviz.models.pairs.RowScorer), only those rows of its
    output head are computed; q is then zero outside them, which keeps the output exactly the target's."""

    grows_trees = True

    def __init__(self, pair: ModelPair, config: DecodeConfig, to_probs: ProbsFn, generator: torch.Generator):
        self.model = pair.draft
        self.scorer: RowScorer | None = None  # the draft's head rows, or None for its whole head
        if pair.draft_head_rows is not None and not config.full_draft_head:
            self.scorer = scorer_for(pair.draft_scorer, pair.draft, pair.draft_head_rows, pair.vocab_size)
        super().__init__(pair, config, to_probs, generator, pair.draft)

    @classmethod
    def describe(cls, pair: ModelPair, config: DecodeConfig) -> str:
        return f"draft model, {draft_head_variant(pair, config.full_draft_head)}"

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
        return self.draft_tokens(logits.to(device), confidence, advance, num_tokens)

    def propose_tree(self, committed_ids: torch.Tensor, depth: int, budget: int) -> DraftTree:
        """A draft tree after committed_ids (1, n) (specviz.decoding.tree): one forward per level over the
        whole frontier, under the tree's mask, in the draft's own cache after the text."""
        root_logits, _ = self.next_logits(committed_ids)  # (1, vocab); the cache now holds all n committed ids
        self.tree_start = self.cache.get_seq_length()
        fed_ids, fed_parents = committed_ids, []

        def expand(token_ids: list[int], parent_slots: list[int]) -> torch.Tensor:
            nonlocal fed_ids
            fed_ids = torch.cat([fed_ids, to_device([token_ids], fed_ids.device)], dim=1)  # (1, n + fed)
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


class HeadDrafter(NetworkDrafter):
    """Drafts with a DraftHead over the target's hidden states; the engine feeds it those states.

    Positions 0..n-2 of the committed text have true target features (the target's cache holds
    committed[:-1]); the head's KV cache holds its layer's entries for the positions it has read
    with true features, so a round only feeds what the last verify added. Hence it reads nothing at the
    prompt (the target's prefill hands it the prompt's states) and keeps none of a tree's entries (they were
    read from predicted states; take_positions moves the accepted path's true ones).
    """

    grows_trees = True
    reads_target = True

    def __init__(self, pair: ModelPair, config: DecodeConfig, to_probs: ProbsFn, generator: torch.Generator):
        self.head = pair.head
        self.target_layers = pair.head.target_layers  # the target's lower layers it reads, besides the final one
        self.embed = pair.target.get_input_embeddings()
        # the target's own output head, its head rows only
        self.scorer = scorer_for(pair.head_scorer, pair.target, pair.head_rows, pair.vocab_size)
        self.features: torch.Tensor | None = None  # (1, known, d·(1+n)): the target's true hidden states
        # A graph holds its scorer's weights by address: only the pair's own scorer, which lives as long as the pair
        # (and the head's caches, graphs and all), may be captured in a drafting chain; one built per run may not.
        self.chains = self.scorer is pair.head_scorer
        super().__init__(pair, config, to_probs, generator, pair.head.body)

    @classmethod
    def describe(cls, pair: ModelPair, config: DecodeConfig) -> str:
        return f"{super().describe(pair, config)}, {len(pair.head_rows)} of {pair.vocab_size} output rows"

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
        return score_rows(self.scorer, predicted)

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
        proposal = self.draft_tokens(logits, confidence, advance, num_tokens, self.chain_after(predicted))
        # Keep only what was read with true states: the verify's states replace the rest.
        crop_cache(self.cache, num_committed - 1)
        return proposal

    def chain_after(self, predicted: torch.Tensor) -> ChainFn | None:
        """Where the head's calls are CUDA graphs, its greedy drafts after the predicted state (1, d) in one replay
        (slot_calls.run_head_chain): on a GPU the host's work between steps, not the head's kernels, set drafting's
        pace (a step's graph replays in 0.16 ms on an H200; a round's drafting took 1.34 ms)."""
        if not (self.chains and isinstance(self.cache, SlotCache) and self.cache.graphed):
            return None
        return lambda first_id, num_steps: run_head_chain(self.head, self.embed, self.row_logits, self.cache,
                                                          predicted, first_id, num_steps)

    def propose_tree(self, committed_ids: torch.Tensor, depth: int, budget: int) -> DraftTree:
        """A draft tree (specviz.decoding.tree): one head forward per level over the whole frontier, each
        node reading its parent's predicted state and its own embedding, under the tree's mask."""
        num_committed = committed_ids.shape[1]
        root = self.catch_up(committed_ids)  # (1, d)
        predicted, fed_parents = [], []  # per fed slot: its predicted state (d,), its parent slot

        def expand(token_ids: list[int], parent_slots: list[int]) -> torch.Tensor:
            fed_parents.extend(parent_slots)
            inputs = torch.stack([root[0] if slot < 0 else predicted[slot] for slot in parent_slots])  # (K, d)
            out = self.forward_head(inputs.unsqueeze(0), to_device([token_ids], committed_ids.device), fed_parents)  # (K, d)
            predicted.extend(out)
            return self.scorer(out)[0]  # (K, vocab)

        tree = grow_tree(self.row_logits(root)[0], expand, depth, budget)
        crop_cache(self.cache, num_committed - 1)  # its tree entries were read from predicted states: dropped
        return tree

    def take_positions(self, sources: list[int], dest: int) -> None:
        """The guesses the target took (a rival, a tree's accepted path): their true states (handed over
        from rows `sources` of the verify) become the states at dest, dest+1, …, where the text now has them."""
        self.features[:, dest : dest + len(sources)] = self.features[:, to_device(sources, self.features.device)]

    def rollback(self, num_committed: int) -> None:
        if self.features is not None:
            self.features = self.features[:, : num_committed - 1]
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


def score_rows(scorer: RowScorer, predicted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A head's full-vocabulary logits (1, vocab) for its predicted state (1, d), -inf outside its rows, and its top
    probability (0-d)."""
    logits, row_logits = scorer(predicted)  # (1, vocab), (1, rows)
    return logits, top_probability(row_logits)


def prepare_head_graphs(pair: ModelPair, longest: int, chain_steps: int = 0) -> int:
    """The head's graphs (slot_calls.prepare_graphs) for runs of up to `longest` positions: its catch-up over the
    target's states and its drafting over its own predictions, at every key width; with `chain_steps`, its greedy
    drafting chains (run_head_chain) of 1 to that many steps, each ending at the width's last slot."""
    size = pair.head.config.hidden_size
    filler = torch.zeros(1, 1, dtype=torch.long, device=pair.device)  # (1, 1)
    embed = pair.target.get_input_embeddings()
    widths = (size * (1 + len(pair.head.target_layers)), size)  # the target's states, the head's own
    dtype = pair.target.dtype
    steps = [lambda c, w=w: run_head_rows(pair.head, embed, c, torch.zeros(1, 1, w, dtype=dtype, device=pair.device),
                                          filler) for w in widths]
    state = torch.zeros(1, size, dtype=dtype, device=pair.device)  # (1, d)

    def chain(cache: SlotCache, num_steps: int) -> None:
        cache.length -= num_steps - 1  # prepare_graphs set it for one row reading the width's last key
        run_head_chain(pair.head, embed, functools.partial(score_rows, pair.head_scorer), cache, state, filler[0],
                       num_steps)

    if pair.head_scorer is not None:  # as HeadDrafter.chains: only the pair's own scorer is captured
        steps += [functools.partial(chain, num_steps=num_steps) for num_steps in range(1, chain_steps + 1)]
    return prepare_pooled(pair.head.body, pair.context_length, pair.device, longest, steps)


def find_continuation(ids: list[int], max_ngram: int, num_tokens: int) -> list[int]:
    """Up to num_tokens ids after the latest earlier occurrence of ids' trailing n-gram; [] when none recurs."""
    found = find_continuations(ids, max_ngram, num_tokens)
    return found[0] if found else []


def find_continuations(ids: list[int], max_ngram: int, num_tokens: int) -> list[list[int]]:
    """Every earlier occurrence's continuation of the text's trailing n-gram, for the longest n (≤ max_ngram) that
    recurs, the latest occurrence first (most likely what the text is copying now): the branches of a copying
    tree (the first is a chain's pick)."""
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
    node_ids = to_device(token_ids, device)  # (N,)
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
        draft_ids = to_device(copied, committed_ids.device)  # (γ',)
        draft_probs = torch.nn.functional.one_hot(draft_ids, self.vocab_size).float()  # (γ', vocab)
        return Proposal(draft_ids, draft_probs, 0)

    def propose_tree(self, committed_ids: torch.Tensor, depth: int, budget: int) -> DraftTree:
        """Several earlier matches as branches: the target checks them all in one pass."""
        branches = find_continuations(committed_ids[0].tolist(), self.max_ngram, depth)
        return copying_tree(branches, budget, committed_ids.device)
