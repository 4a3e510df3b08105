"""The default pair: SmolLM2-135M-Instruct (converted from the installed wheel) and specviz's draft.

These tests load the real 135 M target (float32, as the app does on a CPU), so they keep
generations short. `tests/run.sh` converts the target before pytest starts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specviz.analysis.bench import load_prompts
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import autoregressive_decode, decode_lanes, speculative_decode
from specviz.models.compact import COMPACT_FILE, load_compact
from specviz.models.invariance import prompt_apart
from specviz.models.loading import HEAD_ROWS_FILE, load_pair
from specviz.models.presets import DEFAULT_PRESET, EMBEDDED_DRAFT_DIR, EMBEDDED_HEAD_DIR, PRESETS
from specviz.analysis.trace import Trace

REPO = Path(__file__).resolve().parent.parent
NUM_NEW = 24


@pytest.fixture(scope="module")
def pair():
    return load_pair()


def run_lane(decode, pair, prompt_ids, **settings) -> list[int]:
    config = DecodeConfig(max_new_tokens=NUM_NEW, **settings)
    return Trace.from_events(decode(pair, prompt_ids, config)).token_ids


def test_the_default_preset_is_smollm2_with_the_shipped_draft():
    assert DEFAULT_PRESET == "smollm2-135m"
    assert Path(PRESETS["smollm2-135m"].draft_id) == EMBEDDED_DRAFT_DIR
    for name in ("config.json", COMPACT_FILE, HEAD_ROWS_FILE, "README.md"):
        assert (EMBEDDED_DRAFT_DIR / name).is_file(), name
    for name in ("config.json", "model.safetensors", "head_rows.json", "training.json", "self_instructions.json", "README.md"):
        assert (EMBEDDED_HEAD_DIR / name).is_file(), name


def test_loads_offline_in_a_fresh_process():
    """What the set-up command installed is enough: no hub, no network proxy reachable."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    code = (
        "import json; from specviz.models.loading import load_pair; p = load_pair(); "
        "print(json.dumps({'name': p.name, 'vocab': p.vocab_size, 'arch': type(p.target).__name__, "
        "'layers': p.target.config.num_hidden_layers, 'chat': p.has_chat_template, 'rows': len(p.draft_head_rows), "
        "'head': p.head is not None and len(p.head_rows) == len(p.draft_head_rows)}))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report == {"name": "smollm2-135m", "vocab": 49152, "arch": "LlamaForCausalLM", "layers": 30, "chat": True, "rows": report["rows"],
                      "head": True}
    assert 1000 < report["rows"] < 49152


def test_the_draft_is_a_standard_full_vocabulary_causal_lm(pair):
    from transformers import LlamaForCausalLM

    from specviz.models.loading import shares_target_tokenizer

    draft = load_compact(EMBEDDED_DRAFT_DIR, torch.float32)  # a transformers class, from its config
    assert type(draft) is LlamaForCausalLM
    assert draft.config.vocab_size == pair.target.config.vocab_size == len(pair.tokenizer) == 49152
    assert shares_target_tokenizer(str(EMBEDDED_DRAFT_DIR))  # no tokenizer files: it is the target's
    draft_params = sum(p.numel() for p in draft.parameters())
    target_params = sum(p.numel() for p in pair.target.parameters())
    assert draft_params * 10 < target_params


def test_a_chat_question_gets_a_real_answer(pair):
    """A real language model, with its chat template applied: Scotland's capital is Edinburgh."""
    prompt_ids = pair.encode("What is the capital of Scotland?")
    assert pair.uses_chat(None) and "<|im_start|>assistant" in pair.decode(prompt_ids)
    answer = pair.decode(run_lane(speculative_decode, pair, prompt_ids, gamma=4))
    assert "Edinburgh" in answer, answer


CASES = [("What is the capital of Scotland?", True), ("Alice and Bob were walking through the park when", False)]


@pytest.mark.parametrize("gamma", [1, 3, 6])
@pytest.mark.parametrize(("prompt", "chat"), CASES)
def test_greedy_speculative_equals_baseline_and_transformers(pair, prompt, chat, gamma):
    """Ours (head-rows drafter and full head) == the target alone == generate(assistant_model=draft)."""
    prompt_ids = pair.encode(prompt, chat)
    baseline = run_lane(autoregressive_decode, pair, prompt_ids)
    assert run_lane(speculative_decode, pair, prompt_ids, gamma=gamma) == baseline
    assert run_lane(speculative_decode, pair, prompt_ids, gamma=gamma, full_draft_head=True) == baseline
    input_ids = torch.tensor([prompt_ids])
    with torch.inference_mode(), prompt_apart(len(prompt_ids)):  # as the reference lane calls it
        output = pair.target.generate(
            input_ids, attention_mask=torch.ones_like(input_ids), assistant_model=pair.draft, do_sample=False,
            max_new_tokens=NUM_NEW, num_assistant_tokens=gamma, num_assistant_tokens_schedule="constant",
            assistant_confidence_threshold=0.0, eos_token_id=pair.eos_id, pad_token_id=pair.eos_id,
        )
    assert output[0, len(prompt_ids) :].tolist() == baseline


@pytest.mark.parametrize("num_prompt", [1, 3, 4, 5, 8, 9])
def test_greedy_lanes_agree_from_the_shortest_prompts(pair, num_prompt):
    """A prompt of up to SLOTS ids is read in calls of call_rows ids (on a CPU one call up to 4, two at 5 and 8),
    a longer one in a pass of its own (9): the lanes write the same text from each, with the head and the draft."""
    from specviz.models.slots import SLOTS

    text = "The old lighthouse keeper climbed the spiral stairs every evening at dusk, counting the iron steps aloud"
    prompt_ids = pair.tokenizer(text, add_special_tokens=False)["input_ids"][:num_prompt]
    assert len(prompt_ids) == num_prompt and (num_prompt > SLOTS) == (num_prompt == 9)
    baseline = run_lane(autoregressive_decode, pair, prompt_ids)
    assert len(baseline) == NUM_NEW  # a completion runs on: every round a verify
    for drafter, gamma in (("head", 3), ("model", 5)):
        assert run_lane(speculative_decode, pair, prompt_ids, drafter=drafter, gamma=gamma) == baseline, drafter


@pytest.mark.parametrize("gamma", [1, 3, 6])
@pytest.mark.parametrize(("prompt", "chat"), CASES)
def test_the_shipped_head_drafts_from_the_targets_states_and_changes_nothing(pair, prompt, chat, gamma):
    """The head ships with the default pair; greedy with it equals the target alone, and it
    drafts over its own head rows and accepts some of its guesses."""
    assert pair.head is not None and pair.head_rows is not None
    prompt_ids = pair.encode(prompt, chat)
    baseline = run_lane(autoregressive_decode, pair, prompt_ids)
    trace = Trace.from_events(speculative_decode(pair, prompt_ids, DecodeConfig(gamma=gamma, max_new_tokens=NUM_NEW, drafter="head")))
    assert trace.token_ids == baseline
    rows = set(pair.head_rows.tolist())
    assert all(token.token_id in rows for event in trace.rounds for token in (*event.drafted, *event.guesses))
    assert trace.num_accepted > 0
    for rivals in (0, 3):  # with none, and with more rival guesses than the default
        config = DecodeConfig(gamma=gamma, max_new_tokens=NUM_NEW, drafter="head", rivals=rivals)
        assert Trace.from_events(speculative_decode(pair, prompt_ids, config)).token_ids == baseline


def test_the_default_pair_drafts_in_int8_and_verifies_with_the_target_as_loaded(pair):
    """On a CPU with an int8 engine the draft, the head and their row scorers are int8; the target
    (the baseline lane and every verify) keeps the precision it was loaded in."""
    from specviz.models.int8 import int8_available, is_quantized

    assert pair.int8_drafters == int8_available(pair.device)
    if pair.int8_drafters:
        assert all(is_quantized(module) for module in (pair.draft, pair.head, pair.draft_scorer, pair.head_scorer))
    assert not is_quantized(pair.target)
    assert {str(parameter.dtype).removeprefix("torch.") for parameter in pair.target.parameters()} == {pair.precision}


def test_sampled_run_completes_with_the_head_rows_drafter(pair):
    prompt_ids = pair.encode(load_prompts()[1].text)
    config = DecodeConfig(gamma=4, temperature=0.7, max_new_tokens=NUM_NEW, seed=1)
    trace = Trace.from_events(speculative_decode(pair, prompt_ids, config))
    assert 1 <= trace.num_tokens <= NUM_NEW and trace.num_examined > 0
    rows = set(pair.draft_head_rows.tolist())
    assert all(token.token_id in rows for event in trace.rounds for token in event.drafted)


@pytest.mark.parametrize("settings", [dict(temperature=0.7, top_k=1), dict(temperature=1.3, top_p=1e-6),
                                      dict(temperature=0.7, top_k=1, drafter="model", gamma=6, draft_confidence=0.0),
                                      dict(temperature=0.7, top_k=1, tree=6)],
                         ids=["top-k 1", "top-p tiny", "draft model, gamma 6", "tree of 6"])
def test_sampling_from_a_single_token_writes_the_greedy_text_through_rejection_and_resampling(pair, settings):
    """Where top-k 1 (or a tiny top-p) leaves the target one token, the rule must keep exactly it: a draft is
    accepted with probability min(1, p/q) = 1 if it is that token and 0 if not, and the residual max(0, p − q)
    is then that token alone. So a sampled run, seeded and random as it is, writes the greedy text token for
    token on both lanes; an off-by-one row in acceptance, residual or bonus, or a tree walk that reads the wrong
    node, parts here where a statistical test would only drift."""
    prompt_ids = pair.encode("Why is the sky blue at noon but red at sunset?")
    greedy = run_lane(autoregressive_decode, pair, prompt_ids)
    assert run_lane(autoregressive_decode, pair, prompt_ids, seed=5, **settings) == greedy
    config = DecodeConfig(max_new_tokens=NUM_NEW, seed=5, **settings)
    trace = Trace.from_events(speculative_decode(pair, prompt_ids, config))
    assert trace.token_ids == greedy
    assert trace.num_examined > trace.num_accepted > 0  # drafts were both kept and refused (then resampled)


def test_bad_input_on_the_real_pair_gives_clear_messages(pair):
    with pytest.raises(ValueError, match="the prompt is empty"):
        pair.encode("   \n ")
    with pytest.raises(ValueError, match=r"tokens long \(with the chat template\), but these models see at most 8192"):
        pair.encode("word " * 9000)
    with pytest.raises(ValueError, match=r"see at most 8192 tokens"):
        pair.encode("word " * 9000, chat=False)


REWRITE = "Rewrite this sentence in the passive voice: The committee approved the new budget on Friday after a long debate."


def test_prompt_lookup_on_a_rewrite_is_exact_and_accepts_most_copies(pair):
    """A rewrite copies the prompt: prompt lookup's drafts are mostly kept, and the text is the
    target's own, as transformers' prompt lookup and the reference lane also give."""
    prompt_ids = pair.encode(REWRITE, True)
    config = DecodeConfig(gamma=4, max_new_tokens=40, drafter="prompt-lookup", ngram=3)
    lanes = {}
    for event in decode_lanes(pair, prompt_ids, config, ("baseline", "speculative", "reference")):
        lanes.setdefault(event.lane, Trace()).add(event)
    baseline, ours, reference = lanes["baseline"], lanes["speculative"], lanes["reference"]
    assert ours.token_ids == baseline.token_ids == reference.token_ids
    assert "the new budget on Friday" in pair.decode(ours.token_ids)  # the 135 M model mostly copies it back
    assert ours.acceptance_rate > 0.6  # 0.92 measured
    assert ours.num_target_forwards < 0.6 * baseline.num_target_forwards
    assert ours.num_draft_forwards == 0


def test_reference_lane_with_the_draft_model_matches_on_the_default_pair(pair):
    prompt_ids = pair.encode("What is the capital of Scotland?", True)
    config = DecodeConfig(gamma=3, max_new_tokens=16)
    lanes = {}
    for event in decode_lanes(pair, prompt_ids, config, ("speculative", "reference")):
        lanes.setdefault(event.lane, Trace()).add(event)
    assert lanes["reference"].token_ids == lanes["speculative"].token_ids
    assert "Edinburgh" in pair.decode(lanes["reference"].token_ids)


def test_the_held_out_prompts_are_none_of_the_training_templates():
    """Every figure is also reported on prompts no training phase saw: none of them fits any
    template or completion the distillation prompts are built from, or is an example."""
    import json
    import re

    from specviz.training import prompts_corpus
    from specviz.models.presets import ASSETS_DIR

    held_out = json.loads((ASSETS_DIR / "prompts-heldout.json").read_text())
    examples = {entry["prompt"] for entry in json.loads((ASSETS_DIR / "prompts.json").read_text())}
    patterns = [re.compile(re.sub(r"\\\{\w+\\\}", ".+", re.escape(template)), re.DOTALL)
                for template in prompts_corpus.TEMPLATES + prompts_corpus.COMPLETIONS]
    assert len(held_out) >= 20
    for entry in held_out:
        assert entry["prompt"] not in examples
        assert not any(pattern.fullmatch(entry["prompt"]) for pattern in patterns), entry["prompt"]
    training = {text for text, _ in prompts_corpus.instruction_prompts(5000, seed=0)}
    assert not training & {entry["prompt"] for entry in held_out}
    # the check has teeth: a templated prompt is caught
    assert any(pattern.fullmatch("What is the capital of Chad?") for pattern in patterns)


def test_the_target_writes_requests_of_its_own_and_a_rerun_reads_them_back(pair, tmp_path, monkeypatch):
    """The head recipe's phase 0 (Magpie): requests sampled after the chat template's user-turn prefix,
    finished ones kept, one cached file per batch, so an interrupted run resumes without the target."""
    from specviz.training.head_config import HeadTrainConfig
    from specviz.training.head_train import user_turn, write_instructions

    prefix, after = user_turn(pair.tokenizer)
    assert pair.format_prompt("Hello?", chat=True).startswith(prefix) and prefix.endswith("user\n")
    assert pair.format_prompt("Hello?", chat=True) == prefix + "Hello?" + after and after.startswith("<|im_end|>")
    config = HeadTrainConfig(work_dir=str(tmp_path), seed=3, self_instructions=12, instruction_batch=6, instruction_tokens=32)
    requests = write_instructions(config, pair.tokenizer, pair.target, pair.device)
    assert sorted(path.name for path in (tmp_path / "instructions").iterdir()) == ["0000.json", "0001.json"]
    assert 1 <= len(requests) <= 12 and len(set(requests)) == len(requests)
    assert all(text and text == text.strip() and "<|im_" not in text for text in requests), requests

    def no_generation(*args, **kwargs):
        raise AssertionError("a cached batch was generated again")

    monkeypatch.setattr(pair.target, "generate", no_generation)
    assert write_instructions(config, pair.tokenizer, pair.target, pair.device) == requests


def test_a_head_goes_on_from_the_shipped_one_on_new_requests_only(tmp_path):
    """`train --recipe head --init-from`: no templated or draft-written answers, new requests (others
    than the shipped head's) answered and scored, the head, its rows and its requests carried on."""

    from specviz.models.draft_head import load_head
    from specviz.training.head_config import REQUESTS_FILE, HeadTrainConfig
    from specviz.training.head_train import train_head_recipe

    config = HeadTrainConfig(init_from=str(EMBEDDED_HEAD_DIR), seed=2, work_dir=str(tmp_path / "work"),
                             out_dir=str(tmp_path / "head"), self_instructions=8, instruction_batch=8,
                             target_answer_batch=8, epochs=0.2, held_out_fraction=0.3, num_threads=1,
                             lr=0.05, warmup_steps=0)  # one step, big enough to outlast the int8 rounding
    out = train_head_recipe(config)
    summary = json.loads((out / "training.json").read_text())
    assert summary["data"]["num_answers"] == summary["data"]["num_target_answers"] == 0
    assert not (tmp_path / "work" / "answers").exists() and not (tmp_path / "work" / "target").exists()
    assert summary["data"]["num_self_instructions"] >= 1 and summary["data"]["teacher_positions"] > 0
    assert summary["went_on_from"] == json.loads((EMBEDDED_HEAD_DIR / "training.json").read_text())
    earlier = json.loads((EMBEDDED_HEAD_DIR / REQUESTS_FILE).read_text(encoding="utf-8"))
    requests = json.loads((out / REQUESTS_FILE).read_text(encoding="utf-8"))
    assert requests[: len(earlier)] == earlier and len(requests) == len(earlier) + summary["data"]["num_self_instructions"]
    head, rows = load_head(out, torch.device("cpu"), torch.float32)
    shipped, shipped_rows = load_head(EMBEDDED_HEAD_DIR, torch.device("cpu"), torch.float32)
    assert torch.equal(rows, shipped_rows)
    assert not torch.equal(head.fc.weight, shipped.fc.weight)  # it trained


def test_a_head_that_goes_on_keeps_its_caches_and_output_apart_from_the_head_it_reads(monkeypatch, tmp_path):
    """Without --work-dir and --out, `--init-from` must not resume the from-scratch run's caches
    (its requests would all be filtered out as seen) nor write over the head it reads; given
    folders are kept."""
    import specviz.training.head_config as head_config
    import specviz.training.head_train as head_train
    from specviz.cli import main

    seen = []
    monkeypatch.setattr(head_train, "train_head_recipe", seen.append)
    assert main(["train", "--recipe", "head", "--init-from", str(EMBEDDED_HEAD_DIR), "--seed", "3"]) == 0
    (config,) = seen
    assert config.init_from == str(EMBEDDED_HEAD_DIR) and config.seed == 3
    config = head_config.apart_from_the_head_it_reads(config)  # the recipe's first step
    cache = Path(head_config.HeadTrainConfig().work_dir).parent
    assert config.work_dir == str(cache / "head-went-on-seed3")
    assert config.out_dir == str(cache / "head-went-on-seed3" / "head")
    assert config.work_dir != head_config.HeadTrainConfig().work_dir
    given = head_config.HeadTrainConfig(init_from="x", work_dir=str(tmp_path / "w"), out_dir=str(tmp_path / "o"))
    assert head_config.apart_from_the_head_it_reads(given) == given
    fresh = head_config.HeadTrainConfig()
    assert head_config.apart_from_the_head_it_reads(fresh) == fresh  # a new head keeps the usual folders


def test_the_train_command_passes_the_lower_layers_a_head_should_read(monkeypatch):
    import specviz.training.head_config as head_config
    import specviz.training.head_train as head_train
    from specviz.cli import main

    seen = []
    monkeypatch.setattr(head_train, "train_head_recipe", seen.append)
    for flag, layers in (("2,15,27", (2, 15, 27)), ("none", ())):
        assert main(["train", "--recipe", "head", "--target-layers", flag]) == 0
        assert seen.pop().target_layers == layers
    assert main(["train", "--recipe", "head"]) == 0
    assert seen.pop().target_layers == head_config.HeadTrainConfig().target_layers == ()


def test_no_example_or_held_out_prompt_is_among_the_heads_own_requests():
    """The requests the target wrote for the head's training ship beside it; the figures on the
    examples and held-out prompts are not on text the head trained on."""
    from specviz.models.presets import ASSETS_DIR
    from specviz.training.head_config import REQUESTS_FILE

    requests = json.loads((EMBEDDED_HEAD_DIR / REQUESTS_FILE).read_text(encoding="utf-8"))
    assert len(requests) >= 1000
    seen = {" ".join(text.casefold().split()) for text in requests}
    for name in ("prompts.json", "prompts-heldout.json"):
        for entry in json.loads((ASSETS_DIR / name).read_text()):
            assert " ".join(entry["prompt"].casefold().split()) not in seen, entry["prompt"]


def test_the_draft_recipe_reads_the_heads_teacher_passes_in_the_heads_order(tmp_path):
    """The draft trains on the head recipe's teacher passes (the same signal), in the order
    the head trained on them, so the rows both hold out are the same; without them it says what to run."""
    import pytest
    import torch

    from specviz.training.distil import DistilConfig, read_teacher_passes
    from specviz.training.teacher import TEACHER_FOLDERS

    with pytest.raises(FileNotFoundError, match="--recipe head"):
        read_teacher_passes(DistilConfig(teacher_from=str(tmp_path)))
    for index, folder in enumerate(TEACHER_FOLDERS):
        (tmp_path / folder).mkdir(parents=True)
        for chunk in range(2):
            marker = 10 * index + chunk
            torch.save({"features": torch.zeros(2, 4, 3), "tokens": torch.full((2, 4), marker, dtype=torch.int32),
                        "label_ids": torch.full((2, 4, 5), marker, dtype=torch.int32),
                        "label_log_probs": torch.zeros(2, 4, 5, dtype=torch.float16)}, tmp_path / folder / f"{chunk:06d}.pt")
    teacher = read_teacher_passes(DistilConfig(teacher_from=str(tmp_path)))
    assert set(teacher) == {"rows", "ids", "log_probs"}  # the hidden states are the head's alone
    assert teacher["rows"][:, 0].tolist() == [0, 0, 1, 1, 10, 10, 11, 11, 20, 20, 21, 21]
    assert teacher["ids"].shape == (12, 4, 5) and teacher["log_probs"].shape == (12, 4, 5)


def test_the_drafts_total_variation_term_is_one_minus_its_sampled_acceptance():
    """The draft's loss adds the TV distance to the teacher's top-k: at T = 1 a drafted token is kept
    with probability Σ min(target, draft), which is exactly 1 − TV; zero when the draft is the teacher."""
    import torch

    from specviz.training.distil import total_variation

    generator = torch.Generator().manual_seed(0)
    teacher_probs = torch.rand(6, 8, generator=generator).softmax(-1)  # (positions, k)
    # a draft with mass outside the teacher's k ids too: its k probabilities sum below one
    draft_probs = torch.rand(6, 12, generator=generator).softmax(-1)[:, :8]  # (positions, k)
    acceptance = torch.minimum(teacher_probs, draft_probs).sum(-1).mean()
    assert torch.isclose(total_variation(teacher_probs, draft_probs.log()), 1 - acceptance, atol=1e-6)
    assert total_variation(teacher_probs, teacher_probs.log()) < 1e-6


def test_a_head_from_another_folder_drafts_in_place_of_the_shipped_one(pair, tmp_path):
    """`--head FOLDER` (a head trained on a GPU, benched against the shipped one): loaded instead, exact as ever."""
    from specviz.cli.arguments import build_parser
    from specviz.models.draft_head import load_head
    from specviz.models.errors import ModelLoadError

    head, rows = load_head(EMBEDDED_HEAD_DIR, torch.device("cpu"), torch.float32)
    with torch.no_grad():
        head.fc.weight.mul_(-1.0)  # another head: it guesses differently
    head.save(tmp_path / "head", rows, {"recipe": "a test's"})
    other = load_pair(head=str(tmp_path / "head"))
    assert other is not pair and other.target is not pair.target  # a pair of its own, not the cached one
    prompt_ids = pair.encode("What is the capital of Scotland?", True)
    config = DecodeConfig(max_new_tokens=16, drafter="head", stop_at_eos=False)
    shipped, swapped = (Trace.from_events(speculative_decode(p, prompt_ids, config)) for p in (pair, other))
    baseline = Trace.from_events(autoregressive_decode(pair, prompt_ids, config)).token_ids
    assert swapped.token_ids == shipped.token_ids == baseline
    assert swapped.num_accepted < shipped.num_accepted  # its drafts were its own
    with pytest.raises(ModelLoadError, match="not a head drafter's folder"):
        load_pair(head=str(tmp_path))
    assert build_parser().parse_args(["bench", "--head", str(tmp_path / "head")]).head == str(tmp_path / "head")


def test_where_a_first_draft_and_its_rival_guesses_all_fell_the_inspector_says_so(pair):
    """The step inspector's timeline draws a round's rival guesses as rows; its answer said only why the first draft
    fell (Chromium, 2026-12-05: ' cats', rivals ' cat' and ' Cats', the target's pick ' pur'). A real greedy run of
    the default pair, rival guesses on (the default), until a round whose guesses all fell."""
    from html import unescape

    from specviz.app import render
    from specviz.app.inspector import words as inspector_words
    from specviz.app.render import rule
    from tests.test_render import visible_text

    config = DecodeConfig(max_new_tokens=32, inspect=True)
    assert config.rivals > 0 and config.temperature == 0
    for prompt in ["Why do cats purr? Answer briefly.", *(p.text for p in load_prompts(PRESETS[DEFAULT_PRESET].prompts_file))]:
        prompt_ids = pair.encode(prompt, True)
        run = render.RunView(prompt, prompt_ids, config.gamma, {"temperature": 0.0, "rivals": config.rivals})
        for event in speculative_decode(pair, prompt_ids, config):
            run.add(event, pair.decode)
        fell = [e for e in run.speculative.trace.rounds if len(e.guesses) > 1 and e.taken_guess is None]
        if fell:
            break
    else:
        pytest.fail("no round's first draft and rivals all fell: the test checks nothing")
    event = fell[0]
    texts = run.speculative.round_texts[event.round_index]
    words = unescape(visible_text(inspector_words.inspector_html(run, event.round_index)))
    assert words.strip().startswith(f"Why was '{texts.guesses[0]}' rejected?"), words
    rivals = [f"'{rival}'" for rival in texts.guesses[1:]]
    assert "not the target's pick either" in words and all(rival in words for rival in rivals)
    assert rule.rivals_missed_sentence("' cat' and ' Cats'", 2) == (
        "Its rival guesses, ' cat' and ' Cats', were not the target's pick either.")
    assert rule.rivals_missed_sentence("' cat'", 1) == "Its rival guess, ' cat', was not the target's pick either."
