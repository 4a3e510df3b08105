"""The GPU recipe's teacher signal on disk (specviz.training.head_gpu): one shard per answer file, written
by one teacher-forced target pass, and read back in shuffled groups for training.

A shard holds, for its answers packed into rows of sequence_length: the token ids (int32), the target's
final hidden state at every position (float16), those of any lower layers the head reads (bfloat16:
middle layers reach ~1e4 at a row's first position), and its top-k next-token ids (int32) and
log-probabilities (float16): ~1.3 kB a position for SmolLM2 with top-20, so 20 M positions take ~26 GB,
more than is comfortable in RAM beside the target, hence shards read a group at a time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from tqdm import tqdm

from specviz.training.head_config import HeadGpuConfig
from specviz.training.optimise import save_atomically
from specviz.training.teacher import pack_rows, score_rows

ANSWERS, SHARDS = "answers", "shards"


def answer_files(config: HeadGpuConfig) -> list[Path]:
    """The answer files write_answers wrote, round by round (r0-0000.pt, r0-0001.pt, …, r1-0000.pt, …)."""
    return sorted((Path(config.work_dir) / ANSWERS).glob("r*-*.pt"))


def shard_files(config: HeadGpuConfig) -> list[Path]:
    return sorted((Path(config.work_dir) / SHARDS).glob("r*-*.pt"))


def score_answers(config: HeadGpuConfig, target, deadline: float | None) -> dict:
    """Phase 2: a shard for every answer file that has none yet, until the deadline or the disk budget;
    returns what was done ({"shards_written", "stopped"})."""
    folder = Path(config.work_dir) / SHARDS
    folder.mkdir(parents=True, exist_ok=True)
    device = next(target.parameters()).device
    used = sum(path.stat().st_size for path in shard_files(config))
    written, stopped = 0, ""
    for path in tqdm(answer_files(config), desc="teacher pass (shards)"):
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
        written += 1
    return {"shards_written": written, "stopped": stopped, "shard_bytes": used}


def load_shard(path: Path) -> dict:
    """A shard's tensors, memory-mapped: rows are read from disk as a batch gathers them."""
    return torch.load(path, mmap=True)


def rows_in(paths: list[Path]) -> list[int]:
    return [len(load_shard(path)["tokens"]) for path in paths]


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
        counts += torch.bincount(load_shard(path)["label_ids"][..., 0].flatten().long(), minlength=vocab_size)[:vocab_size]
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
        loaded = [load_shard(shards[i]) for i in group]
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
        shard = load_shard(path)
        for start in range(0, len(shard["tokens"]), config.batch_size):
            yield {key: value[start : start + config.batch_size] for key, value in shard.items() if key != "layers"}
