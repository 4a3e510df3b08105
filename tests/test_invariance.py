"""Batch invariance: a k-token verify gives bitwise the logits of k 1-token steps along its rows' paths.

Asserted as an invariant (`torch.equal` on the logits), not by counting greedy runs that happened to
agree, over many context lengths, verify sizes, rival sets and tree shapes, in the lanes' slots and in
the forward transformers' generate() runs: then greedy speculative output equals the target alone by
construction, in bfloat16 and in float32 alike. The same checks run again in subprocesses with oneDNN
and torch held to other instruction sets, so one machine exercises several kernel families.
"""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch
from transformers import DynamicCache

from specviz.analysis.architectures import tiny_model
from specviz.analysis.bench import load_prompts
from specviz.analysis.selfcheck_measures import transformers_greedy
from specviz.analysis.trace import Trace
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import autoregressive_decode, speculative_decode
from specviz.decoding.forward import crop_cache, forward_new_ids, move_cache_positions
from specviz.models import fixed_rows, invariance, slots
from specviz.models.slots import SLOTS, SLOTS_LAYOUT, SlotCache
from specviz.models.loading import load_pair
from specviz.models.presets import ASSETS_DIR
from specviz.models.pairs import ModelPair
from specviz.models.int8 import cpu_supports
from specviz.models.precision import cpu_has_native_bf16
from specviz.models.precision import cpu_has_amx as amx_in_use  # AMX present and not held back by the host
from tests.tiny_models import ARCHITECTURES, DRAFT_NOISE, make_model, noisy_copy, random_prompts

COUNTS = (2, 4, 8)


def verify_and_steps(model, vocab_size: int, context_ids: torch.Tensor, new_ids: torch.Tensor,
                     num_rivals: int = 0, new_cache=DynamicCache) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of one forward over new_ids (its last `num_rivals` ids rival guesses for one position,
    as the engine sends them) and the same rows from 1-token forwards: each text id stepped in turn,
    each rival stepped alone at its position after the text."""
    context, num_text = context_ids.shape[1], new_ids.shape[1] - num_rivals
    all_ids = torch.cat([context_ids, new_ids], dim=1)  # (1, n + k)
    cache = new_cache()
    forward_new_ids(model, context_ids, cache, vocab_size)
    verify = forward_new_ids(model, all_ids, cache, vocab_size, parents=(-1,) * num_rivals)  # (k, vocab)
    crop_cache(cache, context)
    rows = [forward_new_ids(model, all_ids[:, : context + i + 1], cache, vocab_size) for i in range(num_text)]
    text_ids = all_ids[:, : context + num_text]
    for j in range(num_rivals):
        rival_id = new_ids[:, num_text + j : num_text + j + 1]
        rows.append(forward_new_ids(model, torch.cat([text_ids, rival_id], dim=1), cache, vocab_size))
        crop_cache(cache, context + num_text)
    return verify, torch.cat(rows)  # both (k, vocab)


def random_parents(num_nodes: int, generator: torch.Generator) -> tuple[int, ...]:
    """A random draft tree's parents (-1: the text's last id), each node after its parent."""
    return tuple(int(torch.randint(-1, node, (1,), generator=generator)) if node else -1 for node in range(num_nodes))


def tree_and_steps(model, vocab_size: int, text_ids: torch.Tensor, node_ids: torch.Tensor,
                   parents: tuple[int, ...], new_cache=DynamicCache) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of one forward over the text's last id and a tree of nodes (1 + N rows, as the engine
    verifies a tree: the cache holds the text but its last id) and the same rows from 1-token steps:
    the text's last id, then for each node the steps along its own path from the text."""
    num_text = text_ids.shape[1]
    cache = new_cache()
    forward_new_ids(model, text_ids[:, :-1], cache, vocab_size)
    verify = forward_new_ids(model, torch.cat([text_ids, node_ids], dim=1), cache, vocab_size, parents=parents)
    crop_cache(cache, num_text - 1)
    rows = [forward_new_ids(model, text_ids, cache, vocab_size)]  # (1, vocab)
    for node in range(len(parents)):
        path = path_to(parents, node)
        path_ids = torch.cat([text_ids, node_ids[:, path]], dim=1)  # (1, n + depth)
        for end in range(num_text + 1, path_ids.shape[1] + 1):
            last = forward_new_ids(model, path_ids[:, :end], cache, vocab_size)  # (1, vocab)
        rows.append(last)
        crop_cache(cache, num_text)
    return verify, torch.cat(rows)  # both (1 + N, vocab)


def path_to(parents: tuple[int, ...], node: int) -> list[int]:
    path = [node]
    while parents[path[0]] >= 0:
        path.insert(0, parents[path[0]])
    return path


def assert_tree_rows_match(model, vocab_size: int, generator: torch.Generator, context: int, num_nodes: int,
                           new_cache=DynamicCache) -> None:
    ids = torch.randint(0, vocab_size, (1, context + num_nodes), generator=generator)
    parents = random_parents(num_nodes, generator)
    verify, steps = tree_and_steps(model, vocab_size, ids[:, :context], ids[:, context:], parents, new_cache)
    assert torch.equal(verify, steps), (
        f"context {context}, tree {parents}: rows differ by {(verify - steps).abs().max().item():.3g}")


def slot_cache_for(model, capacity: int = 512):
    """A factory of the lanes' own cache (slots) for the row checks."""
    return lambda: SlotCache(model.config, capacity)


def assert_rows_match(model, vocab_size: int, seed: int, context_lengths=(5, 40), counts=COUNTS,
                      tree_sizes=(6, 12), new_cache=DynamicCache) -> None:
    generator = torch.Generator().manual_seed(seed)
    for context in context_lengths:
        for num_nodes in tree_sizes:
            assert_tree_rows_match(model, vocab_size, generator, context, num_nodes, new_cache)
        for count in counts:
            for num_rivals in (0, 3) if count >= 4 else (0,):
                ids = torch.randint(0, vocab_size, (1, context + count), generator=generator)
                verify, steps = verify_and_steps(model, vocab_size, ids[:, :context], ids[:, context:], num_rivals,
                                                 new_cache)
                assert torch.equal(verify, steps), (
                    f"context {context}, {count} tokens, {num_rivals} rivals: rows differ by "
                    f"{(verify - steps).abs().max().item():.3g}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bfloat16", "float32"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_verify_rounds_like_steps_on_every_architecture(arch, dtype):
    """In the lanes' slots and in the forward transformers' generate() runs (a DynamicCache), on every
    architecture the presets use: each row computed in one shape, so bitwise equal to steps."""
    target = make_model(arch, seed=3).to(dtype)
    pair = ModelPair.from_models(target, None)
    assert target.config._attn_implementation == pair.invariance.attention == SLOTS_LAYOUT
    assert pair.invariance.exact and pair.invariance.precision == str(dtype).removeprefix("torch.")
    with torch.inference_mode():
        assert_rows_match(target, pair.vocab_size, seed=ARCHITECTURES.index(arch), context_lengths=(5, 70),
                          new_cache=slot_cache_for(target))
        assert_rows_match(target, pair.vocab_size, seed=ARCHITECTURES.index(arch), context_lengths=(5, 70))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bfloat16", "float32"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_greedy_speculative_equals_the_baseline_with_and_without_rivals(arch, dtype):
    target = make_model(arch, seed=5)
    draft = noisy_copy(target, DRAFT_NOISE[arch], seed=6).to(dtype)
    target = target.to(dtype)
    pair = ModelPair.from_models(target, draft)
    for prompt_ids in random_prompts(4, pair.vocab_size, seed=7, max_len=14):
        config = DecodeConfig(max_new_tokens=20, stop_at_eos=False, drafter="model")
        baseline = Trace.from_events(autoregressive_decode(pair, prompt_ids, config)).token_ids
        for gamma, rivals, confidence in ((1, 0, 0.0), (4, 0, 0.0), (3, 2, 0.9), (6, 3, 0.99)):
            settings = DecodeConfig(gamma=gamma, rivals=rivals, draft_confidence=confidence, max_new_tokens=20,
                                    stop_at_eos=False, drafter="model")
            assert Trace.from_events(speculative_decode(pair, prompt_ids, settings)).token_ids == baseline


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bfloat16", "float32"])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_trees_accepted_path_moved_in_the_cache_reads_as_if_stepped(arch, dtype):
    """After a tree verify the accepted path's entries move to contiguous positions and the rest are
    dropped: the next forward then gives bitwise what it gives after plain steps along that path."""
    target = make_model(arch, seed=3).to(dtype)
    pair = ModelPair.from_models(target, None)
    generator = torch.Generator().manual_seed(5)
    parents = (-1, -1, 0, 1, 1, 3, 5, 2)
    path = path_to(parents, 6)  # [1, 3, 5, 6]: not the first branch, so entries really move
    text = torch.randint(0, pair.vocab_size, (1, 9), generator=generator)
    nodes = torch.randint(0, pair.vocab_size, (1, len(parents)), generator=generator)
    after = torch.randint(0, pair.vocab_size, (1, 2), generator=generator)
    with torch.inference_mode():
        cache = DynamicCache()
        forward_new_ids(target, text[:, :-1], cache, pair.vocab_size)
        forward_new_ids(target, torch.cat([text, nodes], 1), cache, pair.vocab_size, parents=parents)
        move_cache_positions(cache, [text.shape[1] + node for node in path], text.shape[1])
        crop_cache(cache, text.shape[1] + len(path))
        committed = torch.cat([text, nodes[:, path], after], 1)  # (1, n + depth + 2)
        moved = forward_new_ids(target, committed, cache, pair.vocab_size)  # (2, vocab)
        stepped_cache = DynamicCache()
        forward_new_ids(target, text[:, :-1], stepped_cache, pair.vocab_size)
        for end in range(text.shape[1], committed.shape[1] - 1):
            forward_new_ids(target, committed[:, :end], stepped_cache, pair.vocab_size)
        stepped = torch.cat([forward_new_ids(target, committed[:, :end], stepped_cache, pair.vocab_size)
                             for end in (committed.shape[1] - 1, committed.shape[1])])  # (2, vocab)
    assert cache.get_seq_length() == stepped_cache.get_seq_length() == committed.shape[1]
    assert torch.equal(moved, stepped)


def off_by_a_little_past_slot_zero(attend_rows):
    """An attention that rounds a row differently when it is not the call's first (as CPU SDPA did in float32
    on two threads, for batch entries 4–7): a kernel whose result depends on a row's place in the call."""
    def attend(*args):
        out = attend_rows(*args)
        return torch.cat([out[:, :1], out[:, 1:] * 1.01], dim=1)
    return attend


def test_the_check_fails_when_a_row_rounds_by_its_place_in_the_call(monkeypatch):
    """The check at load and the row test can fail: a row that rounds differently by its place is caught,
    and the page's words then call it a fault, not a guarantee."""
    monkeypatch.setattr(slots, "attend_rows", off_by_a_little_past_slot_zero(slots.attend_rows))
    target = make_model("llama", seed=3).to(torch.bfloat16)
    report = invariance.make_batch_invariant(target, 128, 128)
    assert report.by_construction and not report.bitwise and not report.exact and report.max_difference > 0
    assert "a fault to report" in report.summary() and "by construction" not in report.summary()
    with pytest.raises(AssertionError, match="rows differ"), torch.inference_mode():
        assert_rows_match(target, 128, seed=0, context_lengths=(5,), counts=(4,), new_cache=slot_cache_for(target))


def test_the_tree_check_fails_when_a_node_sits_at_the_wrong_place(monkeypatch):
    """A tree layout that puts each node at its index, not its depth (a chain's positions), is caught."""
    from specviz.decoding import forward

    target = make_model("llama", seed=3).to(torch.bfloat16)
    ModelPair.from_models(target, None)
    monkeypatch.setattr(forward, "node_depths", lambda parents: list(range(1, len(parents) + 1)))
    with pytest.raises(AssertionError, match="rows differ"), torch.inference_mode():
        assert_tree_rows_match(target, 128, torch.Generator().manual_seed(0), context=5, num_nodes=8)


def test_padded_layers_compute_every_row_at_the_same_row_count():
    layer = torch.nn.Linear(1536, 576).to(torch.bfloat16)
    padded = invariance.padded(layer.forward)
    inputs = torch.randn(40, 1536).to(torch.bfloat16)
    full = layer(inputs[:SLOTS])  # (S, out): the one kernel every padded row sees
    for rows in (1, 3, SLOTS):
        assert torch.equal(padded(inputs[:rows]), full[:rows])
    assert torch.equal(padded(inputs[:10].view(2, 5, 1536)).view(10, -1)[8:], layer(inputs[8:16])[:2])  # chunks of P
    assert torch.equal(padded(inputs), layer(inputs))  # a prompt's own pass: the plain kernel


@pytest.mark.parametrize("config_change, words", [({"sliding_window": 16, "use_sliding_window": True}, "sliding"),
                                                  ({"attn_logit_softcapping": 30.0}, "soft-capped")],
                         ids=["sliding-window", "soft-capping"])
def test_a_model_slots_cannot_compute_is_told_not_guaranteed(config_change, words):
    """Slots compute plain softmax attention over every earlier key: a model that needs more keeps
    transformers' attention, and its pair says the lanes are not guaranteed to match, never 'by construction'."""
    target = make_model("qwen2", seed=3).to(torch.bfloat16)
    for name, value in config_change.items():
        setattr(target.config, name, value)
    report = invariance.make_batch_invariant(target, 128, 128)
    assert target.config._attn_implementation != SLOTS_LAYOUT and not report.by_construction and not report.exact
    assert report.summary().startswith("not guaranteed here") and words in report.summary()


@pytest.mark.parametrize("arch, words", [("falcon", "attention written outside transformers' attention interface"),
                                         ("stablelm", "attention written outside transformers' attention interface"),
                                         ("mixtral", "weights outside linear layers (MixtralExperts")])
def test_a_hub_architecture_slots_cannot_serve_runs_as_transformers_computes_it(arch, words):
    """A model whose attention is its own code never reaches slots (StableLM's, plugged in all the same, crashed
    in a padded layer; Falcon's ignored it, and the page said "not guaranteed here: , so"), and a mixture of
    experts multiplies each expert with however many rows chose it, outside any linear layer specviz pads (its
    check at load found a verify off from steps while the page called it exact by construction). Each now
    loads as transformers computes it, says why it is not guaranteed, and decodes in both lanes."""
    target = tiny_model(arch)
    pair = ModelPair.from_models(target, noisy_copy(target, 0.03), name=f"tiny-{arch}")
    report = pair.invariance
    assert target.config._attn_implementation != SLOTS_LAYOUT and not report.by_construction and not report.exact
    assert report.summary().startswith(f"not guaranteed here: this model has {words}"), report.summary()
    assert not any(getattr(layer.forward, "specviz_padded", False) for layer in target.modules())
    config = DecodeConfig(gamma=3, max_new_tokens=12, stop_at_eos=False, drafter="model")
    for decode in (autoregressive_decode, speculative_decode):
        assert Trace.from_events(decode(pair, [5, 9, 17], config)).num_tokens == 12


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_cpu_linear_layers_run_packed_for_onednn_and_compute_as_before(dtype):
    """A CPU target's linear layers run oneDNN's packed kernel wherever oneDNN packs their dtype here (a cheap
    verify; F.linear reorders the weight at every call): the same products up to rounding, and the switch off
    leaves the target as transformers loads it."""
    target = make_model("llama", seed=3).to(dtype)
    reference = copy.deepcopy(target.model.layers[0].self_attn.q_proj)
    pair = ModelPair.from_models(target, None)
    layer = target.model.layers[0].self_attn.q_proj
    assert getattr(layer.forward, "specviz_packed", False) == invariance.onednn_packs(dtype)
    assert pair.invariance.exact
    inputs = torch.randn(3, 48).to(dtype)
    with torch.inference_mode():
        assert torch.allclose(layer(inputs).float(), reference(inputs).float(), atol=1e-5 if dtype is torch.float32 else 2e-2)
    plain = invariance.plain_copy(target)
    assert plain.config._attn_implementation == "sdpa"
    assert not any("forward" in vars(m) for m in plain.modules())


@pytest.mark.skipif(fixed_rows.rows_kernel() is None, reason="specviz's C kernel needs x86 with AVX2 and a compiler")
def test_onednns_copy_of_a_weight_is_made_only_for_calls_that_take_it():
    """Where the C kernel takes a float32 call's 4 rows (one thread), oneDNN's packed copy of each weight (as large
    as the weight) is not made at load, nor by a prompt's own pass (F.linear over the weight as loaded); the first
    decoding call under several threads makes it, and greedy lanes stay identical there too."""
    target = make_model("llama", seed=3)
    draft = noisy_copy(target, DRAFT_NOISE["llama"])
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        pair = ModelPair.from_models(target, draft)
        layers = [m for m in target.modules() if isinstance(m, torch.nn.Linear)]
        copies = [layer.forward.specviz_onednn_weight for layer in layers]
        assert copies and all(copy is not None and not copy.ready for copy in copies)
        prompt = random_prompts(1, target.config.vocab_size, seed=5, min_len=40, max_len=40)[0]  # past MAX_ROWWISE
        config = DecodeConfig(gamma=3, max_new_tokens=10, stop_at_eos=False, drafter="model")
        alone = Trace.from_events(autoregressive_decode(pair, prompt, config)).token_ids
        assert Trace.from_events(speculative_decode(pair, prompt, config)).token_ids == alone
        assert not any(copy.ready for copy in copies)
        torch.set_num_threads(2)  # a run under two threads: its 4-row calls take oneDNN's kernel
        several = Trace.from_events(autoregressive_decode(pair, prompt, config)).token_ids
        assert Trace.from_events(speculative_decode(pair, prompt, config)).token_ids == several
        assert all(copy.ready for copy in copies)
        # a target loaded while torch runs several threads has its copies made at load, outside any run's time
        loaded_so = make_model("llama", seed=3)
        ModelPair.from_models(loaded_so, None)
        assert all(m.forward.specviz_onednn_weight.ready for m in loaded_so.modules() if isinstance(m, torch.nn.Linear))
    finally:
        torch.set_num_threads(threads)


def test_a_layer_onednn_cannot_pack_keeps_its_own_forward_in_one_shape(monkeypatch):
    """Where oneDNN refuses to pack (bfloat16 on an AVX2-only CPU), a layer keeps transformers' forward, padded to
    the call's rows: still one shape, still exact."""
    def refuse(*args, **kwargs):
        raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx512bw, avx512vl and avx512dq")

    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", refuse)
    target = make_model("llama", seed=3).to(torch.bfloat16)
    pair = ModelPair.from_models(target, None)
    layer = target.model.layers[0].self_attn.q_proj
    assert not getattr(layer.forward, "specviz_packed", False) and getattr(layer.forward, "specviz_padded", False)
    assert pair.invariance.exact


def test_the_switch_leaves_targets_as_loaded(monkeypatch):
    monkeypatch.setenv(slots.SWITCH_ENV, "0")
    target = make_model("llama", seed=3).to(torch.bfloat16)
    pair = ModelPair.from_models(target, None)
    assert target.config._attn_implementation != SLOTS_LAYOUT and not pair.invariance.exact
    assert pair.invariance.summary().startswith("not guaranteed here: specviz's one-shape forward is switched off")


@pytest.fixture(scope="module")
def bf16_pair():
    return load_pair(precision="bfloat16")


def random_lengths(seed: int, num: int, edges: tuple[int, ...] = (63, 65), longest: int = 400) -> tuple[int, ...]:
    """Context lengths to check: `num` random ones (other seeds, other lengths), and `edges`: by default one just
    before a key block's edge (64) and one just past it."""
    generator = torch.Generator().manual_seed(seed)
    return edges + tuple(int(n) for n in torch.randint(1, longest, (num,), generator=generator))


def check_default_pair_rows(precision: str, seed: int, num_lengths: int, edges: tuple[int, ...] = (63, 65)) -> None:
    """The check that would have caught the AMX parting: on the default target, verify rows against steps
    along their paths at many context lengths, verify sizes (1–8 rows, rivals) and random trees (6 and 16
    nodes), in the lanes' slots and in the forward transformers' generate() runs."""
    pair = load_pair(precision=precision)
    assert pair.invariance.exact and pair.invariance.precision == precision, pair.invariance
    lengths = random_lengths(seed, num_lengths, edges)
    with torch.inference_mode():
        assert_rows_match(pair.target, pair.vocab_size, seed=seed, context_lengths=lengths, counts=(1, 2, 4, 6, 8),
                          tree_sizes=(6, 16), new_cache=slot_cache_for(pair.target, pair.context_length))
        assert_rows_match(pair.target, pair.vocab_size, seed=seed + 1, context_lengths=lengths[-2:], counts=(2, 8),
                          tree_sizes=(12,))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("precision", ["bfloat16", "float32"])
def test_the_default_pair_rounds_a_verify_like_steps(precision):
    # bfloat16 on a CPU without native bf16 runs in software, several times slower: fewer lengths there
    emulated = precision == "bfloat16" and not cpu_has_native_bf16()
    check_default_pair_rows(precision, seed=11, num_lengths=1 if emulated else 3)


def cpu_has_amx() -> bool:
    return cpu_supports("_is_amx_tile_supported")


def cpu_has_avx512() -> bool:
    return torch.backends.cpu.get_cpu_capability().upper().startswith(("AVX512", "AMX"))


# Instruction-set limits that make oneDNN, MKL and torch pick other kernel families on the same machine:
# AVX-512 with bf16 but no AMX (an Intel AMX machine then computes as an AMD EPYC does), and AVX2 only.
KERNEL_FAMILIES = {  # (the limits, the precisions checked under them, the CPU whose kernels the limits change)
    "avx512-bf16-no-amx": ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, ("bfloat16", "float32"), ("AMX", cpu_has_amx)),
    # AVX2 only: float32 is the default there; bfloat16 would run in software, as the native check covers
    "avx2-only": ({"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
                  ("float32",), ("AVX-512", cpu_has_avx512)),
}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("family", KERNEL_FAMILIES, ids=list(KERNEL_FAMILIES))
def test_the_default_pair_rounds_a_verify_like_steps_with_other_kernel_families(family):
    """The same row check in a fresh process held to other instruction sets. A limit above what the CPU has
    changes no kernel: the check would rerun the native kernels, which the native test above already checks
    (on an AVX2-only CPU the bf16 half alone took ~6 minutes of the suite for nothing new), so it is skipped there
    and says why."""
    limits, precisions, (above, changes_kernels) = KERNEL_FAMILIES[family]
    if not changes_kernels():
        pytest.skip(f"this CPU has no {above}: {family}'s limits pick its native kernels, which "
                    "test_the_default_pair_rounds_a_verify_like_steps checks")
    code = ("import sys; from tests.test_invariance import check_default_pair_rows; "
            f"[check_default_pair_rows(p, seed=23, num_lengths=1, edges=(65,)) for p in {precisions!r}]; "
            "print('rows match')")
    import os

    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, **limits, "SPECVIZ_PRECISION": ""},
                            capture_output=True, text=True, timeout=850)
    assert result.returncode == 0 and "rows match" in result.stdout, result.stderr[-3000:]


# Prompts of our own that no drafter trained on and neither the examples nor the held-out file hold, chosen to differ
# in kind and length: a short question, arithmetic, a 278-character request, code, SQL and a letter to complete.
VARIED_KINDS = (1, 13, 34, 36, 38, 43)


@pytest.mark.timeout(600)
def test_greedy_lanes_write_the_target_alones_text_on_varied_prompts_in_the_default_precision():
    """End to end on this CPU's default precision (float32; bfloat16 is checked by name below): chains at γ 3 and 5
    and a tree of 16 write the target alone's tokens on prompts beyond the examples and the held-out file."""
    pair = load_pair()
    prompts = load_prompts(ASSETS_DIR / "prompts-varied.json")
    for index in VARIED_KINDS:
        ids = pair.encode(prompts[index].text, prompts[index].chat)
        baseline = Trace.from_events(autoregressive_decode(pair, ids, DecodeConfig(max_new_tokens=32))).token_ids
        for setup in (dict(gamma=3), dict(gamma=5), dict(gamma=3, tree=16)):
            spoken = Trace.from_events(speculative_decode(pair, ids, DecodeConfig(max_new_tokens=32, **setup)))
            assert spoken.token_ids == baseline, (pair.precision, prompts[index].text[:40], setup)


@pytest.mark.timeout(300)
@pytest.mark.skipif(not amx_in_use(), reason="the kernels this check must catch are oneDNN's AMX ones, not in use "
                                              "here (no AMX, or the host holds oneDNN below it)")
def test_the_row_check_catches_the_amx_kernels_on_the_target_as_transformers_loads_it():
    """The check is not a probe that happens to pass: on an AMX CPU the default target as transformers loads it
    (slots off) rounds a bfloat16 verify's rows unlike steps (oneDNN's AMX kernels block by row count: the path
    that parted ~30 % of greedy runs there), and the same check that passes on the slots fails on it."""
    with slots.slots_switched(False):
        pair = load_pair(precision="bfloat16")
    assert not pair.invariance.exact
    with torch.inference_mode(), pytest.raises(AssertionError, match="rows differ"):
        assert_rows_match(pair.target, pair.vocab_size, seed=11, context_lengths=random_lengths(11, 3),
                          counts=(1, 2, 4, 6, 8), tree_sizes=(6, 16))


@pytest.mark.timeout(600)
def test_the_default_pair_in_bfloat16_writes_the_target_alones_text_and_transformers(bf16_pair):
    """The page's first example parted at token 7-8 in bfloat16 before (4 of 4 runs); now every
    drafter's greedy lane, the target alone and transformers' generate() write the same tokens."""
    prompts = load_prompts()[:3]
    for prompt in prompts:
        ids = bf16_pair.encode(prompt.text, prompt.chat)
        config = DecodeConfig(max_new_tokens=40)
        baseline = Trace.from_events(autoregressive_decode(bf16_pair, ids, config)).token_ids
        assert transformers_greedy(bf16_pair, ids, config)[: len(baseline)] == baseline
        for drafter in ("head", "model"):
            spoken = Trace.from_events(speculative_decode(bf16_pair, ids, DecodeConfig(max_new_tokens=40, drafter=drafter)))
            assert spoken.token_ids == baseline, (prompt.text, drafter)


def test_a_first_forward_over_prompt_and_drafts_reads_the_prompt_as_the_lanes_do():
    """transformers' assisted generation reads the prompt and its first drafts in one forward; inside
    prompt_apart that forward is the lanes' prompt pass, then decoding rows, so its logits are the lanes'
    bitwise. Outside it the same call is one forward over every id (the shape that parted at token 7)."""
    target = make_model("llama", seed=3).to(torch.bfloat16)
    ModelPair.from_models(target, None)
    vocab = target.config.vocab_size
    seen: list[int] = []
    target.model.register_forward_pre_hook(lambda module, args, kwargs: seen.append(kwargs["input_ids"].shape[1]),
                                           with_kwargs=True)
    num_prompt = slots.MAX_ROWWISE + 8  # a prompt's own pass: more rows than decoding forwards have
    ids = torch.randint(0, vocab, (1, num_prompt + 4), generator=torch.Generator().manual_seed(1))  # (1, n + 4)
    with torch.inference_mode():
        target(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=DynamicCache(), use_cache=True)
        assert seen == [num_prompt + 4]
        seen.clear()
        with invariance.prompt_apart(num_prompt):
            split = target(input_ids=ids, attention_mask=torch.ones_like(ids), past_key_values=DynamicCache(),
                           use_cache=True).logits[0, :, :vocab].float()  # (1 + 4, vocab)
            later = target(input_ids=ids[:, -1:], past_key_values=DynamicCache(), use_cache=True)  # not a prompt: as is
        assert seen == [num_prompt, 4, 1] and later.logits.shape[1] == 1
        lanes_cache = SlotCache(target.config, 64)
        first = forward_new_ids(target, ids[:, :num_prompt], lanes_cache, vocab, last_only=True)  # (1, vocab)
        rest = forward_new_ids(target, ids, lanes_cache, vocab)  # (4, vocab)
    assert split.shape == (5, vocab) and torch.equal(split, torch.cat([first, rest]))


def test_the_row_check_fails_on_linear_layers_that_round_by_their_row_count(monkeypatch):
    """Without row blocks of one size, a linear kernel chosen by the row count (MKL's in float32, oneDNN's on AMX)
    makes a verify's rows differ from steps' in the forward transformers' generate() runs: the check catches it."""
    def unblocked(plain_forward, block=SLOTS):
        def forward(inputs):
            out = plain_forward(inputs)
            return out * 1.01 if inputs.shape[:-1].numel() > 1 else out  # rounds otherwise past one row
        forward.specviz_padded = True
        return forward

    monkeypatch.setattr(invariance, "padded", unblocked)
    target = make_model("llama", seed=3).to(torch.bfloat16)
    ModelPair.from_models(target, None)
    with pytest.raises(AssertionError, match="rows differ"), torch.inference_mode():
        assert_rows_match(target, 128, seed=0, context_lengths=(5,), counts=(4,), tree_sizes=())


def test_every_decoding_product_on_a_cpu_has_the_calls_rows(monkeypatch):
    """On a CPU a call has call_rows rows (4), and every linear product of a step, a verify of 6 (two calls) and
    generate()'s forwards has exactly that many (through oneDNN's packed kernel, or F.linear where oneDNN cannot
    pack here): the one shape, at a few rows' cost."""
    rows = slots.call_rows(torch.device("cpu"))
    target = make_model("llama", seed=3).to(torch.bfloat16)
    ModelPair.from_models(target, None)
    seen: list[int] = []
    linear, pointwise = torch.nn.functional.linear, torch.ops.mkldnn._linear_pointwise
    with torch.inference_mode():
        cache = SlotCache(target.config, 64)
        forward_new_ids(target, torch.arange(3, 8).view(1, -1), cache, 128)
        monkeypatch.setattr(torch.nn.functional, "linear", lambda x, w, b=None: (seen.append(x.shape[0]), linear(x, w, b))[1])
        monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise",
                            lambda x, *args: (seen.append(x.shape[0]), pointwise(x, *args))[1])
        forward_new_ids(target, torch.arange(3, 9).view(1, -1), cache, 128)  # a step
        forward_new_ids(target, torch.arange(3, 15).view(1, -1), cache, 128)  # a verify of 6: two calls
        target(input_ids=torch.arange(3, 6).view(1, -1), past_key_values=DynamicCache(), use_cache=True)
        monkeypatch.undo()
    assert rows < SLOTS and seen and set(seen) == {rows}
