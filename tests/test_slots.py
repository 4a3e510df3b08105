"""Slots (specviz.models.slots): every decoding forward of the target in one shape, so a verify rounds like
a step by construction (trees and rivals included) and, on CUDA, each call is a graph captured once.

On a CPU the switch turns them on; graphs are tested with a stand-in (tests.graph_replay) that records the
operators a call runs and replays exactly those, on the same tensors with the same Python values, as a CUDA
graph does.
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch

from specviz.analysis.bench import load_prompts
from specviz.analysis.trace import Trace
from specviz.decoding.config import DecodeConfig
from specviz.decoding import drafters, engine
from specviz.decoding.engine import autoregressive_decode, decode_lanes, speculative_decode, warm_up
from specviz.models import fixed_rows, slot_calls, slots
from specviz.models.loading import load_pair
from specviz.models.pairs import ModelPair, RowScorer
from specviz.models.slots import SLOTS_LAYOUT, SlotCache, group_calls, key_width, plan_rows
from tests.graph_replay import ReplayGraph
from tests.test_head import with_head
from tests.test_host_time import rounds_and_reads
from tests.test_invariance import assert_rows_match, verify_and_steps
from tests.tiny_models import ARCHITECTURES, DRAFT_NOISE, make_model, noisy_copy, random_prompts


@pytest.fixture
def slots_on(monkeypatch):
    monkeypatch.setenv(slots.SWITCH_ENV, "1")


def slot_pair(arch: str, dtype: torch.dtype = torch.float32) -> ModelPair:
    """A tiny target and its noisy draft scoring its head rows only, the target in slots (the switch must be on)."""
    target = make_model(arch, seed=5)
    draft = noisy_copy(target, DRAFT_NOISE[arch], seed=6).to(dtype)
    pair = ModelPair.from_models(target.to(dtype), draft, draft_head_rows=torch.arange(3, 120))
    assert pair.target.config._attn_implementation == SLOTS_LAYOUT == pair.invariance.attention
    return pair


# ---- where slots and graphs are on -------------------------------------------------------------------

def test_slots_are_on_everywhere_and_graphs_on_cuda_except_on_zerogpu(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.delenv(slots.SWITCH_ENV, raising=False)
    assert slots.slots_wanted()
    monkeypatch.setenv(slots.SWITCH_ENV, "0")  # a comparison only: targets as transformers loads them
    assert not slots.slots_wanted()
    monkeypatch.delenv(slots.ZERO_GPU_ENV, raising=False)
    assert slot_calls.SlotPool.graphs_on(cuda) and not slot_calls.SlotPool.graphs_on(cpu)
    monkeypatch.setenv(slots.ZERO_GPU_ENV, "true")  # a call forked per run: no graph may outlive it
    assert not slot_calls.SlotPool.graphs_on(cuda)


# ---- which keys each row reads ---------------------------------------------------------------------

def test_a_verify_across_a_key_block_runs_as_calls_each_of_a_steps_shape():
    rows = plan_rows(60, 8)  # slots 60..67 read 61..68 keys: the 64-key block ends among them
    calls = group_calls(rows, block=64)
    assert [[row.slot for row in call] for call in calls] == [[60, 61, 62, 63], [64, 65, 66, 67]]
    for row in rows:  # each row reads the width a step at its place reads
        (step,) = plan_rows(row.slot, 1)
        assert key_width(row.num_keys, 64) == key_width(step.num_keys, 64) and row.position == step.position
    assert len(group_calls(plan_rows(3, 17), block=64)) == 3  # at most SLOTS rows a call


def test_where_the_width_cannot_reach_a_row_a_call_spans_a_key_blocks_edge():
    rows = plan_rows(62, 4)  # slots 62..65 read 63..66 keys: a step at 62 or 63 reads 64 keys, at 64 or 65 128
    assert [[row.slot for row in call] for call in group_calls(rows, block=64, per_call=4)] == [[62, 63], [64, 65]]
    (call,) = group_calls(rows, block=64, per_call=4, widths_matter=False)
    assert slots.call_width(call, 64) == 128 and slots.mixed_widths(call, 64)
    assert not slots.mixed_widths(call[2:], 64)
    # a tree's deeper node may read fewer keys than the one before it: the call reads its widest row's width
    tree = plan_rows(62, 3, parents=(-1, 0))  # slots 62, 63, 64 read 63, 64 and 65 keys
    assert slots.call_width(tree[:2], 64) == 64 and slots.call_width(list(reversed(tree)), 64) == 128


def verify_calls(pair: ModelPair, context: int, count: int) -> tuple[int, torch.Tensor, torch.Tensor]:
    """How many calls a verify of `count` ids after `context` (a prompt's own pass) made in a slot cache, its logits
    and a step's each."""
    made = []
    real_fill = slot_calls.fill_inputs
    ids = torch.randint(0, pair.vocab_size, (1, context + count), generator=torch.Generator().manual_seed(context))
    with pytest.MonkeyPatch.context() as patch, torch.inference_mode():
        patch.setattr(slot_calls, "fill_inputs", lambda inputs, rows, *args, **kwargs: made.append(len(rows))
                      or real_fill(inputs, rows, *args, **kwargs))
        cache = SlotCache(pair.target.config, pair.context_length)
        verify, steps = verify_and_steps(pair.target, pair.vocab_size, ids[:, :context], ids[:, context:],
                                         new_cache=lambda: cache)
    return len(made) - count, verify, steps  # the steps after it made one call each


@pytest.mark.skipif(not (fixed_rows.kernel_runs_here() and fixed_rows.c_compiler()),
                    reason="the width-free attention is fixed_rows' C kernel, which needs an x86 CPU with AVX2 and a compiler")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bfloat16", "float32"])
def test_on_a_cpu_a_verify_across_a_key_blocks_edge_is_one_call_only_where_the_kernel_attends(slots_on, monkeypatch,
                                                                                              dtype):
    pair = slot_pair("llama", dtype)
    calls, verify, steps = verify_calls(pair, 62, 4)  # rows at slots 62..65: a step at 64 reads the next block
    assert calls == 1 and torch.equal(verify, steps)
    monkeypatch.setenv(fixed_rows.SWITCH_ENV, "0")  # torch's attention products, whose sums may follow the width
    calls, verify, steps = verify_calls(pair, 62, 4)
    assert calls == 2 and torch.equal(verify, steps)
    # a call of two widths through torch's products is refused, not computed: nothing rounds by the width unseen
    monkeypatch.setattr(slot_calls, "widths_free", lambda cache: True)
    with pytest.raises(RuntimeError, match="several key widths"):
        verify_calls(pair, 62, 4)


def test_a_tree_node_reads_the_text_then_its_path_at_its_depth():
    rows = plan_rows(10, 5, parents=(-1, 0, 0, 1))  # the text's last id, then 4 nodes
    assert [(row.slot, row.position, row.prefix, row.extra) for row in rows] == [
        (10, 10, 11, ()), (11, 11, 11, (11,)), (12, 12, 11, (11, 12)), (13, 12, 11, (11, 13)),
        (14, 13, 11, (11, 12, 14))]
    with pytest.raises(ValueError, match="before its parent"):
        plan_rows(10, 3, parents=(1, -1))


# ---- exact by construction ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bfloat16", "float32"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_in_slots_a_verify_rounds_like_steps_trees_and_rivals_too(slots_on, arch, dtype):
    pair = slot_pair(arch, dtype)
    assert pair.invariance.exact and pair.invariance.padded_layers > 0  # every linear layer computes SLOTS rows
    new_cache = functools.partial(SlotCache, pair.target.config, pair.context_length)
    with torch.inference_mode():  # a context of 62 puts a verify's call across the CPU's 64-key block
        assert_rows_match(pair.target, pair.vocab_size, seed=ARCHITECTURES.index(arch), context_lengths=(5, 40, 62),
                          new_cache=new_cache)


SETTINGS = ((1, 0, 0.0, 0), (4, 0, 0.0, 0), (3, 2, 0.9, 0), (3, 0, 0.0, 6), (4, 0, 0.0, 12))  # γ, rivals, confidence, tree


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_in_slots_greedy_speculation_writes_the_target_alones_text(slots_on, arch):
    pair = slot_pair(arch, torch.bfloat16)
    for prompt_ids in random_prompts(3, pair.vocab_size, seed=7, max_len=14):
        config = DecodeConfig(max_new_tokens=20, stop_at_eos=False, drafter="model")
        baseline = Trace.from_events(autoregressive_decode(pair, prompt_ids, config)).token_ids
        for gamma, rivals, confidence, tree in SETTINGS:
            settings = dataclasses.replace(config, gamma=gamma, rivals=rivals, draft_confidence=confidence, tree=tree)
            assert Trace.from_events(speculative_decode(pair, prompt_ids, settings)).token_ids == baseline, settings


def test_in_slots_the_head_reads_the_targets_states_and_writes_its_text(slots_on):
    pair = with_head(slot_pair("llama"), scale=3.0, rows=torch.arange(3, 100), layers=(1,))
    for prompt_ids in random_prompts(3, pair.vocab_size, seed=3, max_len=20):  # prompts past SLOTS: a prompt pass
        config = DecodeConfig(max_new_tokens=24, stop_at_eos=False, drafter="head")
        baseline = Trace.from_events(autoregressive_decode(pair, prompt_ids, config)).token_ids
        for gamma, tree in ((3, 0), (4, 8)):
            trace = Trace.from_events(speculative_decode(pair, prompt_ids, dataclasses.replace(config, gamma=gamma, tree=tree)))
            assert trace.token_ids == baseline, (gamma, tree)


# ---- graphs: captured once, replayed, their outputs copied out ---------------------------------------

@pytest.fixture
def replayed_graphs(slots_on, monkeypatch):
    ReplayGraph.captured = []
    # The stand-in replays aten operators; a CPU's float32 kernel (specviz.models.fixed_rows, a ctypes call) is
    # none, and a GPU's graphs never run it: pairs loaded here keep oneDNN's linear layers
    monkeypatch.setenv(fixed_rows.SWITCH_ENV, "0")
    monkeypatch.setattr(slot_calls.POOL, "graphs_on", lambda device: True)
    monkeypatch.setattr(slot_calls, "capture", lambda call: (graph := ReplayGraph(call)) and slot_calls.Captured(graph, graph.outputs))
    yield ReplayGraph.captured
    # A graphed cache left in the pool would replay the stand-in's recording in later tests' runs (gathered keys,
    # oneDNN's layers) while their generate() computes as loaded: their caches go with the test
    for model, caches in list(slot_calls.POOL.free.items()):
        caches[:] = [cache for cache in caches if not cache.graphed]


def test_the_stand_in_replays_what_it_captured_as_a_cuda_graph_does():
    fixed, number = torch.zeros(3), [2.0]
    graph = ReplayGraph(lambda: (fixed * number[0] + 1,))
    fixed.fill_(5.0)
    number[0] = 10.0
    graph.replay()
    assert graph.outputs[0].tolist() == [11.0] * 3  # the fixed input's new values, the number as captured
    with pytest.raises(RuntimeError, match="not permitted when stream is capturing"):
        ReplayGraph(lambda: (fixed[fixed > 1],))  # a boolean index: its size is known on the host only


GRAPHS = 2 * 6 + 2 * 2  # the graphs a run of the test's pair captures (below)


def test_graphs_are_captured_at_warm_up_and_replayed_run_after_run(replayed_graphs, monkeypatch):
    pair = with_head(slot_pair("llama"), scale=3.0, rows=torch.arange(3, 100), layers=(1,))
    prompt_ids = random_prompts(1, pair.vocab_size, seed=3, min_len=50, max_len=50)[0]
    config = DecodeConfig(max_new_tokens=30, gamma=3, stop_at_eos=False, drafter="head")
    first = Trace.from_events(e for e in decode_lanes(pair, prompt_ids, config) if e.lane == "speculative")
    # 50 + 30 new + a round's drafts + 1 reach 2 key blocks of 64: 2 widths × 6 variants (the target alone; the
    # target with the states the head reads; the head over those states, and over its own predictions; the draft
    # model's logits, and its hidden states for its head rows), and the target's two variants again in its second
    # cache (the lanes take turns, each with a cache of its own)
    assert len(replayed_graphs) == GRAPHS
    assert len(slot_calls.POOL.free[pair.target]) == 2 and all(len(cache.graphs) == 4 for cache in slot_calls.POOL.free[pair.target])
    again = [Trace.from_events(decode(pair, prompt_ids, config)) for decode in (autoregressive_decode, speculative_decode)]
    assert len(replayed_graphs) == GRAPHS  # the pool handed back the same caches, their graphs with them
    assert first.token_ids == again[0].token_ids == again[1].token_ids
    # a tree of 12 verifies in two calls of one width: the first call's outputs must survive the second's replay
    tree = Trace.from_events(speculative_decode(pair, prompt_ids, dataclasses.replace(config, tree=12)))
    assert tree.token_ids == first.token_ids and len(replayed_graphs) == GRAPHS
    model = [Trace.from_events(speculative_decode(pair, prompt_ids, dataclasses.replace(config, drafter="model", tree=tree)))
             for tree in (0, 6)]
    assert model[0].token_ids == model[1].token_ids == first.token_ids and len(replayed_graphs) == GRAPHS
    for model_ in (pair.target, pair.head.body, pair.draft):
        slot_calls.POOL.free.pop(model_)
    slot_calls.POOL.graphs_on = lambda device: False  # (monkeypatched already: undone after the test)
    # the eager calls as the graphs computed them (each row's keys gathered: one control flow), not a CPU's key sets
    monkeypatch.setattr(slots, "shares_key_sets", lambda device, graphed=False: False)
    eager = Trace.from_events(speculative_decode(pair, prompt_ids, config))
    eager_model = Trace.from_events(speculative_decode(pair, prompt_ids, dataclasses.replace(config, drafter="model")))
    # each drafter drafted as without graphs: what it kept was copied out of a replay's outputs before the next one
    assert eager.token_ids == first.token_ids  # the replays wrote what eager calls write
    assert drafts_of(eager) == drafts_of(first) and eager.num_accepted > 0
    assert drafts_of(eager_model) == drafts_of(model[0]) and eager_model.num_accepted > 0


def test_the_heads_greedy_drafts_run_as_one_replay_and_are_the_steps_own(replayed_graphs, monkeypatch):
    """Where the head's calls are graphs, a greedy round's drafts after the first run as one replay
    (slot_calls.run_head_chain), read in one transfer: the same drafts, confidences, stops, verdicts and text as step
    by step (each step the same one-row call), where a chain would cross a key width stepping instead."""
    pair = with_head(slot_pair("llama"), scale=3.0, rows=torch.arange(3, 100), layers=(1,))
    pair.head_scorer = RowScorer.over_output_of(pair.target, pair.head_rows, pair.vocab_size)  # as a loaded pair's
    prompt_ids = random_prompts(1, pair.vocab_size, seed=3, min_len=20, max_len=20)[0]  # 20 + 30 + γ: one key width
    ran = []  # per chain asked for: whether one replay drafted it
    chain = drafters.run_head_chain

    def counted_chain(*args):
        result = chain(*args)
        ran.append(result is not None)
        return result

    monkeypatch.setattr(drafters, "run_head_chain", counted_chain)
    sure = []  # the drafts' confidences in the first run: the threshold is their median, so some chains are cut
    # the last as on a GPU, where reads wait: an unsure first draft and its rivals are read at once, before any chain
    for rivals, wait in ((0, False), (0, False), (2, False), (2, True)):
        monkeypatch.setattr(drafters, "reads_wait", lambda device: wait)
        confidence = float(torch.tensor(sure).median()) if sure else 0.0
        config = DecodeConfig(max_new_tokens=30, gamma=4, stop_at_eos=False, drafter="head", draft_confidence=confidence,
                              rivals=rivals)
        warm_up(pair, engine.longest_text(pair, len(prompt_ids), config), config.gamma - 1)
        ran.clear()
        chained_reads, chained = rounds_and_reads("draft_chain", pair, prompt_ids, config)
        assert ran.count(True) > 2, config
        with monkeypatch.context() as stepping:
            stepping.setattr(drafters.HeadDrafter, "chain_after", lambda self, predicted: None)
            stepped_reads, stepped = rounds_and_reads("draft_chain", pair, prompt_ids, config)
        # the same rounds; only the forwards counted differ (a chain drafts on past an unsure draft, then is cut)
        assert [dataclasses.replace(event, draft_s=0.0, verify_s=0.0, num_draft_forwards=0) for event in chained] == [
            dataclasses.replace(event, draft_s=0.0, verify_s=0.0, num_draft_forwards=0) for event in stepped], config
        assert any(event.gamma == config.gamma for event in chained)  # whole chains (the random head's are rejected:
        # test_the_default_pair_replayed_as_graphs… runs chains the target accepts)
        sure = sure or [node.draft_confidence for event in chained for node in event.nodes if node.draft_prob]
        if confidence:
            assert any(event.stopped_unsure for event in chained)  # cut chains were met
        # a chain round reads once (and, where rivals may be offered, the first draft's confidence before), not once a
        # step; a round of rivals as before (test_host_time: 1 where reads wait, else 3)
        assert len(chained_reads) == len(chained)
        chain_reads = [reads for reads, event in zip(chained_reads, chained) if event.shape == "chain"]
        assert max(chain_reads) == (2 if rivals else 1), config
        if confidence:  # (at 0 the loop reads every confidence at once after its steps too)
            assert sum(chained_reads) < sum(stepped_reads), config
    assert set(ran) == {True}
    # a chain that would cross a key width (64 keys a block on a CPU) is not run: the loop steps
    cache = slot_calls.pooled_cache(pair.head.body, pair.context_length)
    state, first = torch.zeros(1, pair.head.config.hidden_size), torch.zeros(1, dtype=torch.long)
    score = functools.partial(drafters.score_rows, pair.head_scorer)
    embed = pair.target.get_input_embeddings()
    cache.length = 62  # its steps would read 63, 64, 65 keys
    with torch.inference_mode():  # as runs replay the graphs (the stand-in writes inference tensors)
        assert slot_calls.run_head_chain(pair.head, embed, score, cache, state, first, 3) is None and cache.length == 62
        assert slot_calls.run_head_chain(pair.head, embed, score, cache, state, first, 2) is not None
    assert cache.length == 64


def test_the_gpu_runs_profile_replays_every_pooled_graph_alone_and_runs_stay_as_they_were(replayed_graphs):
    """The profile's graph timings (selfcheck_measures.graph_replays) replay a free cache's graphs back to back:
    each graph of each network once in the table, and the next run writes what the one before them wrote."""
    from specviz.analysis.selfcheck_measures import format_replays, graph_replays

    pair = with_head(slot_pair("llama"), scale=3.0, rows=torch.arange(3, 100), layers=(1,))
    prompt_ids = random_prompts(1, pair.vocab_size, seed=3, min_len=50, max_len=50)[0]
    config = DecodeConfig(max_new_tokens=30, gamma=3, stop_at_eos=False, drafter="head")
    before = Trace.from_events(e for e in decode_lanes(pair, prompt_ids, config) if e.lane == "speculative")
    replays = graph_replays(pair, repeats=3)
    assert sorted((entry["network"], entry["width"], entry["variant"]) for entry in replays) == sorted(
        {(network, width, str(variant)) for network, model in (("target", pair.target), ("head", pair.head.body),
                                                               ("draft model", pair.draft))
         for width, variant in slot_calls.POOL.free[model][0].graphs})
    assert len(replays) == 12 and len(replayed_graphs) == GRAPHS  # the table: one cache's graphs per network
    assert all(entry["replay_ms"] >= entry["launch_ms"] > 0 for entry in replays)
    assert len(format_replays(replays).splitlines()) == 1 + len(replays)
    assert Trace.from_events(speculative_decode(pair, prompt_ids, config)).token_ids == before.token_ids


def drafts_of(trace: Trace) -> list[tuple[int, ...]]:
    return [tuple(token.token_id for token in event.drafted) for event in trace.rounds]


def test_a_run_stopped_midway_gives_its_cache_back(replayed_graphs):
    pair = slot_pair("gpt2")
    config = DecodeConfig(max_new_tokens=20, stop_at_eos=False, drafter="model")
    events = speculative_decode(pair, [5, 6, 7], config)
    next(events), next(events)
    assert not slot_calls.POOL.free.get(pair.target)  # in use
    events.close()  # a Stop on the page
    (cache,) = slot_calls.POOL.free[pair.target]
    assert cache.length == 0 and cache.graphed


def test_a_capture_that_fails_leaves_the_calls_eager_and_says_why(replayed_graphs, monkeypatch):
    def refuse(call):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(slot_calls, "capture", refuse)
    monkeypatch.setattr(slot_calls, "GRAPHS", {"captured": 0, "failed": None})
    pair = slot_pair("qwen2")
    config = DecodeConfig(max_new_tokens=12, gamma=3, stop_at_eos=False, drafter="model")
    with pytest.warns(RuntimeWarning, match="running slots eagerly"):
        trace = Trace.from_events(e for e in decode_lanes(pair, [5, 6, 7], config) if e.lane == "speculative")
    baseline = Trace.from_events(autoregressive_decode(pair, [5, 6, 7], config))
    assert trace.token_ids == baseline.token_ids and trace.num_tokens == 12
    assert slot_calls.GRAPHS["failed"].startswith("RuntimeError: operation not permitted")
    assert not slot_calls.POOL.free[pair.target][0].graphed


# ---- the default pair ----------------------------------------------------------------------------------

def test_the_default_pair_in_slots_writes_the_target_alones_text(slots_on):
    pair = load_pair(precision="bfloat16")
    assert pair.invariance.bitwise and pair.invariance.attention == SLOTS_LAYOUT
    for prompt in load_prompts("assets/prompts-heldout.json")[:2]:
        prompt_ids = pair.encode(prompt.text, prompt.chat)
        config = DecodeConfig(max_new_tokens=24, gamma=3, drafter="head", stop_at_eos=False)
        baseline = Trace.from_events(autoregressive_decode(pair, prompt_ids, config)).token_ids
        for tree in (0, 6):
            trace = Trace.from_events(speculative_decode(pair, prompt_ids, dataclasses.replace(config, tree=tree)))
            assert trace.token_ids == baseline, (prompt.text[:40], tree)


def test_the_default_pair_replayed_as_graphs_drafts_and_writes_as_it_does_eagerly(replayed_graphs, monkeypatch):
    pair = load_pair(precision="bfloat16")
    prompt = load_prompts("assets/prompts-heldout.json")[0]
    prompt_ids = pair.encode(prompt.text, prompt.chat)
    settings = [DecodeConfig(max_new_tokens=20, gamma=3, drafter=drafter, tree=tree, stop_at_eos=False)
                for drafter, tree in (("head", 0), ("head", 6), ("model", 0))]
    monkeypatch.setattr(slot_calls.POOL, "graphs_on", lambda device: False)
    # eagerly, the very calls a graph holds (a GPU's, eager or graphed): each row over its gathered keys. A CPU's
    # eager calls share key sets (attend_sets), other products that agree with these only where the kernels happen
    # to (they parted at a draft under ATEN_CPU_CAPABILITY=avx2 … in bfloat16): each is exact, not each other
    monkeypatch.setattr(slots, "shares_key_sets", lambda device, graphed=False: False)
    # Both sides start from new caches. With the C kernels off (as here) and under the AVX2 limits, a head's caches
    # left by an earlier file's tree runs made one draft part (its text did not): history, not graphs, at issue
    forget_caches(pair)
    eager = [Trace.from_events(speculative_decode(pair, prompt_ids, config)) for config in settings]
    forget_caches(pair)  # the eager caches go: the next ones are graphed
    monkeypatch.setattr(slot_calls.POOL, "graphs_on", lambda device: True)
    for config, expected in zip(settings, eager):
        lanes = list(decode_lanes(pair, prompt_ids, config))  # warm-up captures, then every call replays
        for lane in ("baseline", "speculative"):
            assert Trace.from_events(e for e in lanes if e.lane == lane).token_ids == expected.token_ids, (lane, config)
        assert drafts_of(Trace.from_events(e for e in lanes if e.lane == "speculative")) == drafts_of(expected)
    assert replayed_graphs and expected.num_accepted > 0


def forget_caches(pair: ModelPair) -> None:
    for model in (pair.target, pair.head.body, pair.draft):
        slot_calls.POOL.free.pop(model, None)


def test_the_heads_drafts_do_not_depend_on_what_earlier_runs_left_in_its_pooled_cache(slots_on):
    pair = load_pair(precision="bfloat16")  # on a CPU its head is int8: each call's inputs rounded with one range
    first, other = (pair.encode(prompt.text, prompt.chat) for prompt in load_prompts("assets/prompts-heldout.json")[:2])
    config = DecodeConfig(max_new_tokens=16, gamma=3, drafter="head", stop_at_eos=False)
    slot_calls.POOL.free.pop(pair.head.body, None)
    fresh = drafts_of(Trace.from_events(speculative_decode(pair, first, config)))
    list(speculative_decode(pair, other, dataclasses.replace(config, max_new_tokens=40)))  # fills the same cache
    assert drafts_of(Trace.from_events(speculative_decode(pair, first, config))) == fresh


def test_the_warm_up_makes_a_cpu_caches_buffers_so_no_lane_pays_for_them():
    """Without graphs a cache makes its buffers (its whole capacity, zeroed) at its first write; the warm-up must do
    that write, or the first run's first lane (the target alone) pays for it in its timed prompt pass."""
    pair = slot_pair("llama")
    slot_calls.POOL.free.pop(pair.target, None)
    warm_up(pair, longest=40)
    (cache,) = slot_calls.POOL.free[pair.target]  # the cache the lanes will take, given back after the warm-up
    assert not cache.graphed and cache.length == 0
    assert len(cache.layers) == pair.target.config.num_hidden_layers
    assert all(layer.is_initialized and layer.keys.shape[2] >= cache.capacity for layer in cache.layers)
