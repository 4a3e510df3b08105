"""The head drafter's GPU recipe (specviz.training.head_gpu), run end to end on a CPU at tiny sizes with a
tiny random Llama target: training-time test drafts what the engine drafts, every phase resumes from its
files, an interrupted training run ends where an unbroken one does, and the saved head drafts in the
engine with the target's own greedy output."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache

from specviz.analysis.trace import Trace
from specviz.decoding.config import DecodeConfig
from specviz.decoding.engine import autoregressive_decode, speculative_decode
from specviz.models.draft_head import DraftHead, head_config_for, load_head
from specviz.models.pairs import ModelPair
from specviz.models.precision import choose_device_and_dtype
from specviz.training.head_config import HeadGpuConfig, head_gpu_config
from specviz.training.head_gpu import CHECKPOINT_FILE, data_complete, read_progress, train_head_on_gpu
from specviz.training.head_ttt import draft_ahead
from tests.tiny_models import make_model, make_tokenizer, noisy_copy, random_prompts

# A chat template for the word-level tokenizer: the recipe samples requests after its user-turn prefix.
CHAT_TEMPLATE = ("{% for m in messages %}<s> {{ m['role'] }} {{ m['content'] }} </s> {% endfor %}"
                 "{% if add_generation_prompt %}<s> assistant {% endif %}")


def random_head(seed: int = 0) -> DraftHead:
    torch.manual_seed(seed)
    head = DraftHead(head_config_for(make_model("llama", hidden=48).config)).eval()
    with torch.no_grad():  # scaled, so its guesses depend on what it attends to
        for parameter in head.body.parameters():
            if parameter.dim() > 1:
                parameter.mul_(3.0)
        head.fc.weight.add_(0.3 * torch.randn_like(head.fc.weight))
    return head


@torch.no_grad()
def test_each_depth_of_training_time_test_is_the_draft_the_engine_makes_there():
    """Depth s at position j: the head's cache holds true states up to j-s+1, then it drafts on its own
    predictions, as HeadDrafter does in a round; depth 1 is the plain causal pass."""
    head = random_head()
    features, embeddings = torch.randn(1, 12, 48), torch.randn(1, 12, 48)
    depths = draft_ahead(head, features, embeddings, num_steps=3)
    assert torch.equal(depths[0], head(features, embeddings))
    for depth in (2, 3):
        for j in range(depth - 1, 12):
            last_true = j - depth + 1
            cache = DynamicCache()
            predicted = head(features[:, : last_true + 1], embeddings[:, : last_true + 1], cache,
                             torch.arange(last_true + 1).view(1, -1))[:, -1:]  # (1, 1, d)
            for position in range(last_true + 1, j + 1):  # the round's own chain
                predicted = head(predicted, embeddings[:, position : position + 1], cache, torch.tensor([[position]]))
            torch.testing.assert_close(depths[depth - 1][:, j], predicted[:, 0], rtol=1e-5, atol=1e-5)
    # The mask matters: a plain causal pass over the chain alone (the CPU recipe's second step) is not the draft.
    chain_alone = head(torch.cat([torch.zeros(1, 1, 48), depths[0][:, :-1]], dim=1), embeddings)  # (1, 12, d)
    assert not torch.allclose(chain_alone[:, 1:], depths[1][:, 1:], atol=1e-3)


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    """A tiny random Llama with a word-level tokenizer and a chat template, saved as a folder."""
    folder = tmp_path_factory.mktemp("target")
    tokenizer = make_tokenizer(["<s>", "</s>", "<pad>", "user", "assistant"] + [f"w{i}" for i in range(59)])
    tokenizer.chat_template = CHAT_TEMPLATE
    make_model("llama", vocab_size=64, hidden=48, context_length=256).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_config(target, work) -> HeadGpuConfig:
    return dataclasses.replace(
        head_gpu_config("cpu"), target_id=str(target), work_dir=str(work), out_dir=str(work / "head"),
        self_instructions=96, instruction_batch=16, instruction_tokens=24, answer_batch=8, answer_tokens=16,
        sequence_length=32, score_batch=4, batch_size=4, epochs=2.0, warmup_steps=2, shuffle_shards=2, num_threads=1)


def check_a_shard_against_the_target(path, target_folder):
    """A shard keeps, compactly, the target's own final states and top-k log-probabilities of its rows."""
    shard = torch.load(path)
    assert shard["features"].dtype == torch.float16 and shard["label_log_probs"].dtype == torch.float16
    assert shard["label_ids"].dtype == shard["tokens"].dtype == torch.int32 and shard["label_ids"].shape[-1] == 20
    _, dtype = choose_device_and_dtype("cpu")  # the precision the recipe ran the target in here
    target = AutoModelForCausalLM.from_pretrained(target_folder, dtype=dtype).eval()
    with torch.no_grad():
        output = target(input_ids=shard["tokens"].long(), output_hidden_states=True)
    top = torch.log_softmax(output.logits.float(), -1).topk(20, dim=-1)  # (rows, L, 20)
    assert (shard["label_ids"] == top.indices).float().mean() > 0.95
    torch.testing.assert_close(shard["label_log_probs"].float(), top.values, atol=0.02, rtol=0.01)
    torch.testing.assert_close(shard["features"].float(), output.hidden_states[-1].float(), atol=0.02, rtol=0.01)


def test_the_tiny_recipe_resumes_trains_three_depths_and_its_head_drafts_the_targets_text(tiny_target, tmp_path):
    work = tmp_path / "work"
    config = tiny_config(tiny_target, work)
    train_head_on_gpu(dataclasses.replace(config, phase="generate"))
    answers = sorted((work / "answers").glob("*.pt"))
    assert len(answers) >= 4 and json.loads((work / "self_instructions.json").read_text())
    stamps = {path: path.stat().st_mtime_ns for path in answers}
    train_head_on_gpu(dataclasses.replace(config, phase="score"))
    shards = sorted((work / "shards").glob("*.pt"))
    check_a_shard_against_the_target(shards[0], tiny_target)
    # `--phase all` trains only on all the data (a head keeps the shards it began with when it resumes).
    assert data_complete(config, read_progress(config)["data"])
    shards[-1].rename(shards[-1].with_suffix(".away"))
    assert not data_complete(config, read_progress(config)["data"])
    shards[-1].with_suffix(".away").rename(shards[-1])

    # Training stops after 3 steps (as a spent --minutes would), then a rerun goes on from the checkpoint.
    train_head_on_gpu(dataclasses.replace(config, steps_this_run=3))
    first = json.loads((work / "head" / "training.json").read_text())
    assert first["steps"] == 3 and not first["complete"] and first["total_steps"] > 3
    assert torch.load(work / CHECKPOINT_FILE, weights_only=False)["step"] == 3
    train_head_on_gpu(config)
    log = json.loads((work / "head" / "training.json").read_text())
    assert log["resumed_from_step"] == 3 and log["complete"] and log["steps"] == log["total_steps"]
    assert {path: path.stat().st_mtime_ns for path in answers} == stamps  # the answers were not written again
    assert log["data"]["train_positions"] > 0 and log["data"]["held_out_positions"] > 0
    assert [record["epoch"] for record in log["epochs"]] == [1.0, 2.0]
    for record in log["epochs"]:  # a loss and an agreement per depth, in training and on held-out requests
        for part in ("train", "held_out"):
            assert all(0 < record[part][f"kl_{depth}"] < 50 and 0 <= record[part][f"agreement_{depth}"] <= 1
                       for depth in (1, 2, 3)), record

    # An unbroken run over the same files ends with the very same head: the resume is exact.
    again = tmp_path / "again"
    for folder in ("instructions", "answers", "shards"):
        shutil.copytree(work / folder, again / folder)
    train_head_on_gpu(dataclasses.replace(config, work_dir=str(again), out_dir=str(again / "head"), phase="train"))
    resumed = torch.load(work / CHECKPOINT_FILE, weights_only=False)["head"]
    unbroken = torch.load(again / CHECKPOINT_FILE, weights_only=False)["head"]
    assert all(torch.equal(resumed[name], unbroken[name]) for name in resumed)

    # The saved head (int8 on disk) drafts in the engine, and greedy output is the target's own.
    head, rows = load_head(work / "head", torch.device("cpu"), torch.float32)
    target = AutoModelForCausalLM.from_pretrained(tiny_target, dtype=torch.float32).eval()
    pair = dataclasses.replace(ModelPair.from_models(target, noisy_copy(target, 0.02)), head=head, head_rows=rows)
    decode = DecodeConfig(gamma=3, max_new_tokens=16, stop_at_eos=False, drafter="head", draft_confidence=0.0)
    for prompt in random_prompts(3, 64, seed=4):
        spoken = Trace.from_events(speculative_decode(pair, prompt, decode))
        assert spoken.token_ids == Trace.from_events(autoregressive_decode(pair, prompt, decode)).token_ids
        assert any(event.gamma == 3 for event in spoken.rounds)


def test_the_recipe_names_its_phases_and_sizes_a_gpu_run_for_the_issue():
    with pytest.raises(SystemExit, match="--phase must be one of generate, score, train, all"):
        head_gpu_config("cpu", phase="everything")
    gpu = head_gpu_config("cuda")
    assert gpu.ttt_steps >= 3 and gpu.autocast and gpu.device == "cuda"
    # ≥ 50 k requests kept at the CPU run's finishing rate (2,982 of 4,096), each answered twice
    assert gpu.self_instructions * 2982 / 4096 >= 50_000 and gpu.answer_rounds == 2
    assert head_gpu_config("cpu").self_instructions < 1000 and "assets" not in gpu.out_dir


def test_the_command_line_runs_the_gpu_recipe_with_the_gpus_sizes(monkeypatch, tmp_path):
    """`train --recipe head --device cuda …` reaches the GPU recipe at its GPU sizes, with the flags given."""
    from specviz.cli.commands import main
    from specviz.training import head_gpu

    seen = []
    monkeypatch.setattr(head_gpu, "train_head_on_gpu", seen.append)
    assert main(["train", "--recipe", "head", "--device", "cuda", "--minutes", "9", "--phase", "score", "--target",
                 str(tmp_path), "--work-dir", str(tmp_path / "work"), "--requests", "4096"]) == 0
    config = seen[0]
    assert (config.device, config.phase, config.minutes, config.target_id) == ("cuda", "score", 9.0, str(tmp_path))
    assert config.self_instructions == 4096 and config.answer_batch == head_gpu_config("cuda").answer_batch == 4096
    if not torch.cuda.is_available():  # and where there is none, it says so before any work
        monkeypatch.undo()
        with pytest.raises(SystemExit, match="no CUDA device here"):
            main(["train", "--recipe", "head", "--device", "cuda", "--work-dir", str(tmp_path / "work")])
