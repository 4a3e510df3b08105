"""Shipped weights stored compactly: matrices as int8 (or int4) integers with float16 scales.

Every tracked file travels with each run on a lent GPU machine, in one transfer of at most 64 MiB, the
tree included; as integers the weights take about half (int8) or a quarter (int4) of their float16 bytes.

What loads is the rounded model itself: the integers times their scales *are* the weights, rounded once
when the file was written, so both lanes of a run (and transformers' own `generate()`) see the same model
and exactness is a property of the model that loads. For a drafter the rounding changes only its q, which
the rejection rule keeps exact for any q. Loading stays transformers': the model class named by the
folder's config.json, built by `from_pretrained(None, config=…, state_dict=…)` from the dequantised weights.

    int8: name → int8 (rows, cols); name.int8_scale → float16 (rows, 1)        one scale per row
    int4: name → uint8 (rows, cols/2), two values a byte; name.int4_scale → float16 (rows, cols/32)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

COMPACT_FILE = "model.compact.safetensors"  # beside config.json; a folder has it or model.safetensors
INT8_SCALE = ".int8_scale"
INT4_SCALE = ".int4_scale"
INT4_GROUP = 32  # values that share one int4 scale, along a row: finer groups, smaller rounding error
FORMAT = {"format": "specviz-compact", "version": "1"}


def never(name: str) -> bool:
    return False


def quantize_rows(state: dict[str, torch.Tensor], int4: Callable[[str], bool] = never) -> dict[str, torch.Tensor]:
    """Matrices to int8 with one float16 scale per row (symmetric), or to int4 in groups where
    `int4(name)` says so; vectors to float16."""
    stored = {}
    for name, tensor in state.items():
        tensor = tensor.detach().float().cpu()
        if tensor.dim() != 2:
            stored[name] = tensor.to(torch.float16).contiguous()
        elif int4(name) and tensor.shape[1] % INT4_GROUP == 0:
            stored.update(quantize_int4(name, tensor))
        else:
            scale = tensor.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127  # (rows, 1)
            scale = scale.to(torch.float16).float()  # round with the scale the file will hold
            stored[name] = torch.round(tensor / scale).to(torch.int8).contiguous()  # (rows, cols)
            stored[name + INT8_SCALE] = scale.to(torch.float16).contiguous()
    return stored


def quantize_int4(name: str, tensor: torch.Tensor) -> dict[str, torch.Tensor]:
    rows, cols = tensor.shape
    groups = tensor.reshape(rows, cols // INT4_GROUP, INT4_GROUP)  # (rows, groups, 32)
    scale = (groups.abs().amax(dim=2, keepdim=True).clamp(min=1e-8) / 7).to(torch.float16).float()  # (rows, groups, 1)
    values = torch.clamp(torch.round(groups / scale), -8, 7).to(torch.int16) + 8  # (rows, groups, 32), 0..15
    values = values.reshape(rows, cols)
    packed = (values[:, 0::2] | (values[:, 1::2] << 4)).to(torch.uint8)  # (rows, cols/2)
    return {name: packed.contiguous(), name + INT4_SCALE: scale.squeeze(2).to(torch.float16).contiguous()}


def dequantize_rows(stored: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """quantize_rows undone, in float32 (a float16 file from before it loads unchanged)."""
    state = {}
    for name, tensor in stored.items():
        if name.endswith((INT8_SCALE, INT4_SCALE)):
            continue
        if name + INT4_SCALE in stored:
            state[name] = dequantize_int4(tensor, stored[name + INT4_SCALE])
        elif name + INT8_SCALE in stored:
            state[name] = tensor.float() * stored[name + INT8_SCALE].float()
        else:
            state[name] = tensor.float()
    return state


def dequantize_int4(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    rows = packed.shape[0]
    low, high = (packed & 0x0F).to(torch.int16), (packed >> 4).to(torch.int16)  # (rows, cols/2) each
    values = torch.stack([low, high], dim=2).reshape(rows, -1) - 8  # (rows, cols), -8..7
    groups = values.reshape(rows, scale.shape[1], INT4_GROUP).float()  # (rows, groups, 32)
    return (groups * scale.float().unsqueeze(2)).reshape(rows, -1)


def is_compact(folder: str | Path) -> bool:
    return (Path(folder) / COMPACT_FILE).is_file()


def save_compact(model: torch.nn.Module, folder: Path, int4: Callable[[str], bool] = never) -> None:
    """A transformers model's folder with its weights in COMPACT_FILE: config.json and
    generation_config.json as save_pretrained writes them, the weights rounded by quantize_rows."""
    folder.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(folder)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(folder)
    state = dict(model.state_dict())
    output = model.get_output_embeddings()
    if output is not None and output.weight is model.get_input_embeddings().weight:
        # the output head tied to the embeddings: stored once, as save_pretrained does, and tied again on load
        for name, module in model.named_modules():
            if module is output:
                state.pop(f"{name}.weight", None)
    save_file(quantize_rows(state, int4), str(folder / COMPACT_FILE), metadata=FORMAT)
    (folder / "model.safetensors").unlink(missing_ok=True)  # one weights file per folder


def load_compact(folder: str | Path, dtype: torch.dtype) -> torch.nn.Module:
    """The model in `folder`, built by transformers from its config and the dequantised weights."""
    folder = Path(folder)
    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    model_class = AutoModelForCausalLM._model_mapping[type(config)]
    state = dequantize_rows(load_file(str(folder / COMPACT_FILE)))
    model = model_class.from_pretrained(None, config=config, state_dict=state, dtype=dtype)
    if (folder / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(folder, local_files_only=True)
    # where it came from, as from_pretrained records it (a model built from a config has none)
    model.name_or_path = str(folder)
    return model.eval()

