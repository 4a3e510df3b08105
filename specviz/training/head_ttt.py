"""Training-time test for the head drafter (EAGLE-3, arXiv 2503.01840; HASS, arXiv 2408.15766).

When the head drafts, only a round's first guess reads the target's true state; every later one
reads the head's own prediction, attending to the true states before the round and to its own
chain inside it. Training on true states alone teaches the first step only. Here the head is run
`num_steps` times over a whole row, each step on the previous step's predictions, with the mask a
drafting head would see, and a loss at every step:

    depth 1, position j: reads (f_j, e(x_{j+1}))            sees depth-1 keys at ≤ j
    depth s, position j: reads (f̂ˢ⁻¹_{j-1}, e(x_{j+1}))     sees depth-1 keys at ≤ j-s+1 and the
                                                             depth-t key at j-s+t for t = 2..s
    every depth predicts f_{j+1}, which the target turns into its distribution for x_{j+2}.

So depth s at position j is exactly the s-th draft of a round whose last committed token is
x_{j-s+2}: the engine's HeadDrafter computes the same numbers (tests/test_head_gpu_recipe.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from specviz.models.draft_head import DraftHead
from specviz.training.head_config import HeadGpuConfig


def ttt_mask(length: int, depth: int, device: torch.device) -> torch.Tensor:
    """(1, 1, length, depth·length) booleans, True where depth `depth`'s query j may look among the
    keys of depths 1..depth laid side by side (each `length` long)."""
    query = torch.arange(length, device=device).view(-1, 1)  # (m, 1)
    key = torch.arange(length, device=device).view(1, -1)  # (1, m)
    blocks = [key <= query - depth + 1]  # depth 1: the true states before the round
    blocks += [key == query - depth + t for t in range(2, depth + 1)]  # the round's own chain, one key a depth
    return torch.cat(blocks, dim=1).view(1, 1, length, depth * length)


def draft_ahead(head: DraftHead, features: torch.Tensor, embeddings: torch.Tensor, num_steps: int) -> list[torch.Tensor]:
    """The head's predictions at depths 1..num_steps, num_steps tensors (b, m, d), from the target's true
    states at positions 0..m-1 (b, m, d·(1+n), with any lower layers) and the embeddings of tokens 1..m
    (b, m, d); at depth s the first s-1 positions have no chain behind them and are not to be scored."""
    batch, length = embeddings.shape[:2]
    positions = torch.arange(length, device=embeddings.device).expand(batch, -1)  # (b, m)
    cache = DynamicCache()  # the keys of every depth so far, side by side; gradients flow through it
    predicted = [head(features, embeddings, cache, positions, ttt_mask(length, 1, embeddings.device))]
    for depth in range(2, num_steps + 1):
        previous = predicted[-1]  # (b, m, d): f̂ at positions 1..m
        # Position j reads the guess made at j-1 (a d-wide input: the lower layers read as zeros, as in drafting).
        inputs = torch.cat([torch.zeros_like(previous[:, :1]), previous[:, :-1]], dim=1)  # (b, m, d)
        mask = ttt_mask(length, depth, embeddings.device)  # (1, 1, m, depth·m)
        predicted.append(head(inputs, embeddings, cache, positions, mask))
    return predicted


def head_inputs(head: DraftHead, embed: torch.nn.Module, row_index: torch.Tensor, batch: dict, feature_noise: float,
                generator: torch.Generator | None) -> tuple[torch.Tensor, ...]:
    """What the head's losses (this recipe's and the CPU recipe's) read from a batch of packed rows (b, L):
    the target's states (b, L, d: the regression target), the head's inputs (b, L-1, d·(1+n): the states of
    positions 0..L-2, lightly shaken when there is a generator, then any lower layers), the embeddings of
    tokens 1..L-1, the teacher's top-k as head-row indices (b, L, k: -1 outside the head rows) and its
    probabilities renormalised over the head rows."""
    features = batch["features"].float()  # (b, L, d)
    teacher_rows = row_index[batch["label_ids"].long()]  # (b, L, k)
    teacher_probs = torch.softmax(batch["label_log_probs"].float(), -1) * (teacher_rows >= 0)  # (b, L, k)
    teacher_probs = teacher_probs / teacher_probs.sum(-1, keepdim=True).clamp(min=1e-6)
    inputs = features[:, :-1]  # (b, m, d), m = L-1
    if feature_noise > 0 and generator is not None:
        scale = inputs.pow(2).mean(-1, keepdim=True).sqrt()  # (b, m, 1)
        # Drawn on the generator's device: the CPU recipe's generator is a CPU one wherever the states are.
        noise = torch.rand(inputs.shape, generator=generator, device=generator.device).to(inputs.device) * 2 - 1
        inputs = inputs + noise * feature_noise * scale
    if head.target_layers:  # the lower layers follow the final state, as the engine hands them over
        inputs = torch.cat([inputs, batch["layer_features"][:, :-1].float()], dim=-1)  # (b, m, d·(1+n))
    return features, inputs, embed(batch["tokens"][:, 1:].long()), teacher_rows, teacher_probs


def ttt_losses(head: DraftHead, embed: torch.nn.Module, row_weight: torch.Tensor, row_index: torch.Tensor,
               batch: dict, config: HeadGpuConfig, generator: torch.Generator | None) -> dict:
    """The loss (a tensor) and, per depth s ≤ ttt_steps, KL, feature loss and top-1 agreement with the target. At
    depth s: KL from the target's top-k (renormalised over the head rows) to q over the head rows, plus
    smooth-L1 from the predicted state to the true one; depth s weighs ttt_step_weight^(s-1)."""
    features, inputs, embeddings, teacher_rows, teacher_probs = head_inputs(head, embed, row_index, batch,
                                                                            config.feature_noise, generator)
    truth, rows = features[:, 1:], teacher_rows[:, 1:].clamp(min=0)  # (b, m, d), (b, m, k)
    probs, first = teacher_probs[:, 1:], teacher_rows[:, 1:, 0]  # (b, m, k), (b, m)
    loss, metrics = 0.0, {}
    for depth, predicted in enumerate(draft_ahead(head, inputs, embeddings, config.ttt_steps), start=1):
        scored = slice(depth - 1, None)  # positions with a whole chain behind them
        log_q = torch.log_softmax((predicted[:, scored] @ row_weight.T).float(), -1)  # (b, m-s+1, rows)
        kl = -(probs[:, scored] * log_q.gather(-1, rows[:, scored])).sum(-1).mean()
        feature = F.smooth_l1_loss(predicted[:, scored].float(), truth[:, scored])
        loss = loss + config.ttt_step_weight ** (depth - 1) * (kl + config.feature_loss_weight * feature)
        agree = log_q.argmax(-1) == first[:, scored]  # (b, m-s+1): -1 (outside the rows) never agrees
        metrics[f"agreement_{depth}"] = agree.float().mean().detach()
        metrics[f"kl_{depth}"] = kl.detach()
        metrics[f"feature_{depth}"] = feature.detach()
    metrics["loss"] = loss
    return metrics
