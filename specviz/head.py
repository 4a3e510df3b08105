"""The head drafter: a one-layer network that reads the target's own hidden states (EAGLE-style).

An independent draft model sees only the text. The head sees what the target computed: at
position i it takes the target's final hidden state f_i (the vector the target's output head
turned into its distribution for token i+1) and the embedding of token i+1, and predicts
f_{i+1}; the target's own output head (its rows in `head_rows`) turns that into a guess for
token i+2 (Li et al. 2024, EAGLE, arXiv 2401.15077).

    input_i  = fc([f_i ; embed(x_{i+1})])          (2d → d)
    f̂_{i+1}  = norm(decoder_layer(input_0..i))      one Llama layer with its own KV cache
    q_{i+2}  = softmax(f̂_{i+1} · W_out[head_rows]ᵀ)

Within a round the head drafts on its own predicted features; after every verify the engine
hands it the target's true hidden states (from the verify that runs anyway: no extra target
pass), and the positions it predicted are replaced by them. Any q keeps the rejection rule
exact, so the output stays the target's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig, LlamaModel

from specviz.drafters import Proposal
from specviz.forward import crop_cache, top_probability
from specviz.sampling import ProbsFn, sample

if TYPE_CHECKING:
    from specviz.engine import DecodeConfig
    from specviz.models import ModelPair

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
ROWS_FILE = "head_rows.json"


def head_config_for(target_config) -> LlamaConfig:
    """One Llama layer as wide as the target; vocab 1 because its inputs come as vectors.

    Shaped like a Llama target's own layers; for other targets, a plain Llama layer of their width.
    """
    size = target_config.hidden_size
    heads = target_config.num_attention_heads
    return LlamaConfig(
        hidden_size=size,
        intermediate_size=getattr(target_config, "intermediate_size", None) or 4 * size,
        num_attention_heads=heads,
        num_key_value_heads=getattr(target_config, "num_key_value_heads", None) or heads,
        head_dim=getattr(target_config, "head_dim", None) or size // heads,
        num_hidden_layers=1,
        vocab_size=1,
        max_position_embeddings=getattr(target_config, "max_position_embeddings", None) or target_config.n_positions,
        rms_norm_eps=getattr(target_config, "rms_norm_eps", 1e-5),
        rope_parameters=getattr(target_config, "rope_parameters", None),
        hidden_act=getattr(target_config, "hidden_act", "silu"),
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )


class DraftHead(nn.Module):
    """fc over [feature ; next token's embedding], then one decoder layer and a final norm."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        size = config.hidden_size
        self.fc = nn.Linear(2 * size, size, bias=False)
        self.body = LlamaModel(config)
        with torch.no_grad():  # start as "the next feature is this one plus the next token": a residual guess
            self.fc.weight.zero_()
            self.fc.weight[:, :size].copy_(torch.eye(size))
            self.fc.weight[:, size:].copy_(torch.eye(size))

    def forward(self, features: torch.Tensor, next_embeddings: torch.Tensor, cache: DynamicCache | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """features, next_embeddings (b, m, d) → predicted next features (b, m, d)."""
        inputs = self.fc(torch.cat([features, next_embeddings], dim=-1))  # (b, m, d)
        output = self.body(inputs_embeds=inputs, past_key_values=cache, use_cache=cache is not None,
                           position_ids=position_ids)
        return output.last_hidden_state  # (b, m, d)

    def save(self, folder: Path, head_rows: torch.Tensor, summary: dict) -> None:
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        (folder / CONFIG_FILE).write_text(json.dumps(self.config.to_dict(), indent=2, default=str))
        state = {name: tensor.detach().to(torch.float16).contiguous() for name, tensor in self.state_dict().items()}
        save_file(state, str(folder / WEIGHTS_FILE))
        (folder / ROWS_FILE).write_text(json.dumps(head_rows.tolist()))
        (folder / "training.json").write_text(json.dumps(summary, indent=2))


def load_head(folder: Path, device: torch.device, dtype: torch.dtype) -> tuple[DraftHead, torch.Tensor]:
    """The head and its output rows (sorted token ids), from a folder `DraftHead.save` wrote."""
    from safetensors.torch import load_file

    config = LlamaConfig.from_dict(json.loads((folder / CONFIG_FILE).read_text()))
    head = DraftHead(config)
    head.load_state_dict(load_file(str(folder / WEIGHTS_FILE)))
    rows = torch.tensor(json.loads((folder / ROWS_FILE).read_text()), dtype=torch.long)
    return head.to(device=device, dtype=dtype).eval(), rows.to(device)


class HeadDrafter:
    """Drafts with a DraftHead over the target's hidden states; the engine feeds it those states.

    Positions 0..n-2 of the committed text have true target features (the target's cache holds
    committed[:-1]); the head's KV cache holds its layer's entries for the positions it has read
    with true features, so a round only feeds what the last verify added.
    """

    reads_target = True

    def __init__(self, head: DraftHead, target, head_rows: torch.Tensor, vocab_size: int, to_probs: ProbsFn,
                 generator: torch.Generator, confidence_threshold: float = 0.0):
        self.head = head
        self.embed = target.get_input_embeddings()
        self.head_weight = target.get_output_embeddings().weight[head_rows]  # (rows, d)
        self.head_rows = head_rows
        self.vocab_size = vocab_size
        self.to_probs = to_probs
        self.generator = generator
        self.confidence_threshold = confidence_threshold
        self.cache = DynamicCache()
        self.features: torch.Tensor | None = None  # (1, known, d): the target's true hidden states

    @classmethod
    def build(cls, pair: "ModelPair", config: "DecodeConfig", to_probs: ProbsFn, generator: torch.Generator) -> "HeadDrafter":
        return cls(pair.head, pair.target, pair.head_rows, pair.vocab_size, to_probs, generator, config.draft_confidence)

    def prefill(self, prompt_ids: torch.Tensor) -> int:
        return 0  # it reads the target's prefill states, handed over by observe_target

    def observe_target(self, hidden: torch.Tensor, start: int) -> None:
        """The target's final hidden states (m, d) for positions start..start+m-1."""
        known = hidden.unsqueeze(0)  # (1, m, d)
        self.features = known if self.features is None else torch.cat([self.features[:, :start], known], dim=1)

    def row_logits(self, predicted: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Full-vocabulary logits (1, vocab), -inf outside the rows, and the head's top probability."""
        row_logits = torch.nn.functional.linear(predicted, self.head_weight).float()  # (1, rows)
        logits = row_logits.new_full((1, self.vocab_size), float("-inf"))  # (1, vocab)
        logits[:, self.head_rows] = row_logits
        return logits, top_probability(row_logits)

    def propose(self, committed_ids: torch.Tensor, num_tokens: int) -> Proposal:
        num_committed = committed_ids.shape[1]
        start = self.cache.get_seq_length()
        positions = torch.arange(start, num_committed - 1, device=committed_ids.device).view(1, -1)  # (1, m)
        features = self.features[:, start : num_committed - 1]  # (1, m, d)
        next_embeddings = self.embed(committed_ids[:, start + 1 : num_committed])  # (1, m, d)
        predicted = self.head(features, next_embeddings, self.cache, positions)[:, -1]  # (1, d)
        drafted, probs, confidences = [], [], []
        stopped_unsure = False
        for step in range(num_tokens):
            logits, confidence = self.row_logits(predicted)
            if self.to_probs.greedy:
                next_id = logits.argmax(-1)  # (1,)
            else:
                step_probs = self.to_probs(logits)  # (1, vocab)
                next_id = sample(step_probs, self.generator)  # (1,)
                probs.append(step_probs)
            drafted.append(next_id)
            confidences.append(confidence)
            if step == num_tokens - 1:
                break
            if self.confidence_threshold > 0 and float(confidence) < self.confidence_threshold:
                stopped_unsure = True
                break
            # The next input reads the head's own prediction where the target's state is not known yet.
            position = torch.tensor([[num_committed - 1 + step]], device=committed_ids.device)  # (1, 1)
            predicted = self.head(predicted.unsqueeze(1), self.embed(next_id.view(1, 1)), self.cache, position)[:, -1]
        draft_ids = torch.cat(drafted)  # (γ',)
        if self.to_probs.greedy:
            draft_probs = torch.nn.functional.one_hot(draft_ids, self.vocab_size).float()  # (γ', vocab)
        else:
            draft_probs = torch.cat(probs)  # (γ', vocab)
        # Keep only what was read with true features: the verify's states replace the rest.
        crop_cache(self.cache, num_committed - 1)
        return Proposal(draft_ids, draft_probs, len(drafted), tuple(torch.stack(confidences).tolist()), stopped_unsure)

    def rollback(self, num_committed: int) -> None:
        if self.features is not None:
            self.features = self.features[:, : num_committed - 1]
        crop_cache(self.cache, num_committed - 1)
