"""Draft trees: exact acceptance on a tree (sampling.accept_tree) against the exact distribution.

A toy Markov target over a few tokens: p0 at the root, then p(· | previous token). A tree round emits
its accepted path and the correction or bonus; the joint of the first two emitted tokens must be
p0(a)·p(b | a), with the children picked deterministically (top-k, one-hot q) and sampled from q
(SpecInfer's rule). A deliberately wrong rule is caught each time, so the tests have teeth.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from transformers import DynamicCache

import specviz.decoding.sampling as sampling
from specviz.analysis.bench import load_prompts
from specviz.analysis.selfcheck_measures import transformers_greedy
from specviz.analysis.trace import Trace
from specviz.catalogue import drafter_info, resolve
from specviz.decoding.config import DecodeConfig
from specviz.decoding.drafters import Drafter, Proposal, copying_tree, find_continuations
from specviz.decoding.engine import autoregressive_decode, speculative_decode
from specviz.decoding.rounds import draft_branches, draft_chain
from specviz.decoding.events import RoundEvent, event_from_dict, event_to_dict
from specviz.decoding.sampling import accept_tree
from specviz.decoding.tree import DraftTree, grow_tree
from specviz.models.loading import load_pair
from specviz.models.pairs import ModelPair
from tests.test_distribution import check_against_target, distribution_pair, exact_joint_of_three, sample_runs
from tests.test_head import with_head
from tests.tiny_models import ARCHITECTURES, DRAFT_NOISE, make_model, noisy_copy, random_prompts, tiny_pair
from tests.test_sampling import SIGNIFICANCE, chi_square_p_value, p_instead_of_residual

VOCAB = 6
NUM_DRAWS = 12000


def toy_markov(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(p0 (V,), transitions (V, V)) drawn from a Dirichlet: no zeros, no ties."""
    torch.manual_seed(seed)
    rows = torch.distributions.Gamma(torch.full((VOCAB + 1, VOCAB), 0.8), 1.0).sample()  # (V+1, V)
    rows = rows / rows.sum(-1, keepdim=True)
    return rows[0], rows[1:]


P0, TRANSITIONS = toy_markov(1)
Q0, Q_TRANSITIONS = toy_markov(2)  # the draft: another Markov chain, often wrong


def target_rows(node_ids: list[int]) -> torch.Tensor:
    """(1+N, V): p at the root, then p after each node (a Markov target looks at the last token only)."""
    return torch.stack([P0, *(TRANSITIONS[token] for token in node_ids)])


def first_two_emitted(node_ids: list[int], parents: tuple[int, ...], draft_probs, generator) -> int:
    """One tree round (and, if it emitted one token only, the next round's plain target token): the
    first two emitted tokens as one cell index a·V + b."""
    verdict = accept_tree(torch.tensor(node_ids), parents, draft_probs, target_rows(node_ids), generator)
    emitted = [node_ids[node] for node in verdict.path] + [verdict.next_id]
    if len(emitted) == 1:
        emitted.append(int(sampling.sample(TRANSITIONS[emitted[0]].unsqueeze(0), generator)))
    return emitted[0] * VOCAB + emitted[1]


def exact_joint() -> np.ndarray:
    return (P0[:, None] * TRANSITIONS).double().numpy().ravel()  # (V·V,)


# Deterministic children (the drafter's top-k, as EAGLE-2 picks them): a fixed tree, likeliest first.
FIXED_IDS = [int(i) for i in Q0.argsort(descending=True)[:3]]  # depth 1: three children of the root
FIXED_TREE_IDS = FIXED_IDS + [int(Q_TRANSITIONS[FIXED_IDS[0]].argmax()), int(Q_TRANSITIONS[FIXED_IDS[0]].argsort()[-2]),
                              int(Q_TRANSITIONS[FIXED_IDS[1]].argmax())]
FIXED_PARENTS = (-1, -1, -1, 0, 0, 1)


def deterministic_draws(num_draws: int) -> list[int]:
    generator = torch.Generator().manual_seed(0)
    return [first_two_emitted(FIXED_TREE_IDS, FIXED_PARENTS, None, generator) for _ in range(num_draws)]


def sampled_tree(generator: torch.Generator) -> tuple[list[int], tuple[int, ...], torch.Tensor]:
    """Three children of the root drawn i.i.d. from q0, two under each of the first two drawn from q
    after it (duplicates allowed, as the rule requires): ids, parents, each node's q (N, V)."""
    roots = sampling.sample(Q0.expand(3, VOCAB), generator).tolist()
    node_ids, parents, qs = list(roots), [-1, -1, -1], [Q0] * 3
    for parent in (0, 1):
        q = Q_TRANSITIONS[roots[parent]]
        node_ids += sampling.sample(q.expand(2, VOCAB), generator).tolist()
        parents += [parent, parent]
        qs += [q, q]
    return node_ids, tuple(parents), torch.stack(qs)


def sampled_draws(num_draws: int) -> list[int]:
    generator = torch.Generator().manual_seed(0)
    return [first_two_emitted(*sampled_tree(generator), generator) for _ in range(num_draws)]


def test_deterministic_children_follow_the_target():
    assert chi_square_p_value(deterministic_draws(NUM_DRAWS), exact_joint()) > SIGNIFICANCE


def test_deterministic_children_without_renormalising_are_caught(monkeypatch):
    """Trying the next child against the untouched p (no p′(x) := 0) over-emits the tried tokens."""
    monkeypatch.setattr(sampling, "without_token", lambda probs, token_id: probs)
    assert chi_square_p_value(deterministic_draws(NUM_DRAWS // 2), exact_joint()) < SIGNIFICANCE


def test_sampled_children_follow_the_target():
    assert chi_square_p_value(sampled_draws(NUM_DRAWS), exact_joint()) > SIGNIFICANCE


def test_sampled_children_with_the_wrong_residual_are_caught(monkeypatch):
    monkeypatch.setattr(sampling, "residual_distribution", p_instead_of_residual)
    assert chi_square_p_value(sampled_draws(NUM_DRAWS // 2), exact_joint()) < SIGNIFICANCE


def test_greedy_takes_the_longest_path_of_the_targets_own_picks():
    """One-hot p: the walk follows the target's argmax wherever a child has it, whatever the order."""
    ids = [3, 1, 2, 4, 5, 0]
    parents = (-1, -1, 0, 1, 1, 4)
    target = torch.zeros(7, VOCAB)
    target[0, 1] = 1  # root → 1 (node 1, the second child)
    target[2, 5] = 1  # after node 1 → 5 (node 4)
    target[5, 0] = 1  # after node 4 → 0 (node 5, a leaf)
    target[6, 2] = 1  # after the leaf: bonus 2
    target[[1, 3, 4], 0] = 1
    verdict = accept_tree(torch.tensor(ids), parents, None, target, torch.Generator().manual_seed(0))
    assert verdict.path == (1, 4, 5) and verdict.next_id == 2 and verdict.is_bonus
    target[5, 0], target[5, 3] = 0, 1  # after node 4 the target wants 3, which no child offers
    verdict = accept_tree(torch.tensor(ids), parents, None, target, torch.Generator().manual_seed(0))
    assert verdict.path == (1, 4) and verdict.next_id == 3 and not verdict.is_bonus
    assert torch.isnan(verdict.accept_probs[2])  # under the rejected node 0: never examined
    assert verdict.accept_probs.tolist()[:2] == [0, 1] and verdict.accept_probs[3] == 0  # node 3: tried, not the pick


# ---- growing a tree (EAGLE-2) -------------------------------------------------------------------


def peaked_logits(rows: list[list[float]]) -> torch.Tensor:
    """Logits whose softmax is the given probabilities (zeros → -inf)."""
    probs = torch.tensor(rows)
    return probs.log()


def test_grow_tree_expands_the_frontier_once_per_level_and_keeps_the_best_nodes_with_their_ancestors():
    """Root children a (0.6), b (0.3), c (0.1); below each, children of probability 0.9 / 0.1: the best
    4 nodes by path probability are a 0.6, a→0 0.54, b 0.3, b→0 0.27 (c 0.1 < 0.27 is left out), and
    the second level is one drafter call over the whole frontier."""
    calls = []

    def expand(token_ids: list[int], parent_slots: list[int]) -> torch.Tensor:
        calls.append((token_ids, parent_slots))
        return peaked_logits([[0.9, 0.1, 0, 0, 0, 0]] * len(token_ids))  # (K, V)

    root = peaked_logits([[0, 0, 0, 0.6, 0.3, 0.1]])
    tree = grow_tree(root, expand, depth=2, budget=4, width=3)
    assert calls == [([3, 4, 5], [-1, -1, -1])]  # the whole frontier at once, children of the root
    assert tree.node_ids.tolist() == [3, 4, 0, 0] and tree.parents == (-1, -1, 0, 1)
    assert tree.draft_probs == pytest.approx((0.6, 0.3, 0.9, 0.9)) and tree.num_forwards == 2
    assert tree.slots == (0, 1, -1, -1)  # the drafter fed a and b; their children not (depth γ reached)
    deeper = grow_tree(root, expand, depth=3, budget=4, width=3)
    assert deeper.depth == 3 and deeper.node_ids.tolist()[:2] == [3, 4]
    assert calls[-1][1] == [0, 1, 2]  # level 3: the best three of level 2 (slots of their parents a, a, b)


def test_a_level_that_cannot_enter_the_budget_is_not_drafted():
    calls = []

    def expand(token_ids, parent_slots):
        calls.append(token_ids)
        return peaked_logits([[0.5, 0.5, 0, 0, 0, 0]] * len(token_ids))

    tree = grow_tree(peaked_logits([[0, 0, 0, 0.5, 0.5, 0]]), expand, depth=5, budget=2, width=2)
    assert sorted(tree.node_ids.tolist()) == [3, 4] and len(calls) == 0 and tree.num_forwards == 1


# ---- tree rounds end to end ---------------------------------------------------------------------

TREE_SETTINGS = ((1, 3), (3, 4), (4, 8), (6, 16))  # (γ = the tree's depth, its budget of nodes)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bfloat16", "float32"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_greedy_tree_rounds_write_the_target_alones_text_and_transformers(arch, dtype):
    target = make_model(arch, seed=5)
    draft = noisy_copy(target, DRAFT_NOISE[arch], seed=6).to(dtype)
    pair = ModelPair.from_models(target.to(dtype), draft)
    for prompt_ids in random_prompts(3, pair.vocab_size, seed=7, max_len=14):
        config = DecodeConfig(max_new_tokens=20, stop_at_eos=False, drafter="model")
        baseline = Trace.from_events(autoregressive_decode(pair, prompt_ids, config)).token_ids
        assert transformers_greedy(pair, prompt_ids, config) == baseline
        for gamma, budget in TREE_SETTINGS:
            settings = dataclasses.replace(config, gamma=gamma, tree=budget)
            trace = Trace.from_events(speculative_decode(pair, prompt_ids, settings))
            assert trace.token_ids == baseline, (gamma, budget)
            assert all(event.is_tree for event in trace.rounds[:-1])  # tree rounds, not chains


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_greedy_tree_rounds_with_the_head_write_the_target_alones_text(arch):
    pair = with_head(tiny_pair(arch), scale=3.0, rows=torch.arange(3, 100))
    for prompt_ids in random_prompts(3, pair.vocab_size, seed=3):
        config = DecodeConfig(max_new_tokens=24, stop_at_eos=False, drafter="head")
        baseline = Trace.from_events(autoregressive_decode(pair, prompt_ids, config)).token_ids
        for gamma, budget in TREE_SETTINGS:
            trace = Trace.from_events(speculative_decode(pair, prompt_ids, dataclasses.replace(config, gamma=gamma, tree=budget)))
            assert trace.token_ids == baseline, (gamma, budget)


def test_after_tree_rounds_every_cache_holds_the_committed_text_only():
    """After each round: the target's cache and the draft's hold committed[:-1] at most, as a fresh
    forward over the committed text computes them (a path's entries moved to the wrong place would
    differ), and the head holds the target's true states of the committed text."""
    pair = with_head(tiny_pair("llama"), scale=3.0)
    prompt = random_prompts(1, pair.vocab_size, seed=5, min_len=6, max_len=6)[0]
    for drafter_name in ("model", "head"):
        config = DecodeConfig(gamma=4, tree=8, max_new_tokens=24, stop_at_eos=False, drafter=drafter_name)
        drafter = drafter_info(drafter_name)
        built, kept = [], []

        def factory(*args):
            built.append(resolve(drafter.drafter).build(*args))
            close = built[0].close

            def keep_then_close():  # the run gives its slot cache back to the pool, which empties it: read it first
                cache = built[0].cache
                length = cache.get_seq_length()
                kept.append((length, [layer.keys[..., :length, :].clone() for layer in getattr(cache, "layers", [])]))
                close()

            built[0].close = keep_then_close
            return built[0]

        events = list(speculative_decode(pair, prompt, config, drafter=factory))
        trace = Trace.from_events(events)
        assert any(0 < event.num_accepted for event in trace.rounds)
        committed = torch.tensor([prompt + trace.token_ids[:-1]])  # (1, n): all but the last token, which no cache saw
        if drafter_name == "model":
            (length, kept_keys), = kept
            assert 0 < length <= committed.shape[1]
            fresh = DynamicCache()
            pair.draft(input_ids=committed[:, :length], past_key_values=fresh, use_cache=True)
            assert len(kept_keys) == len(fresh.layers)
            for keys, expected in zip(kept_keys, fresh.layers):
                torch.testing.assert_close(keys, expected.keys, rtol=1e-4, atol=1e-4)
        else:
            output = pair.target.base_model(input_ids=committed)
            torch.testing.assert_close(built[0].features[0], output.last_hidden_state[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_tree_rounds_event_tells_the_tree(temperature):
    """Each node once, with its parent, depth and verdict: the accepted nodes are one path from the root,
    emitted = that path + the target's token (the tree's last entry), nodes below a rejected one are
    never examined; the event survives a save and load; τ counts every token of a target pass."""
    pair = tiny_pair("llama")
    prompt = random_prompts(1, pair.vocab_size, seed=2)[0]
    config = DecodeConfig(gamma=4, tree=8, max_new_tokens=30, stop_at_eos=False, drafter="model", temperature=temperature)
    trace = Trace.from_events(speculative_decode(pair, prompt, config))
    for event in trace.rounds:
        drafted, own = event.nodes[:-1], event.nodes[-1]
        assert len(drafted) <= 8 and max(node.depth for node in drafted) <= 4
        path = [i for i, node in enumerate(drafted) if node.verdict == "accepted"]
        assert [drafted[i].parent for i in path] == [-1, *path][: len(path)]  # one path from the root
        assert own.verdict in ("resample", "bonus") and own.parent == (path[-1] if path else -1)
        assert list(event.emitted_ids) == [drafted[i].token_id for i in path] + [own.token_id]
        for i, node in enumerate(drafted):
            if node.parent >= 0 and drafted[node.parent].verdict != "accepted":
                assert node.verdict == "unexamined"
            if node.verdict == "unexamined":
                assert node.accept_prob is None and node.r is None
            elif temperature == 0:  # the target's pick decides, p′(x) is 1 or 0, and no coin is drawn
                assert node.r is None and (node.accept_prob == 1.0) == (node.verdict == "accepted")
            else:  # the rule, as the event tells it: accepted iff r < p′(x), and p′(x) = p(x) for the first child
                assert (node.r < node.accept_prob) == (node.verdict == "accepted")
                first_child = next(j for j, other in enumerate(drafted) if other.parent == node.parent)
                assert i != first_child or node.accept_prob == pytest.approx(node.target_prob)
            assert node.depth == (1 if node.parent < 0 else drafted[node.parent].depth + 1)
        assert event_from_dict(json.loads(json.dumps(event_to_dict(event)))) == event
    assert any(event.next_kind == "resample" for event in trace.rounds)
    assert trace.tokens_per_target_forward == pytest.approx(
        sum(len(event.emitted_ids) for event in trace.rounds) / len(trace.rounds))
    assert trace.tokens_per_target_forward > 1  # some tree rounds kept drafts


@pytest.mark.parametrize("drafter", ["model", "head"])
def test_tree_runs_too_short_for_a_tree_end_cleanly(drafter):
    """One or two new tokens leave a round no room to draft: a plain target step, as for chains."""
    pair = with_head(tiny_pair("llama"), scale=3.0)
    for num_tokens in (1, 2, 3):
        config = DecodeConfig(tree=4, max_new_tokens=num_tokens, stop_at_eos=False, drafter=drafter)
        baseline = Trace.from_events(autoregressive_decode(pair, [5, 6, 7], config)).token_ids
        assert Trace.from_events(speculative_decode(pair, [5, 6, 7], config)).token_ids == baseline


@pytest.mark.parametrize("drafter", ["model", "head"])
def test_sampled_tree_rounds_follow_the_target(drafter):
    """T = 1 end to end: the first three tokens' joint against the target's exact one (tree of depth 2)."""
    pair = with_head(distribution_pair(), scale=4.0)
    settings = dict(temperature=1.0, top_k=0, top_p=1.0)
    tokens = sample_runs(pair, dict(settings, drafter=drafter, tree=4, draft_confidence=0.0), num_runs=1500,
                         max_rejection_share=1.01)
    p_values = check_against_target(tokens, exact_joint_of_three(pair, **settings))
    assert min(p_values) > SIGNIFICANCE / 3, p_values


@pytest.mark.timeout(900)
def test_the_default_pair_writes_the_target_alones_text_with_trees():
    """bfloat16 (this machine's default): both drafters' tree rounds, the target alone and transformers'
    generate() write the same tokens, and the trees keep more than one token per target pass."""
    pair = load_pair(precision="bfloat16")
    passes = []
    for prompt in load_prompts()[:2]:
        ids = pair.encode(prompt.text, prompt.chat)
        config = DecodeConfig(max_new_tokens=32)
        baseline = Trace.from_events(autoregressive_decode(pair, ids, config)).token_ids
        assert transformers_greedy(pair, ids, config)[: len(baseline)] == baseline
        for drafter in ("head", "model"):
            trace = Trace.from_events(speculative_decode(pair, ids, dataclasses.replace(config, drafter=drafter, tree=8)))
            assert trace.token_ids == baseline, (prompt.text, drafter)
            passes.append(trace.tokens_per_target_forward)
    assert min(passes) > 1, passes


def test_prompt_lookup_offers_every_earlier_match_as_a_branch():
    """The text's trailing n-gram [1, 2, 3] occurred twice before: both continuations become branches, the
    latest first (8 then 9 below the root); branches that begin alike share their first nodes."""
    ids = [1, 2, 3, 9, 4, 7, 1, 2, 3, 8, 4, 1, 2, 3]
    assert find_continuations(ids, max_ngram=3, num_tokens=2) == [[8, 4], [9, 4]]
    tree = copying_tree(find_continuations(ids, 3, 2), budget=8, device=torch.device("cpu"))
    assert tree.node_ids.tolist() == [8, 4, 9, 4] and tree.parents == (-1, 0, -1, 2)
    merged = copying_tree([[5, 6, 7], [5, 6, 2], [3]], budget=4, device=torch.device("cpu"))
    assert merged.node_ids.tolist() == [5, 6, 7, 2] and merged.parents == (-1, 0, 1, 1)  # budget: [3] left out


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_greedy_prompt_lookup_trees_write_the_target_alones_text(arch):
    pair = tiny_pair(arch)
    for prompt_ids in random_prompts(3, pair.vocab_size, seed=11, min_len=12, max_len=20):
        prompt_ids = prompt_ids + prompt_ids[:6] + prompt_ids[3:9]  # repeats, so lookups find branches
        config = DecodeConfig(max_new_tokens=24, stop_at_eos=False, drafter="prompt-lookup", ngram=2)
        baseline = Trace.from_events(autoregressive_decode(pair, prompt_ids, config)).token_ids
        trace = Trace.from_events(speculative_decode(pair, prompt_ids, dataclasses.replace(config, gamma=4, tree=8)))
        assert trace.token_ids == baseline
        parents = [[node.parent for node in event.nodes[:-1]] for event in trace.rounds]
        assert any(len(set(each)) < len(each) for each in parents)  # some rounds checked two branches at a node


def test_the_exactness_lab_and_step_mode_run_the_pages_tree():
    """Both teach a tree round now (the lab's wrong rule on a tree is typical acceptance, test_lab; step
    mode's stages, test_tree_view): a page set to a tree budget gives them trees."""
    from specviz.app.exactness_lab.draws import lab_config
    from specviz.app.step_mode.session import StepRun

    config = DecodeConfig(tree=8, gamma=3, max_new_tokens=12, stop_at_eos=False, drafter="model")
    assert lab_config(config, seed=1).tree == 8
    step = StepRun(tiny_pair("llama"), [5, 6, 7], config)
    events = step.start() + step.advance()
    assert any(getattr(event, "is_tree", False) for event in events)


def test_a_round_with_no_room_drafts_an_empty_tree_on_the_texts_device():
    """The one tree the engine makes itself: on a GPU a CPU tensor here broke every tree run's last round."""
    ids = torch.zeros(1, 5, dtype=torch.long, device="meta")  # (1, n): any device other than the CPU
    tree = draft_branches(None, ids, 0, 0, 8)
    assert tree.node_ids.device == ids.device and tree.node_ids.numel() == 0


class RivalsDrafter(Drafter):
    """Proposes one unsure draft with three rival guesses, as drafters.draft_tokens does when greedy."""

    def propose(self, committed_ids: torch.Tensor, num_tokens: int) -> Proposal:
        draft_ids = committed_ids.new_tensor([7])  # (1,)
        return Proposal(draft_ids, torch.nn.functional.one_hot(draft_ids, 10).float(), 1, (0.4,), True,
                        ((3, 0.3), (5, 0.2), (9, 0.1)))


def test_rival_guesses_are_the_one_level_tree_the_trees_walk_judges():
    """One mechanism: an unsure first draft and its rivals are a tree of siblings, the drafter's
    own pick first; they are cut to the room a round has, and with no room left for one it is a plain chain."""
    ids = torch.zeros(1, 4, dtype=torch.long)  # (1, n)
    tree = draft_chain(RivalsDrafter(), ids, 3, room=8)
    assert isinstance(tree, DraftTree) and tree.shape == "rivals" and tree.stopped_unsure
    assert tree.node_ids.tolist() == [7, 3, 5, 9] and tree.parents == (-1, -1, -1, -1)
    assert tree.draft_probs == (0.4, 0.3, 0.2, 0.1) and tree.num_forwards == 1
    assert draft_chain(RivalsDrafter(), ids, 3, room=2).node_ids.tolist() == [7, 3]
    chain = draft_chain(RivalsDrafter(), ids, 3, room=1)
    assert chain.shape == "chain" and chain.node_ids.tolist() == [7] and chain.parents == (-1,)
    assert chain.draft_probs == (0.4,) and chain.draft_rows.argmax(-1).tolist() == [7]


@pytest.mark.parametrize("tree, rivals", [(4, 0), (0, 3)])
def test_a_tree_round_records_the_inspectors_top_k_along_the_path_it_judged(tree, rivals):
    """Step inspector details for tree rounds and rival rounds alike: one position per judged node and one
    after the last; greedy, each model's softmax at temperature 1 (the drafter's probability of each node, not
    the rule's one-hot q), the target's top token where the round decided is its own token, and no residual (the
    correction is the target's pick); the rival round keeps its guesses as rivals, not drawn as a tree."""
    pair = tiny_pair("llama")
    prompt = random_prompts(1, pair.vocab_size, seed=2)[0]
    config = DecodeConfig(gamma=4, tree=tree, rivals=rivals, draft_confidence=0.9 if rivals else 0.0,
                          max_new_tokens=30, stop_at_eos=False, drafter="model", inspect=True)
    trace = Trace.from_events(speculative_decode(pair, prompt, config))
    judged = [event for event in trace.rounds if event.is_tree or event.guesses]
    assert judged, "no round drafted a tree or rivals: the test checks nothing"
    for event in judged:
        assert len(event.details) == event.gamma + 1
        for token, detail in zip(event.drafted, event.details):
            assert detail.temperature_one
            assert dict(detail.draft_top)[token.token_id] == pytest.approx(token.draft_confidence)
        assert event.details[event.num_accepted].target_top[0][0] == event.next_id
        assert not event.details[event.num_accepted].residual_top
        assert bool(event.guesses) == (not event.is_tree) == bool(rivals)
