"""The head drafter (specviz.decoding.drafters): it reads the target's hidden states from the forwards the
engine runs anyway, keeps its bookkeeping right across rounds and rollbacks, and never changes
the output: greedy identical to the target alone, sampled output distributed as the target's."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import DynamicCache

from specviz.catalogue import drafter_info
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import autoregressive_decode, speculative_decode
from specviz.decoding.forward import forward_new_ids, forward_new_ids_with_hidden
from specviz.models.compact import dequantize_rows, quantize_rows
from specviz.models.draft_head import DraftHead, head_config_for, load_head
from specviz.decoding.drafters import HeadDrafter, ModelDrafter
from specviz.decoding.sampling import ProbsFn
from specviz.analysis.trace import Trace
from tests.test_distribution import check_against_target, distribution_pair, exact_joint_of_three, sample_runs
from tests.test_sampling import SIGNIFICANCE
from tests.tiny_models import random_prompts, tiny_pair


def with_head(pair, seed: int = 0, rows: torch.Tensor | None = None, scale: float = 1.0, layers: tuple[int, ...] = ()):
    """The pair plus a random head (its layer's weights scaled so its guesses vary), reading `layers` of the target too."""
    torch.manual_seed(seed)
    head = DraftHead(head_config_for(pair.target.config, layers)).eval()
    with torch.no_grad():
        for parameter in head.body.parameters():
            if parameter.dim() > 1:
                parameter.mul_(scale)
        head.fc.weight.add_(0.3 * torch.randn_like(head.fc.weight))  # so the lower layers' part of fc is not zero
    head_rows = torch.arange(pair.vocab_size) if rows is None else rows
    return dataclasses.replace(pair, head=head, head_rows=head_rows)


def greedy_ids(events) -> list[int]:
    return Trace.from_events(events).token_ids


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_the_forward_with_hidden_states_gives_the_very_same_logits(arch):
    pair = tiny_pair(arch)
    ids = torch.tensor([random_prompts(1, pair.vocab_size, seed=3, min_len=9, max_len=9)[0]])  # (1, 9)
    for last_only in (True, False):
        plain = forward_new_ids(pair.target, ids, DynamicCache(), pair.vocab_size, last_only=last_only)
        logits, hidden = forward_new_ids_with_hidden(pair.target, ids, DynamicCache(), pair.vocab_size, last_only=last_only)
        assert torch.equal(plain, logits)
        assert hidden.shape == (9, pair.target.config.hidden_size)
        logits, wide = forward_new_ids_with_hidden(pair.target, ids, DynamicCache(), pair.vocab_size, last_only=last_only,
                                                   layers=(1, 0))
        assert torch.equal(plain, logits)
        states = pair.target.base_model(input_ids=ids, output_hidden_states=True).hidden_states
        torch.testing.assert_close(wide, torch.cat([hidden, states[1][0], states[0][0]], dim=-1))


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("gamma", [1, 3, 5])
@pytest.mark.parametrize("layers", [(), (1, 0)])
def test_greedy_with_the_head_equals_the_target_alone(arch, gamma, layers):
    pair = with_head(tiny_pair(arch), scale=3.0, layers=layers)
    for prompt in random_prompts(4, pair.vocab_size, seed=gamma):
        config = DecodeConfig(gamma=gamma, max_new_tokens=24, stop_at_eos=False, drafter="head", draft_confidence=0.0)
        assert greedy_ids(speculative_decode(pair, prompt, config)) == greedy_ids(autoregressive_decode(pair, prompt, config))


@pytest.mark.parametrize("layers, rivals", [((), 0), ((1,), 0), ((), 4)])
def test_the_head_holds_the_targets_true_states_and_a_cache_of_true_inputs_only(layers, rivals):
    """After every round: the states it holds are the target's own over committed[:-1] (the final
    ones, then the lower layers it reads; with rivals, the state of the rival the target took), and
    its own next guess equals a fresh, uncached head pass over those true states."""
    pair = with_head(tiny_pair("llama"), scale=3.0, rows=torch.arange(3, 100), layers=layers)
    to_probs = ProbsFn(0.0, 0, 1.0)
    config = DecodeConfig(gamma=3, max_new_tokens=20, stop_at_eos=False, drafter="head",
                          draft_confidence=0.6 if rivals else 0.0, rivals=rivals)
    drafter = HeadDrafter.build(pair, config, to_probs, torch.Generator())
    seen = []
    original_rollback = drafter.rollback

    def checking_rollback(num_committed: int) -> None:
        original_rollback(num_committed)
        seen.append(num_committed)
        assert drafter.features.shape[1] == num_committed - 1
        assert drafter.cache.get_seq_length() <= num_committed - 1

    drafter.rollback = checking_rollback
    prompt = random_prompts(1, pair.vocab_size, seed=5, min_len=6, max_len=6)[0]
    trace = Trace.from_events(speculative_decode(pair, prompt, config, drafter=lambda *args: drafter))
    assert len(seen) == len(trace.rounds) and any(event.num_accepted < event.gamma for event in trace.rounds)
    if rivals:  # a rival the target took: its state was moved to its place in the text
        assert any(event.num_accepted and event.guesses and event.drafted[0].draft_confidence
                   < event.guesses[0].draft_confidence for event in trace.rounds)
    committed = torch.tensor([prompt + trace.token_ids])  # (1, n)
    output = pair.target.base_model(input_ids=committed[:, :-1], output_hidden_states=True)
    true_states = torch.cat([output.last_hidden_state, *(output.hidden_states[k] for k in layers)], -1)  # (1, n-1, d·(1+n))
    torch.testing.assert_close(drafter.features, true_states, rtol=1e-4, atol=1e-4)
    # Its next round's first guess, incrementally, against one uncached pass over the true states.
    with torch.inference_mode():  # as the engine drafts
        proposal = drafter.propose(committed, 1)
    embeddings = pair.target.get_input_embeddings()(committed[:, 1:])  # (1, n-1, d)
    predicted = drafter.head(true_states, embeddings)[:, -1]  # (1, d)
    expected = drafter.row_logits(predicted)[0].argmax(-1)
    assert proposal.draft_ids.tolist() == expected.tolist()


def test_a_head_drafts_only_from_its_rows_and_stops_when_unsure():
    rows = torch.arange(10, 60)
    pair = with_head(tiny_pair("llama"), rows=rows, scale=0.5)
    prompt = random_prompts(1, pair.vocab_size, seed=2)[0]
    sure = DecodeConfig(gamma=4, max_new_tokens=30, stop_at_eos=False, drafter="head", draft_confidence=0.0)
    trace = Trace.from_events(speculative_decode(pair, prompt, sure))
    drafted = [token.token_id for event in trace.rounds for token in event.drafted]
    assert drafted and all(10 <= token_id < 60 for token_id in drafted)
    unsure = dataclasses.replace(sure, draft_confidence=0.99)  # a random head is never that sure
    rounds = Trace.from_events(speculative_decode(pair, prompt, unsure)).rounds
    assert all(event.gamma == 1 for event in rounds[:-1]) and any(event.stopped_unsure for event in rounds)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_output_with_the_head_follows_the_target(temperature):
    pair = with_head(distribution_pair(), scale=4.0)
    settings = dict(temperature=temperature, top_k=0, top_p=1.0)
    tokens = sample_runs(pair, dict(settings, drafter="head", draft_confidence=0.0), num_runs=1500,
                         max_rejection_share=1.01)
    p_values = check_against_target(tokens, exact_joint_of_three(pair, **settings))
    assert min(p_values) > SIGNIFICANCE / 3, p_values


def test_a_pair_without_a_head_says_so():
    pair = tiny_pair("llama")
    config = DecodeConfig(drafter="head")
    with pytest.raises(ValueError, match="no EAGLE-style head was trained for this pair's target"):
        list(speculative_decode(pair, [5, 6, 7], config))
    assert drafter_info("head").needs_head and not drafter_info("model").needs_head
    assert HeadDrafter.reads_target and not ModelDrafter.reads_target


def test_a_saved_head_loads_back_identically(tmp_path):
    pair = with_head(tiny_pair("llama"), scale=2.0, rows=torch.arange(5, 50))
    pair.head.save(tmp_path, pair.head_rows, {"note": "test"})
    head, rows = load_head(tmp_path, torch.device("cpu"), torch.float32)
    assert torch.equal(rows, pair.head_rows)
    features, embeddings = torch.randn(1, 4, 48), torch.randn(1, 4, 48)
    assert head.target_layers == ()
    # Saved as int8 rows with a scale each: the same network as the rounded weights give.
    rounded = DraftHead(pair.head.config)
    rounded.load_state_dict(dequantize_rows(quantize_rows(pair.head.state_dict())))
    torch.testing.assert_close(head(features, embeddings), rounded(features, embeddings))
    for name, weight in pair.head.state_dict().items():
        if weight.dim() == 2:  # int8: half a step (the row's largest entry / 127) plus the float16 scale's rounding
            step = weight.abs().amax(dim=1, keepdim=True) / 127
            assert ((head.state_dict()[name] - weight).abs() <= 0.6 * step).all(), name


def test_a_damaged_head_folder_costs_the_head_only(tmp_path):
    """A head whose weights cannot be read: the pair still loads, choosing the head says why in
    words, and the draft model still drafts; a folder with no head at all says how to train one."""
    from specviz.models.loading import build_pair
    from specviz.models.presets import PairPreset
    from tests.tiny_models import make_model, make_tokenizer, noisy_copy

    tokenizer = make_tokenizer(["<s>", "</s>", "<pad>"] + [f"w{i}" for i in range(61)])
    target = make_model("llama", vocab_size=64, hidden=48)
    for name, model in (("target", target), ("draft", noisy_copy(target, 0.02))):
        model.save_pretrained(tmp_path / name)
        tokenizer.save_pretrained(tmp_path / name)
    with_head(tiny_pair("llama")).head.save(tmp_path / "head", torch.arange(64), {})
    (tmp_path / "head" / "model.safetensors").write_bytes(b"not a safetensors file")
    spec = PairPreset("custom", str(tmp_path / "target"), str(tmp_path / "draft"), "test", head_dir=tmp_path / "head")
    pair = build_pair(spec, torch.device("cpu"), torch.float32)
    assert pair.head is None and "head drafter's folder head/ could not be loaded" in pair.lacks_for(drafter_info("head"))
    with pytest.raises(ValueError, match="could not be loaded.*choose the draft model or prompt lookup"):
        list(speculative_decode(pair, [5, 6, 7], DecodeConfig(drafter="head")))
    config = DecodeConfig(gamma=3, max_new_tokens=10, stop_at_eos=False)
    assert greedy_ids(speculative_decode(pair, [5, 6, 7], config)) == greedy_ids(autoregressive_decode(pair, [5, 6, 7], config))
    missing = build_pair(dataclasses.replace(spec, head_dir=tmp_path / "nothing-here"), torch.device("cpu"), torch.float32)
    assert "train --recipe head" in missing.lacks_for(drafter_info("head"))


def test_each_pair_names_its_own_default_drafter(tmp_path, monkeypatch):
    """A run that names no drafter gets its pair's own: the default pair's head when its weights are
    here (it won the bench), the draft model elsewhere and when the head's weights are missing."""
    from specviz.app.request import Request
    from specviz.catalogue import DEFAULT_DRAFTER
    from specviz.models import presets

    assert presets.PRESETS["smollm2-135m"].default_drafter == "head" and DEFAULT_DRAFTER == "model"
    assert presets.default_drafter_for("smollm2-135m") == presets.default_drafter_for(None) == "head"
    assert presets.default_drafter_for("tiny-code") == presets.default_drafter_for("custom") == "model"
    assert presets.resolve_pair(target="some/target", draft="some/draft").unnamed_drafter() == "model"  # the CLI's custom pair
    settings = dict(target_id="", draft_id="", gamma=3, temperature=0, top_k=0, top_p=1, max_new_tokens=8, seed=0)
    assert Request.parse("Hi", "embedded", **settings).config.drafter == "head"
    assert Request.parse("Hi", "tiny-code", **settings).config.drafter == "model"
    assert Request.parse("Hi", "embedded", drafter="prompt-lookup", **settings).config.drafter == "prompt-lookup"
    from specviz.app.run_section.page import pair_pick_js  # the page: picking a pair brings its drafter, in the browser

    assert pair_pick_js(["tiny-code", "smollm2-135m"]) == '(pair) => ({"tiny-code": "model", "smollm2-135m": "head"})[pair] ?? "model"'
    unshipped = dataclasses.replace(presets.PRESETS["smollm2-135m"], head_dir=tmp_path)  # no weights in it
    monkeypatch.setitem(presets.PRESETS, "smollm2-135m", unshipped)
    assert presets.default_drafter_for("smollm2-135m") == "model"


def test_a_head_that_reads_lower_layers_saves_them_and_reads_zeros_where_it_drafts_on_its_own(tmp_path):
    """The layers it reads travel in its config; where only a predicted final state is there (every
    draft after a round's first), the lower layers read as zeros, as they did in training."""
    pair = with_head(tiny_pair("llama"), scale=2.0, layers=(2, 1))
    pair.head.save(tmp_path, pair.head_rows, {"note": "test"})
    head, _ = load_head(tmp_path, torch.device("cpu"), torch.float32)
    assert head.target_layers == (2, 1) and head.fc.in_features == 4 * 48
    final, embeddings = torch.randn(1, 4, 48), torch.randn(1, 4, 48)
    with_zeros = head(torch.cat([final, torch.zeros(1, 4, 96)], -1), embeddings)
    alone = head(final, embeddings)
    torch.testing.assert_close(alone, with_zeros, rtol=1e-5, atol=1e-5)  # RMSNorm of zeros is zeros
    assert not torch.allclose(alone, head(torch.cat([final, torch.randn(1, 4, 96)], -1), embeddings))


def test_the_teacher_pass_keeps_the_lower_layers_the_head_reads_and_training_reaches_them(tmp_path):
    """A head that reads lower layers learns from them: the teacher pass keeps them (a chunk cached
    without them is written again) and a training step's gradient reaches fc's columns for them."""
    from specviz.training.head_config import HeadTrainConfig
    from specviz.training.head_train import head_losses, label_with_features

    pair = tiny_pair("llama")
    rows = torch.tensor(random_prompts(4, pair.vocab_size, seed=1, min_len=10, max_len=10))  # (4, 10)
    plain = label_with_features(HeadTrainConfig(work_dir=str(tmp_path), label_batch=2), pair.target, rows, pair.device)
    assert "layer_features" not in plain and plain["features"].shape == (4, 10, 48)
    config = HeadTrainConfig(work_dir=str(tmp_path), label_batch=2, target_layers=(1,), teacher_top_k=4)
    data = label_with_features(config, pair.target, rows, pair.device)
    states = pair.target.model(input_ids=rows, output_hidden_states=True).hidden_states[1]  # (4, 10, 48)
    torch.testing.assert_close(data["layer_features"].float(), states.detach(), rtol=1e-2, atol=1e-2)  # kept in bfloat16
    assert torch.equal(data["features"], plain["features"]) and torch.load(tmp_path / "teacher" / "000000.pt")["layers"] == [1]
    head = DraftHead(head_config_for(pair.target.config, (1,)))
    row_weight = pair.target.get_output_embeddings().weight.detach()  # (vocab, d): every row a head row
    metrics = head_losses(head, pair.target.get_input_embeddings(), row_weight, torch.arange(pair.vocab_size), data,
                          config, torch.Generator().manual_seed(0))
    metrics["loss"].backward()
    assert head.fc.weight.grad[:, 2 * 48 :].abs().sum() > 0  # fc's columns for them start at zero, and learn


def test_a_head_widened_to_read_lower_layers_starts_as_the_same_network():
    """`train --recipe head --init-from F --target-layers ...` goes on from a head that read the final
    state alone: fc's new columns start at zero, so it predicts what it did, whatever the layers say."""
    from specviz.models.draft_head import with_lower_layers

    pair = with_head(tiny_pair("llama"), scale=2.0)
    wider = with_lower_layers(pair.head, (1, 0))
    assert wider.target_layers == (1, 0) and wider.fc.in_features == 4 * 48
    final, embeddings = torch.randn(1, 5, 48), torch.randn(1, 5, 48)
    lower = 50 * torch.randn(1, 5, 96)
    torch.testing.assert_close(wider(torch.cat([final, lower], -1), embeddings), pair.head(final, embeddings))
    with pytest.raises(ValueError, match="already reads"):
        with_lower_layers(wider, (1,))


def test_a_run_that_goes_on_from_a_layered_head_must_name_its_layers_before_any_work(tmp_path):
    from specviz.training.head_config import HeadTrainConfig, check_the_layers_it_goes_on_with

    pair = with_head(tiny_pair("llama"), layers=(2, 1))
    pair.head.save(tmp_path, pair.head_rows, {"note": "test"})
    with pytest.raises(SystemExit, match="--target-layers 2,1"):
        check_the_layers_it_goes_on_with(HeadTrainConfig(init_from=str(tmp_path)))
    check_the_layers_it_goes_on_with(HeadTrainConfig(init_from=str(tmp_path), target_layers=(2, 1)))
    plain = with_head(tiny_pair("llama"))
    plain.head.save(tmp_path / "plain", plain.head_rows, {"note": "test"})
    check_the_layers_it_goes_on_with(HeadTrainConfig(init_from=str(tmp_path / "plain"), target_layers=(3,)))


def test_a_training_run_stopped_by_its_minutes_resumes_at_the_first_step_it_did_not_run(tmp_path, monkeypatch):
    """`train_minutes` stops the loop before a step runs: its checkpoint counts the steps that ran, so a resumed
    run skips none, and a rerun of a finished run (no step left) keeps the count it had."""
    from types import SimpleNamespace

    import specviz.training.head_train as head_train
    from specviz.training.head_config import HeadTrainConfig

    pair = tiny_pair("llama")
    config = HeadTrainConfig(work_dir=str(tmp_path), label_batch=2, teacher_top_k=4, batch_size=2, epochs=2.0,
                             train_minutes=1.0)
    rows = torch.tensor(random_prompts(4, pair.vocab_size, seed=1, min_len=10, max_len=10))  # (4, 10)
    data = head_train.label_with_features(config, pair.target, rows, pair.device)  # 4 rows: 4 steps of 2 rows
    clock = iter([0.0, 0.0, 0.0, 61.0])  # started, steps 0 and 1 within the minute, step 2 past it
    monkeypatch.setattr(head_train, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    head = DraftHead(head_config_for(pair.target.config))
    head_rows = torch.arange(pair.vocab_size)
    checkpoint = tmp_path / "head-checkpoint.pt"
    head_train.train_head(config, head, pair.target, head_rows, data, data)
    assert torch.load(checkpoint, weights_only=False)["step"] == 2
    monkeypatch.setattr(head_train, "time", SimpleNamespace(perf_counter=lambda: 0.0))
    head_train.train_head(config, head, pair.target, head_rows, data, data)
    assert torch.load(checkpoint, weights_only=False)["step"] == 4
    head_train.train_head(config, head, pair.target, head_rows, data, data)
    assert torch.load(checkpoint, weights_only=False)["step"] == 4
