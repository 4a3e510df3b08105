"""What every recipe's training loop shares: the learning-rate schedule, and checkpoints that an
interruption never corrupts (each recipe resumes from its last one)."""

from __future__ import annotations

import math
from pathlib import Path

import torch


def learning_rate(step: int, total_steps: int, peak_lr: float, warmup_steps: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def save_atomically(state: dict, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)  # atomic: an interrupted save never corrupts the last good checkpoint
