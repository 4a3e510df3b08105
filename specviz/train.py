"""Train the embedded model pair: a small GPT-2 target and a tiny draft distilled from it.

Corpus: the Python standard library source of the running interpreter (PSF licence), which
every machine that runs specviz already has. Code is the classic use of speculative decoding:
indentation, keywords and closing brackets are easy tokens a tiny draft guesses right.

Two phases, both seeded and resumable from the last checkpoint in the work folder:
1. **joint**: the target learns next-token prediction (cross-entropy) while the draft learns to
   imitate the target's current distribution (KL to the target's detached probabilities), so
   the teacher logits cost nothing extra.
2. **distil**: the frozen, final target teaches the draft a little longer, so the draft matches
   the target it will actually serve with.

`python -m specviz train --out assets/specviz-pair` writes `target/` and `draft/` folders in
the standard transformers format (config.json, model.safetensors, tokenizer files).
"""

from __future__ import annotations

import json
import math
import random
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

EOS_TEXT = "<|endoftext|>"


@dataclass
class ModelShape:
    """One GPT-2 layout; the draft and the target share the vocabulary and context."""

    num_layers: int  # transformer blocks
    hidden_size: int  # width of the residual stream
    num_heads: int  # attention heads (hidden_size must divide evenly)


@dataclass
class TrainConfig:
    """Everything that determines the trained pair; saved beside every checkpoint."""

    out_dir: str = "assets/specviz-pair"  # where target/ and draft/ are written
    work_dir: str = str(Path.home() / ".cache" / "specviz" / "train")  # corpus + checkpoints
    seed: int = 0
    vocab_size: int = 4096  # BPE vocabulary shared by both models
    context_length: int = 384  # positions of both models; also the training sequence length
    target: ModelShape = field(default_factory=lambda: ModelShape(8, 384, 6))
    draft: ModelShape = field(default_factory=lambda: ModelShape(2, 128, 4))
    batch_size: int = 12  # sequences per optimiser step
    joint_steps: int = 600  # phase 1: target CE + draft KL to the live target
    distil_steps: int = 150  # phase 2: draft KL to the frozen final target
    target_lr: float = 1.5e-3
    draft_lr: float = 3e-3
    warmup_steps: int = 60
    weight_decay: float = 0.1
    checkpoint_every: int = 50  # steps between checkpoints (resume picks up the latest)
    num_threads: int = 2  # CPU threads for torch; ignored on CUDA
    validation_fraction: float = 0.02  # files held out to report validation loss


def find_corpus_files() -> list[Path]:
    """The standard library's own .py files, without its test suites, in a stable order."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skipped_parts = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
    files = [
        path
        for path in stdlib.rglob("*.py")
        if not skipped_parts.intersection(path.relative_to(stdlib).parts)
    ]
    return sorted(files, key=lambda path: str(path.relative_to(stdlib)))


def read_corpus(files: list[Path]) -> list[str]:
    """File texts, undecodable ones skipped (a handful of stdlib files are latin-1 tests)."""
    texts = []
    for path in files:
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
    return texts


def train_tokenizer(texts: list[str], vocab_size: int, out_dir: Path):
    """Byte-level BPE (GPT-2 style, so any text round-trips) saved for AutoTokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=EOS_TEXT,
        eos_token=EOS_TEXT,
        unk_token=EOS_TEXT,
        model_max_length=None,
    )
    wrapped.save_pretrained(out_dir)
    return wrapped


def encode_corpus(tokenizer, texts: list[str]) -> torch.Tensor:
    """One long stream of ids, files separated by EOS."""
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TEXT)
    ids: list[int] = []
    for encoded in tokenizer(texts, add_special_tokens=False)["input_ids"]:
        ids.extend(encoded)
        ids.append(eos_id)
    return torch.tensor(ids, dtype=torch.int32)


def prepare_data(config: TrainConfig) -> tuple[Path, torch.Tensor, torch.Tensor]:
    """Tokenizer folder plus train/validation id streams, cached in the work folder."""
    work = Path(config.work_dir)
    tokenizer_dir = work / "tokenizer"
    data_path = work / "data.pt"
    if data_path.exists() and tokenizer_dir.exists():
        data = torch.load(data_path)
        return tokenizer_dir, data["train"], data["validation"]
    files = find_corpus_files()
    rng = random.Random(config.seed)
    rng.shuffle(files)
    num_validation = max(1, int(len(files) * config.validation_fraction))
    validation_texts = read_corpus(files[:num_validation])
    train_texts = read_corpus(files[num_validation:])
    tokenizer = train_tokenizer(train_texts, config.vocab_size, tokenizer_dir)
    train_ids = encode_corpus(tokenizer, train_texts)
    validation_ids = encode_corpus(tokenizer, validation_texts)
    stats = {
        "source": f"Python {sys.version.split()[0]} standard library (PSF licence), tests excluded",
        "num_files": len(files),
        "num_chars": sum(len(text) for text in train_texts + validation_texts),
        "num_train_tokens": len(train_ids),
        "num_validation_tokens": len(validation_ids),
    }
    (work / "corpus.json").write_text(json.dumps(stats, indent=2))
    torch.save({"train": train_ids, "validation": validation_ids}, data_path)
    print(f"corpus: {json.dumps(stats)}")
    return tokenizer_dir, train_ids, validation_ids


def build_model(shape: ModelShape, config: TrainConfig, eos_id: int):
    """A GPT-2 with fast GELU and no dropout (dropout wastes most CPU time at this size)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    model_config = GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.context_length,
        n_embd=shape.hidden_size,
        n_layer=shape.num_layers,
        n_head=shape.num_heads,
        activation_function="gelu_pytorch_tanh",
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        # No pad id: generation never pads a single sequence, and with one set transformers
        # inspects every forward's input for padding (a device sync per step).
        pad_token_id=None,
    )
    return GPT2LMHeadModel(model_config)


def sample_batch(ids: torch.Tensor, config: TrainConfig, generator: torch.Generator) -> torch.Tensor:
    """Random windows of context_length + 1 ids (inputs and shifted labels)."""
    starts = torch.randint(0, len(ids) - config.context_length - 1, (config.batch_size,), generator=generator)
    return torch.stack([ids[start : start + config.context_length + 1] for start in starts.tolist()]).long()


def learning_rate(step: int, total_steps: int, peak_lr: float, warmup_steps: int) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def distillation_loss(draft_logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """KL(target || draft) per token: the draft is pulled toward the target's whole distribution."""
    target_log_probs = F.log_softmax(target_logits.float(), dim=-1)  # (batch, seq, vocab)
    draft_log_probs = F.log_softmax(draft_logits.float(), dim=-1)  # (batch, seq, vocab)
    return F.kl_div(draft_log_probs, target_log_probs, log_target=True, reduction="batchmean") / draft_logits.shape[1]


def autocast_context(device: torch.device):
    """bf16 autocast: AMX on recent CPUs, tensor cores on GPUs."""
    return torch.autocast(device.type, dtype=torch.bfloat16)


@torch.no_grad()
def evaluate(target, draft, ids: torch.Tensor, config: TrainConfig, device: torch.device) -> dict:
    """Validation cross-entropy of both models and the draft's greedy agreement with the target."""
    generator = torch.Generator().manual_seed(1234)
    batch = sample_batch(ids, config, generator).to(device)
    inputs, labels = batch[:, :-1], batch[:, 1:]
    with autocast_context(device):
        target_logits = target(inputs).logits
        draft_logits = draft(inputs).logits
    agreement = (target_logits.argmax(-1) == draft_logits.argmax(-1)).float().mean().item()
    return {
        "target_loss": F.cross_entropy(target_logits.float().flatten(0, 1), labels.flatten()).item(),
        "draft_loss": F.cross_entropy(draft_logits.float().flatten(0, 1), labels.flatten()).item(),
        "greedy_agreement": agreement,
    }


def save_checkpoint(path: Path, step: int, target, draft, target_opt, draft_opt, generator) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(
        {
            "step": step,
            "target": target.state_dict(),
            "draft": draft.state_dict(),
            "target_opt": target_opt.state_dict(),
            "draft_opt": draft_opt.state_dict(),
            "generator": generator.get_state(),
        },
        tmp,
    )
    tmp.replace(path)  # atomic: an interrupted save never corrupts the last good checkpoint


def export_pair(target, draft, tokenizer_dir: Path, out_dir: Path, summary: dict) -> None:
    """Save both models in 16-bit safetensors with the shared tokenizer beside each."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    for name, model in (("target", target), ("draft", draft)):
        folder = out_dir / name
        model.to(torch.float16).save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)
        model.float()
    (out_dir / "training.json").write_text(json.dumps(summary, indent=2))


def train(config: TrainConfig) -> Path:
    """Run (or resume) both phases and export the pair; returns the output folder."""
    from tqdm import tqdm
    from transformers import AutoTokenizer

    torch.manual_seed(config.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        torch.set_num_threads(config.num_threads)
    work = Path(config.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    tokenizer_dir, train_ids, validation_ids = prepare_data(config)
    eos_id = AutoTokenizer.from_pretrained(tokenizer_dir).convert_tokens_to_ids(EOS_TEXT)

    target = build_model(config.target, config, eos_id).to(device)
    draft = build_model(config.draft, config, eos_id).to(device)
    target_opt = torch.optim.AdamW(target.parameters(), lr=config.target_lr, weight_decay=config.weight_decay)
    draft_opt = torch.optim.AdamW(draft.parameters(), lr=config.draft_lr, weight_decay=config.weight_decay)
    generator = torch.Generator().manual_seed(config.seed)

    checkpoint_path = work / "checkpoint.pt"
    start_step = 0
    if checkpoint_path.exists():
        state = torch.load(checkpoint_path, map_location=device, weights_only=False)
        target.load_state_dict(state["target"])
        draft.load_state_dict(state["draft"])
        target_opt.load_state_dict(state["target_opt"])
        draft_opt.load_state_dict(state["draft_opt"])
        generator.set_state(state["generator"])
        start_step = state["step"]
        print(f"resuming from step {start_step} ({checkpoint_path})")
    (work / "config.json").write_text(json.dumps(asdict(config), indent=2))

    total_steps = config.joint_steps + config.distil_steps
    started = time.perf_counter()
    progress = tqdm(range(start_step, total_steps), initial=start_step, total=total_steps, desc="train")
    for step in progress:
        joint = step < config.joint_steps
        batch = sample_batch(train_ids, config, generator).to(device)
        inputs, labels = batch[:, :-1], batch[:, 1:]  # (batch, seq) each
        target.train(joint)
        with autocast_context(device):
            if joint:
                target_logits = target(inputs).logits  # (batch, seq, vocab)
                target_loss = F.cross_entropy(target_logits.float().flatten(0, 1), labels.flatten())
                for group in target_opt.param_groups:
                    group["lr"] = learning_rate(step, config.joint_steps, config.target_lr, config.warmup_steps)
                target_opt.zero_grad(set_to_none=True)
                target_loss.backward()
                torch.nn.utils.clip_grad_norm_(target.parameters(), 1.0)
                target_opt.step()
                teacher_logits = target_logits.detach()
            else:
                with torch.no_grad():
                    teacher_logits = target(inputs).logits
                target_loss = None
            draft_loss = distillation_loss(draft(inputs).logits, teacher_logits)
        for group in draft_opt.param_groups:
            group["lr"] = learning_rate(step, total_steps, config.draft_lr, config.warmup_steps)
        draft_opt.zero_grad(set_to_none=True)
        draft_loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        draft_opt.step()
        postfix = {"phase": "joint" if joint else "distil", "kl": f"{draft_loss.item():.3f}"}
        if target_loss is not None:
            postfix["ce"] = f"{target_loss.item():.3f}"
        progress.set_postfix(postfix)
        if (step + 1) % config.checkpoint_every == 0 or step + 1 == total_steps:
            save_checkpoint(checkpoint_path, step + 1, target, draft, target_opt, draft_opt, generator)

    target.eval()
    draft.eval()
    metrics = evaluate(target, draft, validation_ids, config, device)
    corpus = json.loads((work / "corpus.json").read_text()) if (work / "corpus.json").exists() else {}
    summary = {
        "config": asdict(config),
        "corpus": corpus,
        "validation": metrics,
        "num_params": {
            "target": sum(p.numel() for p in target.parameters()),
            "draft": sum(p.numel() for p in draft.parameters()),
        },
        "device": str(device),
        "seconds_this_run": round(time.perf_counter() - started, 1),
    }
    out_dir = Path(config.out_dir)
    export_pair(target.cpu(), draft.cpu(), tokenizer_dir, out_dir, summary)
    print(f"validation: {json.dumps(metrics)}")
    print(f"saved the pair to {out_dir.resolve()}")
    return out_dir
