"""What a head run is set to (specviz.training.head_train) and the settings each phase derives from it;
the GPU recipe's (specviz.training.head_gpu) HeadGpuConfig, its GPU and CPU dry-run sizes in HEAD_SIZES.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from specviz.models.draft_head import CONFIG_FILE
from specviz.training.teacher import SELF_INSTRUCT, TARGET

REQUESTS_FILE = "self_instructions.json"


@dataclass
class HeadTrainConfig:
    """Everything that determines the head; saved beside the checkpoints."""

    out_dir: str = "assets/smollm2-head"
    work_dir: str = str(Path.home() / ".cache" / "specviz" / "head")
    head_rows_from: str = "assets/smollm2-draft/head_rows.json"  # the draft model's: both drafters share a support
    target_id: str = ""  # empty: the default target
    seed: int = 1  # not the draft's seed 0: other prompts from the same templates
    num_prompts: int = 4096
    answer_batch: int = 128
    answer_tokens: int = 128
    answer_temperatures: tuple[float, ...] = (0.0, 0.7, 1.0)  # each templated prompt answered at two of these
    answer_rounds: int = 1
    # The target's own answers to the same prompts, greedy and sampled: what the head meets when drafting.
    target_prompts: int = 4096  # all of them
    target_answer_temperatures: tuple[float, ...] = (0.0, 0.7)  # each prompt answered once at each
    target_answer_batch: int = 64
    target_answer_tokens: int = 128
    # Instructions the target writes itself (Magpie, arXiv 2406.08464): given only its chat template up to
    # the user's turn, an instruction-tuned model samples a user request; thousands span far more than the templates.
    self_instructions: int = 4096  # requests sampled; the unfinished ones and duplicates are dropped
    instruction_temperature: float = 0.9
    instruction_tokens: int = 48
    instruction_batch: int = 128
    # Each request answered once, greedily or at T = 0.7 by batch: on a CPU a new request is worth more
    # than a second answer to the same one.
    self_instruct_rounds: int = 1
    label_batch: int = 8
    teacher_top_k: int = 16
    teacher_minutes: float = 0.0  # > 0: stop writing new teacher batches after this long (a CPU budget)
    sequence_length: int = 256
    batch_size: int = 8
    epochs: float = 3.0
    lr: float = 1e-3
    warmup_steps: int = 40
    weight_decay: float = 0.0
    feature_loss_weight: float = 1.0
    feature_noise: float = 0.05  # uniform noise (± this, relative to a feature's RMS) on input features
    held_out_fraction: float = 0.03
    checkpoint_every: int = 100
    train_minutes: float = 0.0  # > 0: stop training after this long and export what there is
    num_threads: int = 2
    autocast: bool = False  # bfloat16 autocast for the head's steps (weights stay float32): where the hardware has it
    # A trained head's folder to go on from (fine-tuning): only new requests of the target's own are
    # written (use another seed) and answered, and the head, its rows and its requests start from it.
    init_from: str = ""
    # The target's lower layers the head reads besides the final one (indices into its hidden_states;
    # EAGLE-3 reads a low, a middle and a high one): () for the final state alone.
    target_layers: tuple[int, ...] = ()


def apart_from_the_head_it_reads(config: HeadTrainConfig) -> HeadTrainConfig:
    """A run that goes on keeps its caches and its head apart from the head it reads: left at their
    defaults, it would resume a from-scratch run's cached requests (all dropped as seen) and its
    checkpoint, and write over that head. So its defaults are a folder of its own per seed."""
    if not config.init_from:
        return config
    defaults = HeadTrainConfig()
    work_dir = config.work_dir
    if work_dir == defaults.work_dir:
        work_dir = str(Path(defaults.work_dir).parent / f"head-went-on-seed{config.seed}")
    out_dir = config.out_dir if config.out_dir != defaults.out_dir else str(Path(work_dir) / "head")
    return replace(config, work_dir=work_dir, out_dir=out_dir)


def check_the_layers_it_goes_on_with(config: HeadTrainConfig) -> None:
    """A run that goes on from a head reading lower layers must read the same ones: say so before the
    data phases, not after them (a head reading the final state alone may add layers)."""
    if not config.init_from:
        return
    read = json.loads((Path(config.init_from) / CONFIG_FILE).read_text()).get("target_layers") or []
    if read and read != list(config.target_layers):
        raise SystemExit(f"the head in {config.init_from} reads the target's layers {read}: "
                         f"go on with --target-layers {','.join(map(str, read))}")


def self_instruct_config(config: HeadTrainConfig) -> HeadTrainConfig:
    """The target answers its own requests as it answers the templated ones, in a folder of their own."""
    return replace(target_config(config), work_dir=str(Path(config.work_dir) / SELF_INSTRUCT),
                   answer_rounds=config.self_instruct_rounds)


def target_config(config: HeadTrainConfig) -> HeadTrainConfig:
    """The same recipe for the target's own answers, cached in a folder of their own."""
    return replace(config, work_dir=str(Path(config.work_dir) / TARGET), num_prompts=config.target_prompts,
                   answer_temperatures=config.target_answer_temperatures,
                   answer_rounds=len(config.target_answer_temperatures),
                   answer_batch=config.target_answer_batch, answer_tokens=config.target_answer_tokens, teacher_minutes=0.0)


PHASES = ("generate", "score", "train", "all")
# Each phase's share of --minutes when one command runs them all; the rest is the export's margin.
PHASE_SHARES = {"generate": 0.6, "score": 0.12, "train": 0.23}


@dataclass
class HeadGpuConfig:
    """The GPU recipe (`train --recipe head --device cuda`; specviz.training.head_gpu): the defaults are the
    GPU's sizes; HEAD_SIZES["cpu"] is the same recipe at dry-run sizes. Seeded; every phase resumes from
    its files in work_dir."""

    device: str = "cuda"
    # Not assets/: a new head ships only where it measured better on held-out prompts.
    out_dir: str = str(Path.home() / ".cache" / "specviz" / "head-gpu" / "head")
    work_dir: str = str(Path.home() / ".cache" / "specviz" / "head-gpu")
    target_id: str = ""  # empty: the default target
    seed: int = 1
    minutes: float = 0.0  # this command's budget (0: none), split over its phases by PHASE_SHARES
    phase: str = "all"  # one of PHASES: a command that cannot hold them all runs them one by one
    num_threads: int = 8
    # generate: requests of its own (Magpie, as the CPU recipe's phase 0) ...
    self_instructions: int = 81_920  # sampled; those unfinished within instruction_tokens are dropped
    instruction_temperature: float = 0.9
    instruction_tokens: int = 48
    # Batches of 4,096: a step of generate() on a 135 M target is bound by its kernel launches, not by
    # arithmetic, so 4× the rows of 1,024 should cost little more per step, for 4× fewer steps.
    instruction_batch: int = 4096
    # ... each answered once per temperature (round r, batch b answers at temperature (b + r) mod 2)
    answer_batch: int = 4096
    answer_tokens: int = 192
    answer_temperatures: tuple[float, ...] = (0.0, 0.7)
    answer_rounds: int = 2
    num_prompts: int = 0  # templated prompts: none here (teacher.AnswerRecipe asks for the field)
    # score: one teacher-forced pass, one shard per answer file
    sequence_length: int = 256
    score_batch: int = 128  # rows per target forward: the logits of all their positions are held at once
    teacher_top_k: int = 20
    target_layers: tuple[int, ...] = ()  # with 3 lower layers a position takes 4.7 kB, not 1.3: ~9 M fit the disk
    disk_budget_gib: float = 40.0  # shards stop here (the machine has 64 GiB of disk)
    # train: AdamW on the head with training-time test
    head_rows_from: str = ""  # a head_rows.json; empty: the tokens the target ranks first most often here
    num_head_rows: int = 8192
    ttt_steps: int = 3  # depths trained: the first reads true states, the rest the head's own
    ttt_step_weight: float = 0.8  # depth s weighs this^(s-1)
    batch_size: int = 64
    epochs: float = 3.0
    lr: float = 1e-3
    warmup_steps: int = 100
    weight_decay: float = 0.0
    feature_loss_weight: float = 1.0
    feature_noise: float = 0.05  # uniform noise (± this × a state's RMS) on the true states depth 1 reads
    held_out_batches: int = 1  # the first answer batches of every round: requests the head never trains on
    shuffle_shards: int = 8  # shards mixed per group before their rows are shuffled
    checkpoint_minutes: float = 2.0
    steps_this_run: int = 0  # > 0: stop after this many optimiser steps (a smoke run)
    autocast: bool = True  # bfloat16 autocast where the hardware has it (CUDA; CPUs with native bf16)


DRY_RUN_DIR = Path.home() / ".cache" / "specviz" / "head-gpu-dry-run"
HEAD_SIZES: dict[str, HeadGpuConfig] = {
    "cuda": HeadGpuConfig(),
    # A dry run on a CPU (minutes, resumed over a few commands; one thread: a shared CPU): a few dozen requests,
    # short answers, a handful of steps; the same code and phases as on the GPU.
    "cpu": HeadGpuConfig(device="cpu", work_dir=str(DRY_RUN_DIR), out_dir=str(DRY_RUN_DIR / "head"), num_threads=1,
                         self_instructions=32, instruction_batch=8, answer_batch=8, answer_tokens=48, sequence_length=128,
                         score_batch=8, disk_budget_gib=1.0, batch_size=4, epochs=2.0, warmup_steps=2, shuffle_shards=4,
                         checkpoint_minutes=0.5),
}


def head_gpu_config(device: str, **overrides) -> HeadGpuConfig:
    """The recipe's sizes for a device (cuda, cuda:1, cpu), with the command line's overrides."""
    config = replace(HEAD_SIZES["cuda" if device.startswith("cuda") else "cpu"], device=device, **overrides)
    if config.phase not in PHASES:
        raise SystemExit(f"--phase must be one of {', '.join(PHASES)}, got {config.phase!r}")
    return config
