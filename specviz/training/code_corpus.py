"""Python standard-library source as a training corpus (PSF licence): every machine that runs
specviz already has it. The tiny-code pair trains on it with its own BPE tokenizer; the default
pair's draft recipe labels some of it with the target's tokenizer beside the target's answers.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
import sysconfig
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

EOS_TEXT = "<|endoftext|>"


def find_corpus_files(seed: int) -> list[Path]:
    """The standard library's own .py files, without its test suites, shuffled by `seed` from a stable order."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    skipped_parts = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
    files = [path for path in stdlib.rglob("*.py") if not skipped_parts.intersection(path.relative_to(stdlib).parts)]
    files.sort(key=lambda path: str(path.relative_to(stdlib)))
    random.Random(seed).shuffle(files)
    return files


def read_corpus(files: list[Path]) -> list[str]:
    """File texts, undecodable ones skipped (a handful of stdlib files are latin-1 tests)."""
    texts = []
    for path in files:
        with contextlib.suppress(UnicodeDecodeError, OSError):
            texts.append(path.read_text(encoding="utf-8"))
    return texts


def train_tokenizer(texts: list[str], vocab_size: int, out_dir: Path):
    """Byte-level BPE (GPT-2 style, so any text round-trips) saved for AutoTokenizer."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS_TEXT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=EOS_TEXT, eos_token=EOS_TEXT,
                                      unk_token=EOS_TEXT, model_max_length=None)
    wrapped.save_pretrained(out_dir)
    return wrapped


def encode_corpus(tokenizer, texts: list[str]) -> torch.Tensor:
    """One long stream of ids, files separated by EOS."""
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TEXT)
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"]
    return torch.tensor([token for ids in encoded for token in [*ids, eos_id]], dtype=torch.int32)


def prepare_data(work_dir: str, vocab_size: int, seed: int, validation_fraction: float) -> tuple[Path, torch.Tensor, torch.Tensor]:
    """Tokenizer folder plus train/validation id streams, cached in the work folder: files shuffled
    by `seed`, the first `validation_fraction` of them held out."""
    work = Path(work_dir)
    tokenizer_dir = work / "tokenizer"
    data_path = work / "data.pt"
    if data_path.exists() and tokenizer_dir.exists():
        data = torch.load(data_path)
        return tokenizer_dir, data["train"], data["validation"]
    files = find_corpus_files(seed)
    num_validation = max(1, int(len(files) * validation_fraction))
    validation_texts = read_corpus(files[:num_validation])
    train_texts = read_corpus(files[num_validation:])
    tokenizer = train_tokenizer(train_texts, vocab_size, tokenizer_dir)
    train_ids = encode_corpus(tokenizer, train_texts)
    validation_ids = encode_corpus(tokenizer, validation_texts)
    stats = {"source": f"Python {sys.version.split()[0]} standard library (PSF licence), tests excluded",
             "num_files": len(files), "num_chars": sum(len(text) for text in train_texts + validation_texts),
             "num_train_tokens": len(train_ids), "num_validation_tokens": len(validation_ids)}
    (work / "corpus.json").write_text(json.dumps(stats, indent=2))
    torch.save({"train": train_ids, "validation": validation_ids}, data_path)
    print(f"corpus: {json.dumps(stats)}")
    return tokenizer_dir, train_ids, validation_ids


def code_stream(tokenizer, num_tokens: int, seed: int) -> list[int]:
    """The corpus in another model's tokenizer (the default target's): files shuffled, EOS between files."""
    ids: list[int] = []
    for text in read_corpus(find_corpus_files(seed)):
        ids.extend(tokenizer(text, add_special_tokens=False)["input_ids"][:2048] + [tokenizer.eos_token_id])
        if len(ids) >= num_tokens:
            break
    return ids[:num_tokens]
