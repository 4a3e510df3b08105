"""The GPU recipe's training phase (specviz.training.head_gpu): AdamW on the head alone with training-time
test (specviz.training.head_ttt) over the scored shards (specviz.training.head_shards), bf16 autocast where
the hardware has it, a checkpoint every few minutes. A resumed run takes up the very step, batch and noise
an unbroken one would (tests/test_head_gpu_recipe.py), so --minutes can cut it anywhere.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import NamedTuple

import torch

from specviz.models.draft_head import DraftHead, head_config_for
from specviz.training.head_config import HeadGpuConfig
from specviz.training.head_shards import (
    batches_per_group, choose_head_rows, epoch_batches, held_out_batches, rows_in, shard_files, split_held_out,
)
from specviz.training.head_ttt import ttt_losses
from specviz.training.optimise import learning_rate, save_atomically
from specviz.training.teacher import row_index_of

CHECKPOINT_FILE = "head-checkpoint.pt"


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
    with torch.autocast(frozen.row_weight.device.type, dtype=torch.bfloat16, enabled=config.autocast):
        return ttt_losses(head, frozen.embed, frozen.row_weight, frozen.row_index, batch, config.ttt_steps,
                          config.ttt_step_weight, config.feature_loss_weight,
                          config.feature_noise if generator is not None else 0.0, generator)


def evaluate(head: DraftHead, frozen: Frozen, config: HeadGpuConfig, shards: list[Path]) -> dict:
    """Held-out loss and, per depth, KL, feature loss and top-1 agreement (means over batches)."""
    head.eval()
    totals: dict[str, float] = {}
    num_batches = 0
    with torch.no_grad():
        for batch in held_out_batches(config, shards):
            metrics = losses(head, frozen, {key: value.to(frozen.row_weight.device) for key, value in batch.items()}, config)
            for key, value in metrics.items():
                totals[key] = totals.get(key, 0.0) + float(value)
            num_batches += 1
    head.train()
    return {key: round(value / max(1, num_batches), 4) for key, value in totals.items()}


def take_step(head: DraftHead, optimiser: torch.optim.Optimizer, frozen: Frozen, batch: dict, config: HeadGpuConfig,
              step: int, total_steps: int) -> dict:
    """One optimiser step; the metrics stay on the device (no synchronisation per step)."""
    device = frozen.row_weight.device
    for group in optimiser.param_groups:
        group["lr"] = learning_rate(step, total_steps, config.lr, config.warmup_steps)
    # Seeded by the step, so a resumed run draws the noise an unbroken one would.
    generator = torch.Generator(device).manual_seed(config.seed * 1_000_003 + step)
    metrics = losses(head, frozen, {key: value.to(device, non_blocking=True) for key, value in batch.items()}, config,
                     generator)
    optimiser.zero_grad(set_to_none=True)
    metrics["loss"].backward()
    torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
    optimiser.step()
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
                         "sums": sums, "shards": [path.name for path in shards], "head_rows": head_rows}, checkpoint_path)

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
    final = epochs[-1]["held_out"] if epochs and epochs[-1]["step"] == step else evaluate(head, frozen, config, held_out)
    return {"head": head, "head_rows": head_rows, "step": step, "total_steps": total_steps,
            "resumed_from_step": resumed_from, "epochs": epochs, "held_out": final, "train_positions": sum(rows) * config.sequence_length,
            "held_out_positions": sum(rows_in(held_out)) * config.sequence_length, "shards": len(shards)}
