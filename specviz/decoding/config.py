"""A run's decoding settings: one dataclass shared by every lane, and the limits its checks enforce.

Beneath the engine and the drafters, which both read it: a drafter is built from the run's config.
"""

from __future__ import annotations

from dataclasses import dataclass

from specviz.catalogue import DEFAULT_DRAFTER, drafter_info

MAX_GAMMA = 16
MAX_RIVALS = 4  # rival guesses beside an unsure first draft: each more lengthens every such verify for rarer wins
# Tree nodes per round: the verify's rows (1 + N) stay within the row counts the batch-invariant
# forward computes in SLOTS-row calls (specviz.models.slots.MAX_ROWWISE), so every node rounds like a step.
MAX_TREE = 24
MAX_TEMPERATURE = 10.0  # far past any useful setting: at 10 sampling is all but uniform
MAX_NGRAM = 8  # longest n-gram prompt lookup matches; longer ones almost never recur
GAMMA_SCHEDULES = ("constant", "heuristic")


@dataclass(frozen=True)
class DecodeConfig:
    """Settings shared by both lanes, so the baseline is decoded exactly like the target lane."""

    gamma: int = 3  # tokens drafted per round (γ), the default pair's best; ignored by the baseline
    temperature: float = 0.0  # 0 = greedy; else logits / temperature
    top_k: int = 0  # keep the k most likely tokens; 0 = off
    top_p: float = 1.0  # nucleus: smallest set with mass ≥ top_p; 1 = off
    max_new_tokens: int = 64  # hard cap; a round never overshoots it
    seed: int = 0  # seeds the one torch.Generator all randomness flows through
    stop_at_eos: bool = True  # stop after the tokenizer's end-of-sequence token
    inspect: bool = False  # attach top-k of p, q and the residual to every round (step inspector)
    # False: where the draft ships head_rows.json, draft over those rows only (q = 0 elsewhere,
    # still exact, much cheaper at a 49k vocabulary); True: always the draft's whole output head.
    full_draft_head: bool = False
    drafter: str = DEFAULT_DRAFTER  # a name in catalogue.DRAFTER_INFO
    ngram: int = 3  # prompt lookup: longest trailing n-gram it looks for (it tries shorter ones too)
    # Draft only while sure: a round stops drafting after a token whose draft top probability (temperature 1)
    # is below this, since a verify of fewer tokens costs less; 0 = always draft γ (as transformers'
    # assistant_confidence_threshold). The default is the bench's pick on the default pair (README).
    draft_confidence: float = 0.5
    # "constant": every round drafts γ; "heuristic": transformers' schedule for assistant models,
    # which starts at γ, adds 2 after a round whose drafts were all accepted and takes 1 away otherwise.
    gamma_schedule: str = "constant"
    # Greedy only: where the drafter is unsure of a round's first token (below draft_confidence), also offer its
    # next `rivals` likeliest tokens there, judged in the same verify (a one-level draft tree, after EAGLE-2):
    # the target takes whichever is its own choice. 0 = off; the default is the bench's pick (README).
    rivals: int = 2
    # Draft a tree instead of a chain (EAGLE-2, specviz.decoding.tree): at most this many nodes, depth γ,
    # all checked in one target forward; 0 = a chain. Every drafter grows them (prompt lookup: earlier matches).
    # A tree round ignores `rivals` and `draft_confidence` (a chain's): its scores decide what to draft.
    tree: int = 0

    def validate(self) -> None:
        """Raise ValueError with a message a user can act on."""
        if not isinstance(self.gamma, int) or not 1 <= self.gamma <= MAX_GAMMA:
            raise ValueError(f"gamma (γ, tokens drafted per round) must be an integer from 1 to {MAX_GAMMA}, got {self.gamma!r}")
        if not 0 <= self.temperature <= MAX_TEMPERATURE:  # also rejects NaN and infinity
            raise ValueError(f"temperature must be from 0 (greedy) to {MAX_TEMPERATURE}, got {self.temperature!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top-k must be an integer ≥ 0 (0 turns it off), got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top-p must be in (0, 1] (1 turns it off), got {self.top_p!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max new tokens must be a positive integer, got {self.max_new_tokens!r}")
        drafter_info(self.drafter)  # raises for an unknown name, listing the known ones
        if not isinstance(self.ngram, int) or not 1 <= self.ngram <= MAX_NGRAM:
            raise ValueError(f"the n-gram size of prompt lookup must be an integer from 1 to {MAX_NGRAM}, got {self.ngram!r}")
        if self.gamma_schedule not in GAMMA_SCHEDULES:
            raise ValueError(f"unknown γ schedule {self.gamma_schedule!r}; choose one of: {', '.join(GAMMA_SCHEDULES)}")
        if not isinstance(self.rivals, int) or not 0 <= self.rivals <= MAX_RIVALS:
            raise ValueError(f"rival guesses must be an integer from 0 (off) to {MAX_RIVALS}, got {self.rivals!r}")
        if not isinstance(self.tree, int) or not 0 <= self.tree <= MAX_TREE:
            raise ValueError(f"the tree budget must be an integer from 0 (a chain) to {MAX_TREE} nodes, got {self.tree!r}")
        if not 0 <= self.draft_confidence < 1:  # also rejects NaN
            raise ValueError(f"the draft confidence threshold must be from 0 (off) to below 1, got {self.draft_confidence!r}")


def next_gamma(config: DecodeConfig, gamma: int, num_drafted: int, num_accepted: int) -> int:
    """The γ of the next round: config.gamma always, or transformers' heuristic schedule."""
    if config.gamma_schedule == "constant" or num_drafted == 0:
        return gamma
    return min(gamma + 2, MAX_GAMMA) if num_accepted == num_drafted else max(gamma - 1, 1)
