"""The target as teacher, shared by the draft recipe (specviz.training.distil) and the head recipes
(specviz.training.head_train, head_gpu): it loads, answers prompts, its text is packed into rows, and
a teacher-forced pass scores them; the head recipe's teacher passes lie in TEACHER_FOLDERS, which the
draft recipe reads too, so both drafters learn from one signal.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Protocol

import torch
from tqdm import tqdm

from specviz.models.convert import default_target_id
from specviz.models.loading import load_model, load_tokenizer
from specviz.models.slots import lower_layer_states
from specviz.training.prompts_corpus import instruction_prompts

# Where the teacher passes are cached under the head recipe's work folder, in the order the head trains on them
# (its held-out rows last): draft-written answers, the target's answers, its answers to its own requests.
TEACHER, TARGET, SELF_INSTRUCT = "teacher", "target", "self-instruct"
TEACHER_FOLDERS = (TEACHER, f"{TARGET}/{TEACHER}", f"{SELF_INSTRUCT}/{TEACHER}")


class AnswerRecipe(Protocol):
    """The settings a recipe's answering phase reads (DistilConfig and HeadTrainConfig both have them)."""

    work_dir: str  # answers are cached in its answers/ folder
    target_id: str  # empty: the default target
    seed: int
    num_prompts: int  # templated instructions (specviz.training.prompts_corpus)
    answer_batch: int
    answer_tokens: int
    answer_temperatures: tuple[float, ...]
    answer_rounds: int


def load_target(config: AnswerRecipe, dtype: torch.dtype, device: torch.device):
    """config.target_id, or the default target: (its hub id or folder name, as a summary names it without
    the machine's paths; tokenizer; model in eval mode)."""
    target_id = config.target_id or default_target_id()
    name = Path(target_id).name if Path(target_id).exists() else target_id
    return name, load_tokenizer(target_id), load_model(target_id, device, dtype)


@torch.inference_mode()
def write_answers(config: AnswerRecipe, tokenizer, target, device: torch.device,
                  prompts: list[tuple[str, bool]] | None = None, deadline: float | None = None) -> list[list[int]]:
    """Phase 1: the target's own answers (to `prompts`, else the templated instructions); one file
    per batch, so an interruption loses one batch. Past `deadline` (a time.perf_counter() reading) no
    new batch is started: a rerun writes the rest."""
    folder = Path(config.work_dir) / "answers"
    folder.mkdir(parents=True, exist_ok=True)
    prompts = prompts if prompts is not None else instruction_prompts(config.num_prompts, config.seed)
    tokenizer.padding_side = "left"
    sequences: list[list[int]] = []
    jobs = [(r, b, start) for r in range(config.answer_rounds) for b, start in enumerate(range(0, len(prompts), config.answer_batch))]
    for answer_round, batch_index, start in tqdm(jobs, desc="target answers"):
        path = folder / f"r{answer_round}-{batch_index:04d}.pt"
        if not path.exists():
            if deadline is not None and time.perf_counter() > deadline:
                break
            batch = prompts[start : start + config.answer_batch]
            texts = [tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                   tokenize=False) if chat else text for text, chat in batch]
            encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
            temperature = config.answer_temperatures[(batch_index + answer_round) % len(config.answer_temperatures)]
            torch.manual_seed(config.seed * 100_003 + answer_round * 1009 + batch_index)
            sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature else {"do_sample": False}
            output = target.generate(**encoded, max_new_tokens=config.answer_tokens, **sampling)  # (batch, n + new)
            rows = []
            for mask, ids in zip(encoded["attention_mask"].cpu(), output.cpu()):
                prompt_ids = ids[: mask.shape[0]][mask.bool()].tolist()
                answer_ids = ids[mask.shape[0] :].tolist()
                if tokenizer.eos_token_id in answer_ids:  # generate pads finished rows with EOS
                    answer_ids = answer_ids[: answer_ids.index(tokenizer.eos_token_id) + 1]
                rows.append(prompt_ids + answer_ids)
            torch.save(rows, path)
        sequences.extend(torch.load(path))
    return sequences


def pack_rows(sequences: list[list[int]], length: int, seed: int) -> torch.Tensor:
    """Shuffle sequences and pack them end to end into (rows, length) ids, as in pre-training."""
    order = list(range(len(sequences)))
    random.Random(seed).shuffle(order)
    stream = [token for index in order for token in sequences[index]]
    num_rows = len(stream) // length
    return torch.tensor(stream[: num_rows * length], dtype=torch.int32).view(num_rows, length)  # (rows, length)


def row_index_of(head_rows: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """vocab id → its index among head_rows, -1 for ids outside them: (vocab,)."""
    index = torch.full((vocab_size,), -1, dtype=torch.long)
    index[head_rows] = torch.arange(len(head_rows))
    return index


def split_rows(data: dict, held_out_fraction: float) -> tuple[dict, dict]:
    """(training rows, held-out rows): the last held_out_fraction of every tensor's rows are held out."""
    num_held_out = max(1, int(len(next(iter(data.values()))) * held_out_fraction))
    return ({key: value[:-num_held_out] for key, value in data.items()},
            {key: value[-num_held_out:] for key, value in data.items()})


def top_log_probs(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probabilities, ids) of the k likeliest next tokens, (..., k) each: in float32, normalised over
    the whole vocabulary."""
    logits = logits.float()
    top_logits, top_ids = logits.topk(k, dim=-1)
    return top_logits - logits.logsumexp(-1, keepdim=True), top_ids


@torch.inference_mode()
def score_rows(target, rows: torch.Tensor, top_k: int, target_layers: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """One teacher-forced forward over rows (b, L) on the target's device, what the head learns from, on
    the CPU: the tokens, the target's final hidden states (float16), those of `target_layers` (bfloat16:
    middle layers reach ~1e4 at a row's first position) and its top-k next-token log-probs and ids."""
    output = target.base_model(input_ids=rows, output_hidden_states=bool(target_layers))
    hidden = output.last_hidden_state  # (b, L, d)
    log_probs, ids = top_log_probs(target.get_output_embeddings()(hidden), top_k)  # (b, L, k)
    scored = {"tokens": rows.int().cpu(), "features": hidden.half().cpu(), "label_ids": ids.int().cpu(),
              "label_log_probs": log_probs.half().cpu()}
    if target_layers:
        lower = lower_layer_states(output.hidden_states, target_layers)  # (b, L, d·n)
        scored["layer_features"] = lower.bfloat16().cpu()
    return scored
