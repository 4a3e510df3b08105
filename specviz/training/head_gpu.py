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
3. **train**: AdamW on the head with training-time test over `ttt_steps` depths (specviz.training.head_ttt),
   bf16 autocast on CUDA, a checkpoint every few minutes; then the head in the shipped format (int8) and
   its log: data sizes, minutes per phase, loss and agreement per depth per epoch (training.json).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from specviz.decoding.engine import clock
from specviz.models.precision import choose_device_and_dtype
from specviz.training.head_config import PHASE_SHARES, REQUESTS_FILE, HeadGpuConfig
from specviz.training.head_gpu_train import train
from specviz.training.head_shards import answer_files, score_answers, shard_files
from specviz.training.head_train import write_instructions
from specviz.training.teacher import load_target, write_answers

PROGRESS_FILE = "progress.json"  # data sizes and minutes per phase, summed over every command so far


def deadlines(config: HeadGpuConfig, started: float) -> dict[str, float | None]:
    """When each phase must stop starting new work: its share of --minutes (all of it when run alone)."""
    if not config.minutes:
        return dict.fromkeys(PHASE_SHARES)
    if config.phase != "all":
        return dict.fromkeys(PHASE_SHARES, started + 0.95 * config.minutes * 60)
    ends, at = {}, started
    for phase, share in PHASE_SHARES.items():
        at += share * config.minutes * 60
        ends[phase] = at
    return ends


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


def train_head_on_gpu(config: HeadGpuConfig) -> Path:
    """Run (or resume) the phases config.phase names within config.minutes; returns the head's folder
    (written whenever the train phase ran)."""
    started = time.perf_counter()
    if config.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: --device cpu runs the same recipe at dry-run sizes")
    device, dtype = choose_device_and_dtype(config.device)
    config = replace(config, autocast=config.autocast and dtype == torch.bfloat16)
    torch.set_num_threads(config.num_threads)
    torch.manual_seed(config.seed)
    work = Path(config.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    (work / "config.json").write_text(json.dumps(asdict(config), indent=2, default=str))
    ends = deadlines(config, started)
    target_id, tokenizer, target = load_target(config, dtype, device)
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
    return export(config, trained, progress, target_id, device, dtype)


def export(config: HeadGpuConfig, trained: dict, progress: dict, target_id: str, device: torch.device,
           dtype: torch.dtype) -> Path:
    """The head in the shipped format (int8 matrices, float16 scales: DraftHead.save), its rows, its log
    (training.json) and the requests it trained on."""
    settings = {key: value for key, value in asdict(config).items() if key not in ("out_dir", "work_dir", "target_id")}
    data = {**progress["data"], "train_positions": trained["train_positions"],
            "held_out_positions": trained["held_out_positions"], "shards_trained_on": trained["shards"]}
    summary = {
        "recipe": "head on a GPU (specviz.training.head_gpu)", "config": settings,
        "target": Path(target_id).name if Path(target_id).exists() else target_id,  # no machine paths
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "precision": str(dtype).removeprefix("torch."), "data": data, "minutes": progress["minutes"],
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
