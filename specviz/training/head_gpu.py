"""The head drafter's GPU recipe (`python -m specviz train --recipe head --device cuda --minutes N`).

The CPU recipe (specviz.training.head_train) was sized by what two CPU cores write in hours. On a GPU
the target writes and scores text far faster, so this recipe asks it for its own requests and answers
at scale and trains the head as it drafts. Three phases, each resumable from its files in work_dir, so
a command that runs out of --minutes is simply run again:

1. **generate**: the target writes requests of its own (Magpie, as the CPU recipe's phase 0: sampled
   after its chat template's user-turn prefix) and answers every one greedily and at T = 0.7, in large
   left-padded batches (teacher.write_answers); one file per batch.
2. **score**: one teacher-forced pass per answer file keeps what the head reads and the target's top-k
   log-probabilities, one shard on disk each (specviz.training.head_shards).
3. **train**: AdamW on the head alone with training-time test over `ttt_steps` depths
   (specviz.training.head_ttt), bf16 autocast where the hardware has it, a checkpoint every few minutes;
   a resumed run takes up the very step, batch and noise an unbroken one would, so --minutes can cut it
   anywhere. Then the head in the shipped format (int8) and its log: data sizes, minutes per phase, loss
   and agreement per depth per epoch (training.json).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from itertools import accumulate
from pathlib import Path
from typing import NamedTuple

import torch

from specviz.decoding.engine import clock
from specviz.models.draft_head import DraftHead, head_config_for
from specviz.models.precision import choose_device_and_dtype, precision_name
from specviz.training.head_config import PHASE_SHARES, REQUESTS_FILE, HeadGpuConfig
from specviz.training.head_shards import (
    answer_files, batches_per_group, choose_head_rows, epoch_batches, held_out_batches, rows_in, score_answers,
    shard_files, split_held_out,
)
from specviz.training.head_train import write_instructions
from specviz.training.head_ttt import ttt_losses
from specviz.training.optimise import learning_rate, mean_over_batches, optimiser_step, save_atomically, start_run
from specviz.training.teacher import load_target, row_index_of, write_answers

PROGRESS_FILE = "progress.json"  # data sizes and minutes per phase, summed over every command so far
CHECKPOINT_FILE = "head-checkpoint.pt"


def deadlines(config: HeadGpuConfig, started: float) -> dict[str, float | None]:
    """When each phase must stop starting new work: its share of --minutes (all of it when run alone)."""
    if not config.minutes:
        return dict.fromkeys(PHASE_SHARES)
    if config.phase != "all":
        return dict.fromkeys(PHASE_SHARES, started + 0.95 * config.minutes * 60)
    ends = accumulate((share * config.minutes * 60 for share in PHASE_SHARES.values()), initial=started)
    return dict(zip(PHASE_SHARES, list(ends)[1:]))


def generate(config: HeadGpuConfig, tokenizer, target, deadline: float | None) -> dict:
    """Phase 1: requests, then each answered once per temperature; returns the data sizes so far."""
    requests = write_instructions(config, tokenizer, target, target.device, deadline)
    num_request_batches = -(-config.self_instructions // config.instruction_batch)
    written = len(list((Path(config.work_dir) / "instructions").glob("*.json")))
    stats = {"requests_sampled": written * config.instruction_batch, "requests_kept": len(requests),
             "request_first_words": len({" ".join(text.split()[:2]).lower() for text in requests})}
    if written < num_request_batches:  # answers wait for every request, so their batches never change
        return stats
    (Path(config.work_dir) / REQUESTS_FILE).write_text(json.dumps(requests, indent=0, ensure_ascii=False), encoding="utf-8")
    answers = write_answers(config, tokenizer, target, target.device, prompts=[(text, True) for text in requests],
                            deadline=deadline)
    return {**stats, "answers": len(answers), "answer_files": len(answer_files(config)),
            "answer_files_planned": config.answer_rounds * -(-len(requests) // config.answer_batch)}


def data_complete(config: HeadGpuConfig, data: dict) -> bool:
    """Every request written, every answer file written and every one scored."""
    scored = shard_files(config) + sorted((Path(config.work_dir) / "shards").glob("*.empty"))
    return data.get("answer_files") == data.get("answer_files_planned") == len(scored) and not data.get("score_stopped")


def read_progress(config: HeadGpuConfig) -> dict:
    path = Path(config.work_dir) / PROGRESS_FILE
    return json.loads(path.read_text()) if path.exists() else {"data": {}, "minutes": {}}


def add_minutes(progress: dict, phase: str, seconds: float) -> None:
    progress["minutes"][phase] = round(progress["minutes"].get(phase, 0.0) + seconds / 60, 2)


class Frozen(NamedTuple):
    """What the head borrows from the target, as frozen float32 copies: the target can leave the device."""

    embed: torch.nn.Embedding  # the target's input embedding
    row_weight: torch.Tensor  # (rows, d): its output head's head rows
    row_index: torch.Tensor  # (vocab,): a token's index among the rows, -1 outside


def borrow_from(target, head_rows: torch.Tensor) -> Frozen:
    device = target.device
    vocab_size = target.get_output_embeddings().weight.shape[0]
    embed = torch.nn.Embedding.from_pretrained(target.get_input_embeddings().weight.detach().float().clone()).to(device)
    row_weight = target.get_output_embeddings().weight[head_rows.to(device)].detach().float().clone()  # (rows, d)
    return Frozen(embed, row_weight, row_index_of(head_rows, vocab_size).to(device))


def losses(head: DraftHead, frozen: Frozen, batch: dict, config: HeadGpuConfig,
           generator: torch.Generator | None = None) -> dict:
    """ttt_losses on a batch moved to the head's device; the input states shaken only with a generator."""
    device = frozen.row_weight.device
    batch = {key: value.to(device, non_blocking=True) for key, value in batch.items()}
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=config.autocast):
        return ttt_losses(head, frozen.embed, frozen.row_weight, frozen.row_index, batch, config.ttt_steps,
                          config.ttt_step_weight, config.feature_loss_weight, config.feature_noise, generator)


def evaluate(head: DraftHead, frozen: Frozen, config: HeadGpuConfig, shards: list[Path]) -> dict:
    """Held-out loss and, per depth, KL, feature loss and top-1 agreement (means over batches)."""
    head.eval()
    with torch.no_grad():
        metrics = mean_over_batches(losses(head, frozen, batch, config) for batch in held_out_batches(config, shards))
    head.train()
    return metrics


def take_step(head: DraftHead, optimiser: torch.optim.Optimizer, frozen: Frozen, batch: dict, config: HeadGpuConfig,
              step: int, total_steps: int) -> dict:
    """One optimiser step; the metrics stay on the device (no synchronisation per step)."""
    device = frozen.row_weight.device
    # Seeded by the step, so a resumed run draws the noise an unbroken one would.
    generator = torch.Generator(device).manual_seed(config.seed * 1_000_003 + step)
    metrics = losses(head, frozen, batch, config, generator)
    optimiser_step(head, optimiser, metrics["loss"], learning_rate(step, total_steps, config.lr, config.warmup_steps))
    return {key: value.detach().float() for key, value in metrics.items()}


def train(config: HeadGpuConfig, target, deadline: float | None) -> dict:
    """Phase 3: the head learns at every depth until its steps are done, the deadline passes or
    steps_this_run are taken; an epoch's end records its training means and the held-out figures."""
    work = Path(config.work_dir)
    checkpoint_path = work / CHECKPOINT_FILE
    state = torch.load(checkpoint_path, weights_only=False) if checkpoint_path.exists() else {}
    # A resumed run trains on the shards it began with, so its plan of batches does not move.
    shards = [work / "shards" / name for name in state["shards"]] if state else shard_files(config)
    training, held_out = split_held_out(config, shards)
    rows = rows_in(training)
    steps_per_epoch = sum(num for _, num in batches_per_group(config, rows, 0))
    if not held_out or not steps_per_epoch:
        raise SystemExit(f"{sum(rows)} training rows (a batch is {config.batch_size}) and {len(held_out)} held-out "
                         f"shards in {work}: run the generate and score phases (again) first")
    vocab_size = target.get_output_embeddings().weight.shape[0]
    head_rows = state["head_rows"] if state else choose_head_rows(config, training, vocab_size)
    frozen = borrow_from(target, head_rows)
    head = DraftHead(head_config_for(target.config, tuple(config.target_layers))).to(target.device)
    optimiser = torch.optim.AdamW(head.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    total_steps = max(1, int(config.epochs * steps_per_epoch))
    step, epochs, sums = state.get("step", 0), state.get("epochs", []), state.get("sums", {})
    if state:
        head.load_state_dict(state["head"])
        optimiser.load_state_dict(state["optimiser"])
    resumed_from, last_save = step, time.perf_counter()

    def save_checkpoint() -> None:
        save_atomically({"head": head.state_dict(), "optimiser": optimiser.state_dict(), "step": step, "epochs": epochs,
                         "sums": sums, "shards": [path.name for path in shards], "head_rows": head_rows},
                        checkpoint_path)

    def stops() -> bool:
        return (step == total_steps or bool(config.steps_this_run and step - resumed_from >= config.steps_this_run)
                or (deadline is not None and time.perf_counter() > deadline))

    while not stops():
        for batch in epoch_batches(config, training, rows, step // steps_per_epoch, step % steps_per_epoch):
            for key, value in take_step(head, optimiser, frozen, batch, config, step, total_steps).items():
                sums[key] = sums.get(key, 0.0) + value
            sums["steps"] = sums.get("steps", 0) + 1
            step += 1
            if step % steps_per_epoch == 0 or step == total_steps:  # an epoch's record
                means = {key: round(float(value) / sums["steps"], 4) for key, value in sums.items() if key != "steps"}
                epochs.append({"epoch": round(step / steps_per_epoch, 3), "step": step, "train": means,
                               "held_out": evaluate(head, frozen, config, held_out)})
                print(f"epoch {epochs[-1]['epoch']}: {json.dumps(epochs[-1])}", flush=True)
                sums = {}
            if stops():
                break
            if time.perf_counter() - last_save > config.checkpoint_minutes * 60:
                save_checkpoint()
                last_save = time.perf_counter()
    save_checkpoint()
    done = epochs and epochs[-1]["step"] == step  # the last epoch's record has the held-out figures
    return {"head": head, "head_rows": head_rows, "step": step, "total_steps": total_steps,
            "resumed_from_step": resumed_from, "epochs": epochs,
            "held_out": epochs[-1]["held_out"] if done else evaluate(head, frozen, config, held_out),
            "train_positions": sum(rows) * config.sequence_length,
            "held_out_positions": sum(rows_in(held_out)) * config.sequence_length, "shards": len(shards)}


def train_head_on_gpu(config: HeadGpuConfig) -> Path:
    """Run (or resume) the phases config.phase names within config.minutes; returns the head's folder
    (written whenever the train phase ran)."""
    started = time.perf_counter()
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: --device cpu runs the same recipe at dry-run sizes")
    device, dtype = choose_device_and_dtype(config.device)
    config = replace(config, autocast=config.autocast and dtype == torch.bfloat16)
    torch.set_num_threads(config.num_threads)
    work = start_run(config)
    ends = deadlines(config, started)
    target_name, tokenizer, target = load_target(config, dtype, device)
    progress = read_progress(config)
    phases = set(PHASE_SHARES) if config.phase == "all" else {config.phase}
    if "generate" in phases:
        at = clock(device)
        progress["data"].update(generate(config, tokenizer, target, ends["generate"]))
        add_minutes(progress, "generate", clock(device) - at)
    if "score" in phases:
        at = clock(device)
        done = score_answers(config, target, ends["score"])
        progress["data"].update(shards=len(shard_files(config)), shard_gib=round(done["shard_bytes"] / 2**30, 2),
                                score_stopped=done["stopped"])
        add_minutes(progress, "score", clock(device) - at)
    (work / PROGRESS_FILE).write_text(json.dumps(progress, indent=2))
    # Run alone, training takes what is there; after the other phases, only all of it: a head trained on part
    # of the data keeps its shards when resumed, so the rest would never be learnt.
    if "train" not in phases or (config.phase == "all" and not data_complete(config, progress["data"])):
        print(f"{config.phase}: {json.dumps(progress)}" + ("" if "train" not in phases else
              "\nnot trained yet: the data is not complete, run the same command again"))
        return Path(config.out_dir)
    at = clock(device)
    trained = train(config, target, ends["train"])
    add_minutes(progress, "train", clock(device) - at)
    (work / PROGRESS_FILE).write_text(json.dumps(progress, indent=2))
    return export(config, trained, progress, target_name, device, dtype)


def export(config: HeadGpuConfig, trained: dict, progress: dict, target_name: str, device: torch.device,
           dtype: torch.dtype) -> Path:
    """The head in the shipped format (int8 matrices, float16 scales: DraftHead.save), its rows, its log
    (training.json) and the requests it trained on."""
    settings = {key: value for key, value in asdict(config).items() if key not in ("out_dir", "work_dir", "target_id")}
    data = {**progress["data"], "train_positions": trained["train_positions"],
            "held_out_positions": trained["held_out_positions"], "shards_trained_on": trained["shards"]}
    summary = {
        "recipe": "head on a GPU (specviz.training.head_gpu)", "config": settings,
        "target": target_name,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "precision": precision_name(dtype), "data": data, "minutes": progress["minutes"],
        "steps": trained["step"], "total_steps": trained["total_steps"],
        "complete": trained["step"] == trained["total_steps"],
        "resumed_from_step": trained["resumed_from_step"], "epochs": trained["epochs"], "held_out": trained["held_out"],
        "num_params": sum(p.numel() for p in trained["head"].parameters()),
    }
    out_dir = Path(config.out_dir)
    trained["head"].cpu().save(out_dir, trained["head_rows"].cpu(), summary)
    requests = Path(config.work_dir) / REQUESTS_FILE
    if requests.exists():  # shipped beside it, so a test can check no held-out prompt is among them
        (out_dir / REQUESTS_FILE).write_text(requests.read_text(encoding="utf-8"), encoding="utf-8")
    print(f"held-out after {trained['step']}/{trained['total_steps']} steps: {json.dumps(trained['held_out'])}")
    print(f"saved the head to {out_dir.resolve()}")
    return out_dir
