"""The head drafter's network: one layer that reads the target's own hidden states (EAGLE-style).

An independent draft model sees only the text. The head sees what the target computed: at
position i it takes the target's final hidden state f_i (the vector the target's output head
turned into its distribution for token i+1) and the embedding of token i+1, and predicts
f_{i+1}; the target's own output head (its rows in `head_rows`) turns that into a guess for
token i+2 (Li et al. 2024, EAGLE, arXiv 2401.15077).

    input_i  = fc([f_i ; embed(x_{i+1})])          (2d → d)
    f̂_{i+1}  = norm(decoder_layer(input_0..i))      one Llama layer with its own KV cache
    q_{i+2}  = softmax(f̂_{i+1} · W_out[head_rows]ᵀ)

specviz.decoding.head drafts with it; specviz.training.head_train trains it. Saved as its own folder: config.json
(a one-layer LlamaConfig), model.safetensors (matrices in int8 with a float16 scale per row, half the
bytes of float16, so the head fits the assets budget; norms in float16), head_rows.json, training.json.
"""

from __future__ import annotations

import json
from pathlib import Path
import torch
from torch import nn
from transformers import DynamicCache, LlamaConfig, LlamaModel


CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
ROWS_FILE = "head_rows.json"
SCALE_SUFFIX = ".int8_scale"


def quantize_rows(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Matrices to int8 with one float16 scale per output row (symmetric); vectors to float16."""
    stored = {}
    for name, tensor in state.items():
        tensor = tensor.detach().float()
        if tensor.dim() != 2:
            stored[name] = tensor.to(torch.float16).contiguous()
            continue
        scale = tensor.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127  # (out, 1)
        stored[name] = torch.round(tensor / scale).to(torch.int8).contiguous()  # (out, in)
        stored[name + SCALE_SUFFIX] = scale.to(torch.float16).contiguous()
    return stored


def dequantize_rows(stored: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """quantize_rows undone (a float16 file from before it loads unchanged)."""
    state = {}
    for name, tensor in stored.items():
        if name.endswith(SCALE_SUFFIX):
            continue
        scale = stored.get(name + SCALE_SUFFIX)
        state[name] = tensor.float() * scale.float() if scale is not None else tensor.float()
    return state


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
        """features, next_embeddings (b, m, d) → predicted next features (b, m, d).

        Inputs come in the target's precision; they are cast to the head's own (its norm's: an
        int8 head, specviz.models.int8, computes in float32)."""
        dtype = self.body.norm.weight.dtype
        inputs = self.fc(torch.cat([features.to(dtype), next_embeddings.to(dtype)], dim=-1))  # (b, m, d)
        output = self.body(inputs_embeds=inputs, past_key_values=cache, use_cache=cache is not None,
                           position_ids=position_ids)
        return output.last_hidden_state  # (b, m, d)

    def save(self, folder: Path, head_rows: torch.Tensor, summary: dict) -> None:
        from safetensors.torch import save_file

        folder.mkdir(parents=True, exist_ok=True)
        (folder / CONFIG_FILE).write_text(json.dumps(self.config.to_dict(), indent=2, default=str))
        save_file(quantize_rows(self.state_dict()), str(folder / WEIGHTS_FILE))
        (folder / ROWS_FILE).write_text(json.dumps(head_rows.tolist()))
        (folder / "training.json").write_text(json.dumps(summary, indent=2))


def load_head(folder: Path, device: torch.device, dtype: torch.dtype) -> tuple[DraftHead, torch.Tensor]:
    """The head and its output rows (sorted token ids), from a folder `DraftHead.save` wrote."""
    from safetensors.torch import load_file

    config = LlamaConfig.from_dict(json.loads((folder / CONFIG_FILE).read_text()))
    head = DraftHead(config)
    head.load_state_dict(dequantize_rows(load_file(str(folder / WEIGHTS_FILE))))
    rows = torch.tensor(json.loads((folder / ROWS_FILE).read_text()), dtype=torch.long)
    return head.to(device=device, dtype=dtype).eval(), rows.to(device)
