"""The head drafter's network: one layer that reads the target's own hidden states (EAGLE-style).

An independent draft model sees only the text. The head sees what the target computed: at position i it
takes the target's final hidden state f_i (the vector the target's output head turned into its distribution
for token i+1) and the embedding of token i+1, and predicts f_{i+1}; the target's own output head (its rows
in `head_rows`) turns that into a guess for token i+2 (Li et al. 2024, EAGLE, arXiv 2401.15077).

    input_i  = fc([f_i ; embed(x_{i+1})])          (2d → d)
    f̂_{i+1}  = norm(decoder_layer(input_0..i))      one Llama layer with its own KV cache
    q_{i+2}  = softmax(f̂_{i+1} · W_out[head_rows]ᵀ)

A head may also read lower layers of the target (`target_layers` in its config: indices into the target's
hidden_states, as EAGLE-3, arXiv 2503.01840, reads a low, a middle and a high layer): each through its own
RMSNorm, appended to fc's input. Where the head reads its own prediction (every draft after a round's first)
there are no such states, and they read as zeros, in training as in drafting.

specviz.decoding.drafters.HeadDrafter drafts with it; specviz.training.head_train trains it. Saved as its own folder:
config.json (a one-layer LlamaConfig), model.safetensors (matrices in int8 with a float16 scale per row, so
the head fits the assets budget; norms in float16), head_rows.json, training.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import DynamicCache, LlamaConfig, LlamaModel
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from specviz.models.compact import dequantize_rows, quantize_rows

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
ROWS_FILE = "head_rows.json"


def head_config_for(target_config, target_layers: tuple[int, ...] = ()) -> LlamaConfig:
    """One Llama layer as wide as the target (shaped like a Llama target's own layers; for others, a plain
    Llama layer of their width); vocab 1 because its inputs come as vectors. `target_layers`: the target's
    hidden_states it reads besides the final one."""
    size, heads = target_config.hidden_size, target_config.num_attention_heads
    return LlamaConfig(
        target_layers=list(target_layers), hidden_size=size, num_attention_heads=heads, num_hidden_layers=1,
        intermediate_size=getattr(target_config, "intermediate_size", None) or 4 * size,
        num_key_value_heads=getattr(target_config, "num_key_value_heads", None) or heads,
        head_dim=getattr(target_config, "head_dim", None) or size // heads,
        max_position_embeddings=getattr(target_config, "max_position_embeddings", None) or target_config.n_positions,
        rms_norm_eps=getattr(target_config, "rms_norm_eps", 1e-5),
        rope_parameters=getattr(target_config, "rope_parameters", None),
        hidden_act=getattr(target_config, "hidden_act", "silu"),
        vocab_size=1, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)


class DraftHead(nn.Module):
    """fc over [feature ; next token's embedding ; lower layers], then one decoder layer and a final norm."""

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        size = config.hidden_size
        self.target_layers = tuple(getattr(config, "target_layers", None) or ())
        # Lower layers' scales differ by orders of magnitude (the first position's most): each gets a norm of its own.
        self.layer_norms = nn.ModuleList(LlamaRMSNorm(size, eps=config.rms_norm_eps) for _ in self.target_layers)
        self.fc = nn.Linear((2 + len(self.target_layers)) * size, size, bias=False)
        self.body = LlamaModel(config)
        with torch.no_grad():  # start as "the next feature is this one plus the next token": a residual guess
            self.fc.weight.zero_()
            self.fc.weight[:, :size].copy_(torch.eye(size))
            self.fc.weight[:, size : 2 * size].copy_(torch.eye(size))

    def lower_layers(self, features: torch.Tensor, dtype: torch.dtype) -> list[torch.Tensor]:
        """The normed lower-layer states from features (b, m, d·(1+n)); zeros where only the final
        one is there (b, m, d): the head's own predictions."""
        size = self.config.hidden_size
        if features.shape[-1] == size:
            return [features.new_zeros(features.shape, dtype=dtype)] * len(self.target_layers)
        chunks = features[..., size:].to(dtype).split(size, dim=-1)  # n × (b, m, d)
        return [norm(chunk) for norm, chunk in zip(self.layer_norms, chunks)]

    def forward(self, features: torch.Tensor, next_embeddings: torch.Tensor, cache: DynamicCache | None = None,
                position_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                **attention_kwargs) -> torch.Tensor:
        """features (b, m, d) or (b, m, d·(1+n)) with the lower layers, next_embeddings (b, m, d) →
        predicted next features (b, m, d). attention_mask: None (causal) or a 4D boolean mask
        (·, 1, m, cached + m), True where a query may look: a draft tree's level (specviz.decoding.tree)
        or training-time test's (specviz.training.head_ttt). `attention_kwargs` reach the attention
        (specviz.models.slots passes each row's keys). Inputs come in the target's precision; they are cast
        to the head's own (its norm's: an int8 head, specviz.models.int8, computes in float32)."""
        dtype = self.body.norm.weight.dtype
        final = features[..., : self.config.hidden_size].to(dtype)  # (b, m, d)
        parts = [final, next_embeddings.to(dtype), *self.lower_layers(features, dtype)]
        inputs = self.fc(torch.cat(parts, dim=-1))  # (b, m, d)
        output = self.body(inputs_embeds=inputs, past_key_values=cache, use_cache=cache is not None,
                           position_ids=position_ids, attention_mask=attention_mask, **attention_kwargs)
        return output.last_hidden_state  # (b, m, d)

    def save(self, folder: Path, head_rows: torch.Tensor, summary: dict) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / CONFIG_FILE).write_text(json.dumps(self.config.to_dict(), indent=2, default=str))
        save_file(quantize_rows(self.state_dict()), str(folder / WEIGHTS_FILE))
        (folder / ROWS_FILE).write_text(json.dumps(head_rows.tolist()))
        (folder / "training.json").write_text(json.dumps(summary, indent=2))


def with_lower_layers(head: DraftHead, target_layers: tuple[int, ...]) -> DraftHead:
    """A head that reads the final state alone, widened to read `target_layers` too: the same
    network to begin with (fc's new columns are zero), so training goes on from what it knew."""
    if head.target_layers:
        raise ValueError(f"the head already reads the target's layers {list(head.target_layers)}")
    config = LlamaConfig.from_dict({**head.config.to_dict(), "target_layers": list(target_layers)})
    wider = DraftHead(config).to(device=head.fc.weight.device, dtype=head.fc.weight.dtype)
    state = {name: value for name, value in head.state_dict().items() if name != "fc.weight"}
    wider.load_state_dict(state, strict=False)  # its layer norms start at one
    with torch.no_grad():
        wider.fc.weight.zero_()
        wider.fc.weight[:, : head.fc.in_features].copy_(head.fc.weight)
    return wider


def load_head(folder: Path, device: torch.device, dtype: torch.dtype) -> tuple[DraftHead, torch.Tensor]:
    """The head and its output rows (sorted token ids), from a folder `DraftHead.save` wrote."""
    config = LlamaConfig.from_dict(json.loads((folder / CONFIG_FILE).read_text()))
    head = DraftHead(config)
    head.load_state_dict(dequantize_rows(load_file(str(folder / WEIGHTS_FILE))))
    rows = torch.tensor(json.loads((folder / ROWS_FILE).read_text()), dtype=torch.long)
    return head.to(device=device, dtype=dtype).eval(), rows.to(device)
