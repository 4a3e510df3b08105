"""What a head run is set to (`python -m specviz train --recipe head`), and the settings each of its
phases derives from that: the target's own answers and its self-instructions in folders of their
own, a run that goes on from a trained head kept apart from it. The recipe is specviz.training.head_train.
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
    # The draft model's rows, so both drafters share a support (the shipped head has the first draft's: the
    # retrained draft, which learns from this recipe's teacher passes, chose its own, 80 % the same).
    head_rows_from: str = "assets/smollm2-draft/head_rows.json"
    target_id: str = ""  # empty: the default target
    seed: int = 1  # not the draft's seed 0: other prompts from the same templates
    num_prompts: int = 4096
    answer_batch: int = 128
    answer_tokens: int = 128
    # The templates give ~1,450 distinct prompts: each is answered at two of these temperatures.
    answer_temperatures: tuple[float, ...] = (0.0, 0.7, 1.0)
    answer_rounds: int = 1
    # The target's own answers to the same prompts, greedy and sampled: what the head meets when
    # drafting (a first run on draft-written text alone agreed with the target far less on
    # target text, and 768 greedy answers left it at 0.32 on unseen prompts: data-starved).
    target_prompts: int = 4096  # all of them (the templates give ~1,450): ~15 min in bfloat16 on a CPU with native bf16
    target_answer_temperatures: tuple[float, ...] = (0.0, 0.7)  # each prompt answered once at each
    target_answer_batch: int = 64
    target_answer_tokens: int = 128
    # Instructions the target writes itself (Magpie, arXiv 2406.08464): given only its chat template up
    # to the user's turn, an instruction-tuned model samples a user request; thousands of them span far
    # more than the templates (the head agreed 0.63 on templated text, 0.37-0.44 on the page's prompts).
    self_instructions: int = 4096  # requests sampled; the unfinished ones and duplicates are dropped
    instruction_temperature: float = 0.9
    instruction_tokens: int = 48
    instruction_batch: int = 128
    # Each request answered once, greedily or at T = 0.7 by batch: on this CPU new requests are worth
    # more than a second answer to the same one (which doubles the phase, ~45 min for ~3,000).
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
    # bfloat16 autocast for the head's training steps (weights and optimiser stay float32):
    # worth it on CUDA and on CPUs with native bf16.
    autocast: bool = False
    # A trained head's folder to go on from (fine-tuning): only new requests of the target's own are
    # written (use another seed) and answered, and the head, its rows and its requests start from it.
    init_from: str = ""
    # The target's lower layers the head reads besides the final one (indices into its hidden_states;
    # EAGLE-3 reads a low, a middle and a high one): () for the final state alone.
    target_layers: tuple[int, ...] = ()


def earlier_requests_of(config: HeadTrainConfig) -> list[str]:
    """The requests the head it goes on from trained on (none for a new head)."""
    if not config.init_from:
        return []
    return json.loads((Path(config.init_from) / REQUESTS_FILE).read_text(encoding="utf-8"))


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
