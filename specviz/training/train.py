"""Train the tiny-code model pair (`python -m specviz train --recipe tiny-code`): a small GPT-2 target and
a tiny draft distilled from it, on the running interpreter's standard library (specviz.training.code_corpus).
Code is the classic use of speculative decoding: indentation, keywords and closing brackets are easy
tokens a tiny draft guesses right.

Three phases, seeded and resumable from the last checkpoint in the work folder:
1. **target**: the target learns next-token prediction (cross-entropy).
2. **distil**: the frozen target teaches the draft its whole next-token distribution
   (KL(target ‖ draft)) on corpus text.
3. **seqkd** (sequence-level distillation): the draft learns the target's distributions on continuations
   the target wrote of corpus snippets: what it meets when drafting, not human-written code.
Then `target/` and `draft/` folders (specviz.models.compact), each with the shared tokenizer.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm
from transformers import AutoTokenizer, DynamicCache, GPT2Config, GPT2LMHeadModel

from specviz.models.compact import never, save_compact
from specviz.training.code_corpus import EOS_TEXT, prepare_data
from specviz.training.optimise import learning_rate, optimiser_step, resume, save_checkpoint, start_run


@dataclass
class ModelShape:
    """One GPT-2 layout; the draft and the target share the vocabulary and context."""

    num_layers: int  # transformer blocks
    hidden_size: int  # width of the residual stream
    num_heads: int  # attention heads (hidden_size must divide evenly)


@dataclass
class TrainConfig:
    """Everything that determines the trained pair; saved beside every checkpoint."""

    out_dir: str = "assets/tiny-code-pair"  # where target/ and draft/ are written
    work_dir: str = str(Path.home() / ".cache" / "specviz" / "train")  # corpus + checkpoints
    seed: int = 0
    vocab_size: int = 4096  # BPE vocabulary shared by both models
    context_length: int = 384  # positions of both models; also the training sequence length
    target: ModelShape = field(default_factory=lambda: ModelShape(8, 384, 6))
    draft: ModelShape = field(default_factory=lambda: ModelShape(2, 256, 4))
    batch_size: int = 12  # sequences per optimiser step
    target_steps: int = 600  # phase 1: target cross-entropy
    distil_steps: int = 450  # phase 2: draft KL to the frozen target, on corpus text
    seqkd_steps: int = 450  # phase 3: draft KL to the target on text the target wrote itself
    seqkd_sequences: int = 1024  # continuations the target writes for phase 3
    seqkd_prompt_tokens: int = 32  # corpus tokens each continuation starts from
    seqkd_temperatures: tuple[float, ...] = (1.0, 0.5)  # alternated per generation batch
    seqkd_generate_batch: int = 64
    target_lr: float = 1.5e-3
    draft_lr: float = 3e-3
    warmup_steps: int = 60
    weight_decay: float = 0.1
    checkpoint_every: int = 50  # steps between checkpoints (resume picks up the latest)
    num_threads: int = 2  # CPU threads for torch; ignored on CUDA
    validation_fraction: float = 0.02  # files held out to report validation loss


def build_model(shape: ModelShape, config: TrainConfig, eos_id: int):
    """A GPT-2 with fast GELU and no dropout (dropout wastes most CPU time at this size)."""
    model_config = GPT2Config(
        vocab_size=config.vocab_size, n_positions=config.context_length, n_embd=shape.hidden_size,
        n_layer=shape.num_layers, n_head=shape.num_heads, activation_function="gelu_pytorch_tanh",
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=eos_id, eos_token_id=eos_id,
        # No pad id: generation never pads a single sequence, and with one set transformers
        # inspects every forward's input for padding (a device sync per step).
        pad_token_id=None,
    )
    return GPT2LMHeadModel(model_config)


def sample_batch(ids: torch.Tensor, config: TrainConfig, generator: torch.Generator) -> torch.Tensor:
    """Random windows of context_length + 1 ids (inputs and shifted labels)."""
    starts = torch.randint(0, len(ids) - config.context_length - 1, (config.batch_size,), generator=generator)
    return torch.stack([ids[start : start + config.context_length + 1] for start in starts.tolist()]).long()


def distillation_loss(draft_logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """KL(target || draft) per token: the draft is pulled toward the target's whole distribution."""
    target_log_probs = F.log_softmax(target_logits.float(), dim=-1)  # (batch, seq, vocab)
    draft_log_probs = F.log_softmax(draft_logits.float(), dim=-1)  # (batch, seq, vocab)
    return F.kl_div(draft_log_probs, target_log_probs, log_target=True, reduction="batchmean") / draft_logits.shape[1]


@torch.no_grad()
def evaluate(target, draft, ids: torch.Tensor, config: TrainConfig, device: torch.device) -> dict:
    """Validation cross-entropy of both models and the draft's greedy agreement with the target."""
    generator = torch.Generator().manual_seed(1234)
    batch = sample_batch(ids, config, generator).to(device)
    inputs, labels = batch[:, :-1], batch[:, 1:]
    with torch.autocast(device.type, dtype=torch.bfloat16):
        target_logits = target(inputs).logits
        draft_logits = draft(inputs).logits
    return {"target_loss": F.cross_entropy(target_logits.float().flatten(0, 1), labels.flatten()).item(),
            "draft_loss": F.cross_entropy(draft_logits.float().flatten(0, 1), labels.flatten()).item(),
            "greedy_agreement": (target_logits.argmax(-1) == draft_logits.argmax(-1)).float().mean().item()}


@torch.no_grad()
def write_continuations(target, train_ids: torch.Tensor, config: TrainConfig, device: torch.device,
                        work: Path) -> torch.Tensor:
    """Phase 3's text, (seqkd_sequences, context_length) ids: corpus snippets continued by the target's own
    sampling, written once and cached beside the checkpoint (resuming reuses it)."""
    path = work / "continuations.pt"
    if path.exists():
        return torch.load(path)
    generator = torch.Generator().manual_seed(config.seed + 1)
    num_new = config.context_length - config.seqkd_prompt_tokens
    batches = []
    for index in tqdm(range(0, config.seqkd_sequences, config.seqkd_generate_batch), desc="target writes"):
        temperature = config.seqkd_temperatures[len(batches) % len(config.seqkd_temperatures)]
        batch_size = min(config.seqkd_generate_batch, config.seqkd_sequences - index)
        starts = torch.randint(0, len(train_ids) - config.seqkd_prompt_tokens, (batch_size,), generator=generator)
        ids = torch.stack([train_ids[s : s + config.seqkd_prompt_tokens] for s in starts.tolist()]).long().to(device)
        cache = DynamicCache()
        new_ids = ids  # (batch, n): what the cache has not seen yet
        for _ in range(num_new):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                logits = target(new_ids, past_key_values=cache, use_cache=True).logits[:, -1].float()  # (batch, vocab)
            probs = torch.softmax(logits / temperature, dim=-1)  # (batch, vocab)
            new_ids = torch.multinomial(probs.cpu(), 1, generator=generator).to(device)  # (batch, 1)
            ids = torch.cat([ids, new_ids], dim=1)  # (batch, n+1)
        batches.append(ids.cpu().int())
    continuations = torch.cat(batches)  # (sequences, context_length)
    torch.save(continuations, path)
    return continuations


def in_blocks(name: str) -> bool:
    """The target's transformer blocks (GPT-2's `transformer.h.N.…`): most of its weights, stored in int4
    (its loss and the draft's agreement barely moved: the pair's card, assets/tiny-code-pair/README.md)."""
    return ".h." in name


def train(config: TrainConfig) -> Path:
    """Run (or resume) the three phases and export the pair; returns the output folder."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(config.num_threads)
    work = start_run(config)
    tokenizer_dir, train_ids, validation_ids = prepare_data(config.work_dir, config.vocab_size, config.seed,
                                                            config.validation_fraction)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TEXT)

    target = build_model(config.target, config, eos_id).to(device)
    draft = build_model(config.draft, config, eos_id).to(device)
    target_opt = torch.optim.AdamW(target.parameters(), lr=config.target_lr, weight_decay=config.weight_decay)
    draft_opt = torch.optim.AdamW(draft.parameters(), lr=config.draft_lr, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(config.seed)

    checkpoint_path = work / "checkpoint.pt"
    parts = {"target": target, "draft": draft, "target_opt": target_opt, "draft_opt": draft_opt, "generator": generator}
    start_step = resume(checkpoint_path, device, **parts)

    seqkd_from = config.target_steps + config.distil_steps
    total_steps = seqkd_from + config.seqkd_steps
    continuations = None
    started = time.perf_counter()
    progress = tqdm(range(start_step, total_steps), initial=start_step, total=total_steps, desc="train")
    for step in progress:
        phase = "target" if step < config.target_steps else "distil" if step < seqkd_from else "seqkd"
        if phase == "target":
            batch = sample_batch(train_ids, config, generator).to(device)
            inputs, labels = batch[:, :-1], batch[:, 1:]  # (batch, seq) each
            target.train()
            with torch.autocast(device.type, dtype=torch.bfloat16):
                logits = target(inputs).logits  # (batch, seq, vocab)
                loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())
            optimiser_step(target, target_opt, loss, learning_rate(step, config.target_steps, config.target_lr, config.warmup_steps))
        else:
            if phase == "distil":
                inputs = sample_batch(train_ids, config, generator)[:, :-1].to(device)  # (batch, seq)
            else:
                if continuations is None:
                    continuations = write_continuations(target.eval(), train_ids, config, device, work)
                rows = torch.randint(0, len(continuations), (config.batch_size,), generator=generator)
                inputs = continuations[rows].long().to(device)  # (batch, seq)
            target.eval()
            with torch.autocast(device.type, dtype=torch.bfloat16):
                with torch.no_grad():
                    teacher_logits = target(inputs).logits  # (batch, seq, vocab)
                loss = distillation_loss(draft(inputs).logits, teacher_logits)
            # One cosine over phases 2–3 (the draft does not train in phase 1).
            draft_lr = learning_rate(step - config.target_steps, config.distil_steps + config.seqkd_steps,
                                     config.draft_lr, config.warmup_steps)
            optimiser_step(draft, draft_opt, loss, draft_lr)
        progress.set_postfix({"phase": phase, "ce" if phase == "target" else "kl": f"{loss.item():.3f}"})
        if (step + 1) % config.checkpoint_every == 0 or step + 1 == total_steps:
            save_checkpoint(checkpoint_path, step + 1, **parts)

    target.eval()
    draft.eval()
    metrics = evaluate(target, draft, validation_ids, config, device)
    corpus = json.loads((work / "corpus.json").read_text()) if (work / "corpus.json").exists() else {}
    # Folders stay out of the summary: it ships in assets/, and machine paths do not belong there.
    settings = {k: v for k, v in asdict(config).items() if k not in ("out_dir", "work_dir")}
    summary = {
        "config": settings, "corpus": corpus, "validation": metrics,
        "num_params": {name: sum(p.numel() for p in model.parameters())
                       for name, model in (("target", target), ("draft", draft))},
        "device": str(device), "seconds_this_run": round(time.perf_counter() - started, 1),
    }
    out_dir = Path(config.out_dir)
    # Both compactly (specviz.models.compact: the target's blocks in int4, the rest int8), the tokenizer beside each.
    for name, model, int4 in (("target", target, in_blocks), ("draft", draft, never)):
        save_compact(model.cpu(), out_dir / name, int4=int4)
        tokenizer.save_pretrained(out_dir / name)
    (out_dir / "training.json").write_text(json.dumps(summary, indent=2))
    print(f"validation: {json.dumps(metrics)}")
    print(f"saved the pair to {out_dir.resolve()}")
    return out_dir
