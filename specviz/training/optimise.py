"""What every recipe's training loop shares: its work folder, the learning-rate schedule, the optimiser
step, checkpoints that an interruption never corrupts (each recipe resumes from its last one) and
held-out means."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

import torch


def start_run(config) -> Path:
    """Seed torch with config.seed and make config.work_dir, the config saved in it: the recipe's caches and
    checkpoints lie there."""
    torch.manual_seed(config.seed)
    work = Path(config.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    (work / "config.json").write_text(json.dumps(asdict(config), indent=2, default=str))
    return work


def learning_rate(step: int, total_steps: int, peak_lr: float, warmup_steps: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def optimiser_step(model: torch.nn.Module, optimiser: torch.optim.Optimizer, loss: torch.Tensor, lr: float) -> None:
    """One AdamW step at `lr` on `loss`, the gradient's norm clipped to 1."""
    for group in optimiser.param_groups:
        group["lr"] = lr
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimiser.step()


def save_atomically(state: dict, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)  # atomic: an interrupted save never corrupts the last good checkpoint


def save_checkpoint(path: Path, step: int, **parts) -> None:
    """The step, and each part under its name: a model's or optimiser's state_dict, a generator's state."""
    states = {name: part.get_state() if isinstance(part, torch.Generator) else part.state_dict()
              for name, part in parts.items()}
    save_atomically({"step": step, **states}, path)


def resume(path: Path, device: torch.device, **parts) -> int:
    """Load what save_checkpoint saved into the same parts; the step it was saved at (0 without a checkpoint)."""
    if not path.exists():
        return 0
    state = torch.load(path, map_location=device, weights_only=False)
    for name, part in parts.items():
        (part.set_state if isinstance(part, torch.Generator) else part.load_state_dict)(state[name])
    print(f"resuming from step {state['step']} ({path})")
    return state["step"]


@torch.no_grad()
def held_out_means(model: torch.nn.Module, metrics: Iterable[dict]) -> dict[str, float]:
    """Each metric's mean over the held-out batches (rounded to 4 places), computed as they are drawn here, with
    `model` in eval mode and no gradients: tensors and floats alike."""
    model.eval()
    totals: Counter = Counter()
    num_batches = 0
    for batch_metrics in metrics:
        totals.update({key: float(value) for key, value in batch_metrics.items()})
        num_batches += 1
    model.train()
    return {key: round(value / num_batches, 4) for key, value in totals.items()}
