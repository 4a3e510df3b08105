"""The head drafter's GPU recipe (`python -m specviz train --recipe head --device cuda --minutes N`).

On a GPU the target writes and scores text far faster than on the CPU recipe's two cores
(specviz.training.head_train), so here it writes its own requests and answers at scale, and the head
trains as it drafts. Three phases, each resumable from its files in work_dir, so a command that runs
out of --minutes is simply run again:

1. **generate**: requests of the target's own (Magpie, as the CPU recipe's phase 0), each answered
   greedily and at T = 0.7 in large left-padded batches; one file per batch.
2. **score**: one teacher-forced pass per answer file, one shard on disk each.
3. **train**: AdamW on the head alone with training-time test over `ttt_steps` depths (head_ttt),
   a checkpoint every few minutes; a resumed run takes up the very step, batch and noise an unbroken
   one would. Then the head (int8) and its log (training.json).

A shard holds teacher.score_rows' tensors for its answers packed into rows: ~1.3 kB a position for SmolLM2
with top-20, more than is comfortable in RAM beside the target at GPU sizes, hence shards are read back
memory-mapped (rows read from disk as a batch gathers them), a shuffled group at a time.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, replace
from itertools import accumulate
from pathlib import Path
from typing import NamedTuple

import torch
from tqdm import tqdm

from specviz.decoding.engine import clock
from specviz.models.draft_head import DraftHead, head_config_for
from specviz.models.precision import choose_device_and_dtype, precision_name
from specviz.training.head_config import PHASE_SHARES, REQUESTS_FILE, HeadGpuConfig
from specviz.training.head_train import write_instructions
from specviz.training.head_ttt import ttt_losses
from specviz.training.optimise import held_out_means, learning_rate, optimiser_step, save_atomically, start_run
from specviz.training.teacher import load_target, pack_rows, row_index_of, score_rows, write_answers

PROGRESS_FILE = "progress.json"  # data sizes and minutes per phase, summed over every command so far
CHECKPOINT_FILE = "head-checkpoint.pt"
ANSWERS, SHARDS = "answers", "shards"


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
    written = len(list((Path(config.work_dir) / "instructions").glob("*.json")))
    stats = {"requests_sampled": written * config.instruction_batch, "requests_kept": len(requests),
             "request_first_words": len({" ".join(text.split()[:2]).lower() for text in requests})}
    if written < -(-config.self_instructions // config.instruction_batch):
        return stats  # answers wait for every request, so their batches never change
    (Path(config.work_dir) / REQUESTS_FILE).write_text(json.dumps(requests, indent=0, ensure_ascii=False), encoding="utf-8")
    answers = write_answers(config, tokenizer, target, target.device, prompts=[(text, True) for text in requests],
                            deadline=deadline)
    return {**stats, "answers": len(answers), "answer_files": len(batch_files(config, ANSWERS)),
            "answer_files_planned": config.answer_rounds * -(-len(requests) // config.answer_batch)}


def batch_files(config: HeadGpuConfig, folder: str) -> list[Path]:
    """The answer files write_answers wrote (folder ANSWERS), or their shards (SHARDS), round by round
    (r0-0000.pt, r0-0001.pt, …, r1-0000.pt, …)."""
    return sorted((Path(config.work_dir) / folder).glob("r*-*.pt"))


def score_answers(config: HeadGpuConfig, target, deadline: float | None) -> dict:
    """Phase 2: a shard for every answer file that has none yet, until the deadline or the disk budget;
    returns the shards' count and size and why it stopped early ("" if it did not)."""
    folder = Path(config.work_dir) / SHARDS
    folder.mkdir(parents=True, exist_ok=True)
    device = next(target.parameters()).device
    used = sum(path.stat().st_size for path in batch_files(config, SHARDS))
    stopped = ""
    for path in tqdm(batch_files(config, ANSWERS), desc="teacher pass (shards)"):
        shard = folder / path.name
        if shard.exists() or shard.with_suffix(".empty").exists():
            continue
        if deadline is not None and time.perf_counter() > deadline:
            stopped = "time budget"
            break
        rows = pack_rows(torch.load(path), config.sequence_length, config.seed)  # (rows, L)
        if not len(rows):  # a file too short for one row (tiny runs only): marked, so it is not packed again
            shard.with_suffix(".empty").touch()
            continue
        parts = [score_rows(target, rows[start : start + config.score_batch].long().to(device), config.teacher_top_k,
                            config.target_layers) for start in range(0, len(rows), config.score_batch)]
        data = {key: torch.cat([part[key] for part in parts]) for key in parts[0]}
        size = sum(value.numel() * value.element_size() for value in data.values())
        if used + size > config.disk_budget_gib * 2**30:
            stopped = "disk budget"
            break
        data["layers"] = list(config.target_layers)
        save_atomically(data, shard)
        used += size
    return {"shards": len(batch_files(config, SHARDS)), "shard_gib": round(used / 2**30, 2), "score_stopped": stopped}


def data_complete(config: HeadGpuConfig, data: dict) -> bool:
    """Every request written, every answer file written and every one scored."""
    scored = batch_files(config, SHARDS) + sorted((Path(config.work_dir) / SHARDS).glob("*.empty"))
    return data.get("answer_files") == data.get("answer_files_planned") == len(scored) and not data.get("score_stopped")


def read_progress(config: HeadGpuConfig) -> dict:
    path = Path(config.work_dir) / PROGRESS_FILE
    return json.loads(path.read_text()) if path.exists() else {"data": {}, "minutes": {}}


def add_minutes(progress: dict, phase: str, seconds: float) -> None:
    progress["minutes"][phase] = round(progress["minutes"].get(phase, 0.0) + seconds / 60, 2)


def rows_in(paths: list[Path]) -> list[int]:
    return [len(torch.load(path, mmap=True)["tokens"]) for path in paths]


def split_held_out(config: HeadGpuConfig, shards: list[Path]) -> tuple[list[Path], list[Path]]:
    """(training shards, held-out shards): the first held_out_batches answer batches of every round are held
    out (full batches, unlike the last), so the requests answered there are never trained on, greedy or sampled."""
    held = {f"{index:04d}" for index in range(config.held_out_batches)}
    return ([path for path in shards if path.stem.split("-")[1] not in held],
            [path for path in shards if path.stem.split("-")[1] in held])


def choose_head_rows(config: HeadGpuConfig, shards: list[Path], vocab_size: int) -> torch.Tensor:
    """The head's output rows (sorted ids): head_rows_from's, else the num_head_rows tokens the target
    ranks first most often in the training shards (ties to the smaller id)."""
    if config.head_rows_from:
        return torch.tensor(json.loads(Path(config.head_rows_from).read_text()), dtype=torch.long)
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for path in shards:
        top1 = torch.load(path, mmap=True)["label_ids"][..., 0]  # (rows, L)
        counts += torch.bincount(top1.flatten().long(), minlength=vocab_size)[:vocab_size]
    order = torch.argsort(-counts, stable=True)  # (vocab,): most often first, ties by id
    return order[: min(config.num_head_rows, vocab_size)].sort().values


def batches_per_group(config: HeadGpuConfig, rows: list[int], epoch: int) -> list[tuple[list[int], int]]:
    """An epoch's plan: (shard indices of each group, its number of batches). The groups are the same every
    epoch, so an epoch always has the same number of steps (a resumed run finds its place by counting);
    their order and the rows inside them are shuffled per epoch."""
    mixed = torch.randperm(len(rows), generator=torch.Generator().manual_seed(config.seed * 7919)).tolist()
    groups = [mixed[start : start + config.shuffle_shards] for start in range(0, len(mixed), config.shuffle_shards)]
    order = torch.randperm(len(groups), generator=torch.Generator().manual_seed(config.seed * 7919 + 1 + epoch)).tolist()
    return [(groups[index], sum(rows[i] for i in groups[index]) // config.batch_size) for index in order]


def epoch_batches(config: HeadGpuConfig, shards: list[Path], rows: list[int], epoch: int,
                  skip: int) -> Iterator[dict[str, torch.Tensor]]:
    """The batches of one epoch after its first `skip` (a resumed run's), each the same on every run:
    groups of shuffle_shards shards in a seeded order, their rows shuffled together (a group's partial last
    batch dropped)."""
    for group_index, (group, num_batches) in enumerate(batches_per_group(config, rows, epoch)):
        if skip >= num_batches:  # a whole group done before the interruption: not even read
            skip -= num_batches
            continue
        loaded = [torch.load(shards[i], mmap=True) for i in group]
        data = {key: torch.cat([shard[key] for shard in loaded]) for key in loaded[0] if key != "layers"}
        generator = torch.Generator().manual_seed(config.seed * 104_729 + epoch * 1009 + group_index)
        order = torch.randperm(len(data["tokens"]), generator=generator)
        for index in range(skip, num_batches):
            picks = order[index * config.batch_size : (index + 1) * config.batch_size]
            yield {key: value[picks] for key, value in data.items()}
        skip = 0


def held_out_batches(config: HeadGpuConfig, shards: list[Path]) -> Iterator[dict[str, torch.Tensor]]:
    """The held-out shards' rows in order, batch by batch."""
    for path in shards:
        shard = torch.load(path, mmap=True)
        for start in range(0, len(shard["tokens"]), config.batch_size):
            yield {key: value[start : start + config.batch_size] for key, value in shard.items() if key != "layers"}


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
        return ttt_losses(head, frozen.embed, frozen.row_weight, frozen.row_index, batch, config, generator)


def evaluate(head: DraftHead, frozen: Frozen, config: HeadGpuConfig, shards: list[Path]) -> dict:
    """Held-out loss and, per depth, KL, feature loss and top-1 agreement (means over batches)."""
    return held_out_means(head, (losses(head, frozen, batch, config) for batch in held_out_batches(config, shards)))


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
    shards = [work / SHARDS / name for name in state["shards"]] if state else batch_files(config, SHARDS)
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
    step, epochs, sums = state.get("step", 0), state.get("epochs", []), Counter(state.get("sums", {}))
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
            sums.update({**take_step(head, optimiser, frozen, batch, config, step, total_steps), "steps": 1})
            step += 1
            if step % steps_per_epoch == 0 or step == total_steps:  # an epoch's record
                means = {key: round(float(value) / sums["steps"], 4) for key, value in sums.items() if key != "steps"}
                epochs.append({"epoch": round(step / steps_per_epoch, 3), "step": step, "train": means,
                               "held_out": evaluate(head, frozen, config, held_out)})
                print(f"epoch {epochs[-1]['epoch']}: {json.dumps(epochs[-1])}", flush=True)
                sums = Counter()
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
        progress["data"].update(score_answers(config, target, ends["score"]))
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
        "recipe": "head on a GPU (specviz.training.head_gpu)", "config": settings, "target": target_name,
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
