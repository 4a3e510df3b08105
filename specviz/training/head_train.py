"""Train the head drafter for the default target (`python -m specviz train --recipe head`).

The head (specviz.decoding.drafters) reads the target's own last hidden state, so it learns from the
target's features, not only its text. Four phases, each cached in the work folder, so an interrupted
run resumes where it stopped:

1. **answers**: the shipped draft model answers templated instructions (specviz.training.prompts_corpus)
   at two of T = 0, 0.7, 1.0 (on-policy text, far cheaper on a CPU than the target's; DistillSpec,
   arXiv 2310.08461); the target answers them greedily and at T = 0.7, the text the head meets when
   drafting; then it writes requests of its own (Magpie) and answers those, far more varied.
2. **teacher**: one teacher-forced target pass over all those answers keeps, at every position, its
   final hidden state, those of any lower layers the head reads (`target_layers`, EAGLE-3) and its
   top-k log-probabilities: the head learns the target's behaviour, whoever wrote the text.
3. **head**: at every position i, [feature_i, embedding of token i+1] → the target's feature at i+1:
   a KL term to the target's distribution there (over the head rows, the drafter's support) plus
   smooth-L1 on the feature (EAGLE); input features get a little noise, because when drafting the
   head reads its own predictions after the first token.
4. **export**: the head (int8, DraftHead.save), `head_rows.json`, `training.json` and
   `self_instructions.json` (the requests the target wrote, so tests can check them).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from specviz.models.draft_head import DraftHead, head_config_for, load_head, with_lower_layers
from specviz.models.loading import load_model
from specviz.models.precision import choose_device_and_dtype, precision_name
from specviz.training.head_config import (
    REQUESTS_FILE, HeadGpuConfig, HeadTrainConfig, apart_from_the_head_it_reads, check_the_layers_it_goes_on_with,
    self_instruct_config, target_config,
)
from specviz.training.head_ttt import head_inputs
from specviz.training.optimise import (
    held_out_means, learning_rate, optimiser_step, resume, save_atomically, save_checkpoint, start_run,
)
from specviz.training.teacher import (
    TEACHER, load_target, pack_rows, row_index_of, score_rows, split_rows, write_answers,
)


@torch.inference_mode()
def label_with_features(config: HeadTrainConfig, target, rows: torch.Tensor, device: torch.device) -> dict:
    """Phase 2: score_rows over packed rows, resumable in chunks; a cached chunk without the layers asked for
    is written again."""
    folder = Path(config.work_dir) / TEACHER
    folder.mkdir(parents=True, exist_ok=True)
    layers = list(config.target_layers)
    chunks = []
    started = time.perf_counter()
    for start in tqdm(range(0, len(rows), config.label_batch), desc="teacher (features, labels)"):
        path = folder / f"{start:06d}.pt"
        chunk = torch.load(path) if path.exists() else None
        if chunk is None or (layers and chunk.get("layers") != layers):
            if config.teacher_minutes and time.perf_counter() - started > config.teacher_minutes * 60:
                break  # the CPU budget is spent: train on what there is
            batch = rows[start : start + config.label_batch].long().to(device)  # (b, length)
            chunk = {**score_rows(target, batch, config.teacher_top_k, config.target_layers), "layers": layers}
            save_atomically(chunk, path)
        chunks.append(chunk)
    keys = ["features", "label_ids", "label_log_probs", "tokens"] + (["layer_features"] if layers else [])
    return {key: torch.cat([chunk[key] for chunk in chunks]) for key in keys}


def user_turn(tokenizer) -> tuple[str, str]:
    """The chat template around the user's words: the prefix a request is sampled after, and what follows
    the words (the template's end-of-turn first), so no target's end-of-turn token is spelled out here."""
    marker = "\x00REQUEST\x00"
    text = tokenizer.apply_chat_template([{"role": "user", "content": marker}], add_generation_prompt=True, tokenize=False)
    before, after = text.split(marker)
    return before, after


@torch.inference_mode()
def write_instructions(config: HeadTrainConfig | HeadGpuConfig, tokenizer, target, device: torch.device,
                       deadline: float | None = None) -> list[str]:
    """Phase 0: requests the target writes itself, sampled after its template's user-turn prefix; kept when
    finished (the template's end-of-turn within instruction_tokens), deduplicated; one file per batch.
    Past `deadline` (a time.perf_counter() reading) no new batch is started (the GPU recipe's budget)."""
    folder = Path(config.work_dir) / "instructions"
    folder.mkdir(parents=True, exist_ok=True)
    before, after = user_turn(tokenizer)
    end_of_turn = tokenizer(after, add_special_tokens=False)["input_ids"][0]
    stops = [i for i in dict.fromkeys((end_of_turn, tokenizer.eos_token_id)) if i is not None]
    prefix = tokenizer([before], return_tensors="pt", add_special_tokens=False)["input_ids"]  # (1, n)
    requests: list[str] = []
    for batch_index in tqdm(range(-(-config.self_instructions // config.instruction_batch)), desc="instructions (target)"):
        path = folder / f"{batch_index:04d}.json"
        if not path.exists():
            if deadline is not None and time.perf_counter() > deadline:
                break
            torch.manual_seed(config.seed * 100_019 + batch_index)
            inputs = prefix.expand(config.instruction_batch, -1).to(device)  # (b, n)
            output = target.generate(inputs, attention_mask=torch.ones_like(inputs), do_sample=True, top_k=0, top_p=1.0,
                                     temperature=config.instruction_temperature, max_new_tokens=config.instruction_tokens,
                                     eos_token_id=stops, pad_token_id=stops[0])  # (b, n + new)
            texts = []
            for row in output[:, prefix.shape[1] :].tolist():
                ends = [k for k, token in enumerate(row) if token in stops]
                if ends and ends[0] >= 4:  # a finished request of a few tokens at least
                    texts.append(tokenizer.decode(row[: ends[0]], skip_special_tokens=True).strip())
            path.write_text(json.dumps(texts))
        requests.extend(json.loads(path.read_text()))
    return list(dict.fromkeys(text for text in requests if text))


def head_losses(head: DraftHead, embed: torch.nn.Module, row_weight: torch.Tensor, row_index: torch.Tensor,
                batch: dict, config: HeadTrainConfig, generator: torch.Generator | None) -> dict:
    """Losses and top-1 agreement for one batch of packed rows, drafting one and two tokens ahead: step 1
    reads the target's true features (a round's first draft), step 2 the head's own step-1 predictions
    (every later draft), the training-time test of EAGLE-3 in its smallest form."""
    features, inputs, embeddings, teacher_rows, teacher_probs = head_inputs(head, embed, row_index, batch,
                                                                            config.feature_noise, generator)
    losses, metrics = [], {}
    predicted = head(inputs, embeddings)  # (b, L-1, d): predicted features of positions 1..L-1
    for ahead in (1, 2):  # predicted[:, j] is the feature at position j + ahead
        truth = features[:, ahead:]  # (b, L-ahead, d)
        log_q = torch.log_softmax(predicted @ row_weight.T, -1)  # (b, L-ahead, rows)
        rows = teacher_rows[:, ahead:].clamp(min=0)  # (b, L-ahead, k)
        kl = -(teacher_probs[:, ahead:] * log_q.gather(-1, rows)).sum(-1).mean()
        feature = F.smooth_l1_loss(predicted, truth)
        losses.append(kl + config.feature_loss_weight * feature)
        agree = log_q.argmax(-1) == teacher_rows[:, ahead:, 0]  # (b, L-ahead)
        metrics[f"agreement_{ahead}"] = float(agree.float().mean())
        metrics[f"kl_{ahead}"] = float(kl.detach())
        if ahead == 1:  # the next step reads these predictions in place of the true features (no lower layers)
            predicted = head(predicted[:, :-1], embeddings[:, 1:])  # (b, L-2, d): positions 2..L-1
    metrics["loss"] = losses[0] + 0.5 * losses[1]
    return metrics


def evaluate_head(head: DraftHead, embed, row_weight, row_index, held_out: dict, config: HeadTrainConfig) -> dict:
    batches = ({key: value[start : start + config.batch_size].to(row_weight.device) for key, value in held_out.items()}
               for start in range(0, len(held_out["tokens"]), config.batch_size))
    return held_out_means(head, (head_losses(head, embed, row_weight, row_index, batch, config, None)
                                 for batch in batches))


def train_head(config: HeadTrainConfig, head: DraftHead, target, head_rows: torch.Tensor, train: dict,
               held_out: dict) -> dict:
    """Phase 3: AdamW on the head alone (the target's embeddings and output rows stay frozen)."""
    embed = target.get_input_embeddings()
    row_weight = target.get_output_embeddings().weight[head_rows].detach()  # (rows, d)
    row_index = row_index_of(head_rows, target.config.vocab_size).to(row_weight.device)
    optimiser = torch.optim.AdamW(head.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    total_steps = max(1, int(config.epochs * len(train["tokens"]) / config.batch_size))
    checkpoint = Path(config.work_dir) / "head-checkpoint.pt"
    done = resume(checkpoint, row_weight.device, head=head, optimiser=optimiser)  # steps run so far
    generator = torch.Generator().manual_seed(config.seed + done)
    order = torch.randperm(len(train["tokens"]), generator=torch.Generator().manual_seed(config.seed))
    started = time.perf_counter()
    progress = tqdm(range(done, total_steps), desc="head", initial=done, total=total_steps)
    for step in progress:
        if config.train_minutes and time.perf_counter() - started > config.train_minutes * 60:
            break
        picks = order[(torch.arange(config.batch_size) + step * config.batch_size) % len(order)]
        batch = {key: value[picks].to(row_weight.device) for key, value in train.items()}
        with torch.autocast(row_weight.device.type, dtype=torch.bfloat16, enabled=config.autocast):
            metrics = head_losses(head, embed, row_weight, row_index, batch, config, generator)
        lr = learning_rate(step, total_steps, config.lr, config.warmup_steps)
        optimiser_step(head, optimiser, metrics["loss"], lr)
        progress.set_postfix(loss=f"{metrics['loss'].detach().item():.3f}", agree=f"{metrics['agreement_1']:.2f}")
        done = step + 1
        if done % config.checkpoint_every == 0:
            save_checkpoint(checkpoint, done, head=head, optimiser=optimiser)
            print(f"step {done}: held-out {evaluate_head(head, embed, row_weight, row_index, held_out, config)}", flush=True)
    save_checkpoint(checkpoint, done, head=head, optimiser=optimiser)
    return evaluate_head(head, embed, row_weight, row_index, held_out, config)


def train_head_recipe(config: HeadTrainConfig) -> Path:
    """Run (or resume) all four phases; returns the head's folder."""
    # Writing answers and the teacher pass run the target: on the hardware's fast precision (bfloat16
    # on CUDA and on CPUs with native bf16), the precision the head reads at run time.
    device, dtype = choose_device_and_dtype()
    config = apart_from_the_head_it_reads(replace(config, autocast=config.autocast or dtype == torch.bfloat16))
    check_the_layers_it_goes_on_with(config)
    torch.set_num_threads(config.num_threads)
    start_run(config)
    timings = {}

    started = time.perf_counter()
    target_name, tokenizer, target = load_target(config, dtype, device)
    own = target_config(config)
    answers, target_answers, earlier_requests = [], [], []
    if config.init_from:  # going on from a trained head: new requests only, none it trained on
        earlier_requests = json.loads((Path(config.init_from) / REQUESTS_FILE).read_text(encoding="utf-8"))
    else:
        writer = load_model(str(Path(config.head_rows_from).parent), device, dtype)  # the draft model, stored compactly
        answers = write_answers(config, tokenizer, writer, device)
        target_answers = write_answers(own, tokenizer, target, device)
    timings["answers_s"] = time.perf_counter() - started

    started = time.perf_counter()
    seen = set(earlier_requests)
    requests = [text for text in write_instructions(config, tokenizer, target, device) if text not in seen]
    if config.init_from and not requests:
        raise SystemExit(f"every request seed {config.seed} wrote was already seen by the head in {config.init_from}; "
                         "give another --seed")
    timings["instructions_s"] = time.perf_counter() - started
    started = time.perf_counter()
    self_instruct = self_instruct_config(config)
    request_answers = write_answers(self_instruct, tokenizer, target, device, prompts=[(text, True) for text in requests])
    timings["self_instruct_answers_s"] = time.perf_counter() - started

    started = time.perf_counter()

    def scored(recipe: HeadTrainConfig, sequences: list[list[int]]) -> dict:
        return label_with_features(recipe, target, pack_rows(sequences, config.sequence_length, config.seed), device)

    request_data = scored(self_instruct, request_answers)
    # The draft's and the target's answers to the templates (a run that goes on writes neither), then the
    # target's answers to its own requests last, so the held-out rows (the last few) are the widest text.
    parts = [] if config.init_from else [scored(config, answers), scored(own, target_answers)]
    data = {key: torch.cat([part[key] for part in [*parts, request_data]]) for key in request_data}
    timings["teacher_s"] = time.perf_counter() - started

    started = time.perf_counter()
    target.requires_grad_(False)
    target.float()  # the head trains in float32 against the frozen embeddings and output rows
    if config.init_from:
        head, head_rows = load_head(Path(config.init_from), device, torch.float32)
        if tuple(config.target_layers) != head.target_layers:  # it learns to read lower layers too
            head = with_lower_layers(head, tuple(config.target_layers))
        head, head_rows = head.train(), head_rows.cpu()
    else:
        head_rows = torch.tensor(json.loads(Path(config.head_rows_from).read_text()), dtype=torch.long)
        head = DraftHead(head_config_for(target.config, config.target_layers)).to(device)
    train, held_out = split_rows(data, config.held_out_fraction)
    metrics = train_head(config, head, target, head_rows, train, held_out)
    timings["head_s"] = time.perf_counter() - started

    settings = {k: v for k, v in asdict(config).items() if k not in ("out_dir", "work_dir", "target_id", "head_rows_from", "init_from")}
    summary = {
        "config": settings, "target": target_name,
        "data": {"num_answers": len(answers), "num_target_answers": len(target_answers),
                 "target_answer_positions": int(parts[1]["tokens"].numel()) if parts else 0,
                 "num_self_instructions": len(requests), "num_self_instruct_answers": len(request_answers),
                 "self_instruct_answer_positions": int(request_data["tokens"].numel()),
                 "teacher_positions": int(data["tokens"].numel()),
                 "held_out_positions": int(held_out["tokens"].numel())},
        "held_out": metrics, "num_params": sum(p.numel() for p in head.parameters()),
        "device": str(device), "precision": precision_name(dtype),
        "seconds_this_run": {k: round(v, 1) for k, v in timings.items()},
    }
    if config.init_from:  # what the head it went on from had learnt, and from what
        summary["went_on_from"] = json.loads((Path(config.init_from) / "training.json").read_text())
    out_dir = Path(config.out_dir)
    head.save(out_dir, head_rows, summary)
    # The requests it trained on, shipped beside it, so a test can check no held-out prompt is among them.
    (out_dir / REQUESTS_FILE).write_text(json.dumps(earlier_requests + requests, indent=0, ensure_ascii=False),
                                         encoding="utf-8")
    print(f"held-out: {json.dumps(metrics)}")
    print(f"saved the head to {out_dir.resolve()}")
    return out_dir
