"""The default target's float32 linear layers read from its GGUF file's blocks: the same weights, a fifth of the bytes.

The default target comes from a GGUF file (Q4_1 layers, a Q8_0 embedding that is also the output head), which
specviz.models.convert dequantises once into float32: every weight is d·q + m (Q4_1) or q·d (Q8_0) of its block
of 32, in float32. A CPU's float32 step is bound by reading those 540 MB of weights; read as the file's blocks
(about 100 MB) and turned back into the very same float32 values as the kernel goes, the product does the same
arithmetic on less memory traffic.

Exact by construction: at load, each layer's blocks are dequantised by the kernel's own code
(fixed_rows.c, `specviz_dequantise_*`) and compared bitwise with the layer's float32 weight; only a layer whose
every weight matches reads its blocks, any other keeps the float32 kernel. The block products
(`specviz_rows4_q4_1`, `specviz_rows4_q8_0`) then run specviz_rows4's very sequence of FMAs over those equal
weights, so each output is bitwise what the float32 kernel gives (tests/test_gguf_rows.py checks it): a step, a
verify and transformers' generate() through these layers all compute what they computed before, only sooner.
Where the kernel does not run (another CPU, bfloat16, more than one thread, a prompt's own pass) the float32
weights serve as before; nothing else changes, so the row-count argument of specviz.models.fixed_rows holds.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from gguf import GGUFReader
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import AutoConfig
from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

from specviz.models.fixed_rows import block_kernels

BLOCK = 32  # weights per GGUF block, along a weight row
# per kind: bytes of a block in the file (its fp16 scales first) and how many scales lead it (Q4_1: d and m; Q8_0: d)
FILE_BYTES = {"Q4_1": 20, "Q8_0": 34}
SCALES = {"Q4_1": 2, "Q8_0": 1}
# as repacked for the kernel: each scale widened to float32, 2 bytes more
REPACKED_BYTES = {kind: size + 2 * SCALES[kind] for kind, size in FILE_BYTES.items()}
LAYER_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
               "ffn_down": "mlp.down_proj"}
SWITCH_ENV = "SPECVIZ_GGUF_BLOCKS"  # "0": the float32 weights serve (to compare)
SAVED_NAME = "gguf-blocks.safetensors"  # beside the converted target: the blocks, repacked, in its row order
EMBEDDING = "token_embd.weight"  # the embedding, also the output head of a target that ties them


def repack(kind: str, raw: np.ndarray) -> torch.Tensor:
    """A tensor's file blocks (rows, blocks·FILE_BYTES) as the kernel reads them: the fp16 scales widened to
    float32 (exactly: every fp16 is a float32), the integers after them → (rows, blocks·REPACKED_BYTES) uint8."""
    rows = raw.shape[0]
    blocks = torch.from_numpy(np.ascontiguousarray(raw)).view(rows, -1, FILE_BYTES[kind])  # (rows, nb, file bytes)
    num_scales = SCALES[kind]
    scales = blocks[..., : 2 * num_scales].contiguous().view(torch.float16).float()  # (rows, nb, scales)
    packed = torch.cat([scales.view(torch.uint8), blocks[..., 2 * num_scales:]], dim=-1)  # (rows, nb, repacked)
    return packed.reshape(rows, -1).contiguous()


def row_order(name: str, rows: int, config) -> np.ndarray:
    """The file's row for each of the layer's rows: transformers' GGUF reader permutes the query and key rows
    of a Llama (its rotary layout); its own rule, applied to the row numbers, gives the order."""
    heads = {"num_attention_heads": config.num_attention_heads,
             "num_key_value_heads": getattr(config, "num_key_value_heads", config.num_attention_heads)}
    order = np.arange(rows, dtype=np.int64).reshape(rows, 1)
    return LlamaTensorProcessor(config=heads).process(order, name).weights.reshape(rows)


def file_blocks(gguf_path: Path, config) -> dict[str, tuple[str, torch.Tensor]]:
    """Each linear layer's blocks in the file, by the layer's module name, in the layer's row order:
    name → (kind, (rows, blocks·REPACKED_BYTES) uint8)."""
    found = {}
    for tensor in GGUFReader(str(gguf_path)).tensors:
        kind = tensor.tensor_type.name
        parts = tensor.name.split(".")
        if kind not in FILE_BYTES:
            continue
        if tensor.name == EMBEDDING:
            names = ["lm_head"] if getattr(config, "tie_word_embeddings", False) else []
        elif parts[0] == "blk" and len(parts) == 4 and parts[2] in LAYER_NAMES:
            names = [f"model.layers.{parts[1]}.{LAYER_NAMES[parts[2]]}"]
        else:
            continue
        raw = np.asarray(tensor.data)  # (rows, blocks·file bytes), memory-mapped
        raw = raw[row_order(tensor.name, raw.shape[0], config)]
        for name in names:
            found[name] = (kind, repack(kind, raw))
    return found


def matches(kind: str, blocks: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the kernel's own dequantisation of `blocks` is bitwise `weight` (out, in)."""
    kernels = block_kernels(kind)
    num_out, num_in = weight.shape
    if (kernels is None or weight.dtype != torch.float32 or weight.device.type != "cpu" or num_in % BLOCK
            or blocks.shape != (num_out, num_in // BLOCK * REPACKED_BYTES[kind])):
        return False
    dequantised = torch.empty(num_out, num_in)  # (out, in)
    kernels[1](blocks.data_ptr(), dequantised.data_ptr(), num_out, num_in)
    return torch.equal(dequantised.view(torch.int32), weight.contiguous().view(torch.int32))


def saved_blocks(folder: Path, gguf_path: Path | None, config) -> dict[str, tuple[str, torch.Tensor]]:
    """The file's blocks as file_blocks gives them, saved once beside the converted target (reading the GGUF's
    own header takes seconds: its tokenizer's 49 k strings); {} where there is neither a saved copy nor a file."""
    saved = folder / SAVED_NAME
    if saved.is_file():
        with safe_open(str(saved), framework="pt") as reader:
            kinds = reader.metadata() or {}
            return {name: (kinds[name], reader.get_tensor(name)) for name in reader.keys() if name in kinds}
    if gguf_path is None:
        return {}
    found = file_blocks(gguf_path, config)
    staging = saved.with_name(f"{saved.name}.{os.getpid()}.partial")
    try:  # written aside, then renamed: a second process never reads half a file
        save_file({name: blocks for name, (_, blocks) in found.items()}, str(staging),
                  metadata={name: kind for name, (kind, _) in found.items()})
        os.replace(staging, saved)
    except OSError:  # a folder this user cannot write: read the GGUF again next time
        staging.unlink(missing_ok=True)
    return found


def blocks_status(folder: Path, gguf_path: Path | None) -> str:
    """The blocks saved beside the converted target `folder` (saved now if need be), or why there are none:
    what `specviz setup` says, so a first start does not pay for reading the GGUF."""
    if block_kernels("Q4_1") is None:
        return "not used here (no float32 kernel on this CPU)"
    found = saved_blocks(folder, gguf_path, AutoConfig.from_pretrained(str(folder)))
    if not found:
        return "none: the GGUF file is not on this machine, so the float32 weights serve"
    return f"{len(found)} layers, {folder / SAVED_NAME}"


def attach_blocks(model: torch.nn.Module, folder: Path, gguf_path: Path | None) -> int:
    """Give each float32 linear layer of `model` (loaded from `folder`) whose file blocks dequantise to its weight
    bitwise those blocks (`layer.specviz_blocks`, read by specviz.models.fixed_rows); how many layers got them.
    A file that does not read, a model it does not match, or one not in float32 on a CPU leaves every layer as
    it was."""
    parameter = next(model.parameters())
    if (block_kernels("Q4_1") is None or os.environ.get(SWITCH_ENV, "").strip() == "0"
            or parameter.dtype != torch.float32 or parameter.device.type != "cpu"):
        return 0
    try:
        found = saved_blocks(folder, gguf_path, model.config)
    except Exception:  # a file gguf cannot read, or a model of another shape: the float32 weights serve
        return 0
    attached = 0
    for name, layer in model.named_modules():
        if isinstance(layer, torch.nn.Linear) and name in found:
            kind, blocks = found[name]
            if matches(kind, blocks, layer.weight.detach()):
                layer.specviz_blocks = (kind, blocks)
                attached += 1
    return attached
