"""Shipped weights stored compactly (specviz.models.compact): the file round-trips to the model
that loads, through transformers' own classes, and re-saving a loaded model loses nothing more."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from specviz.models.compact import (
    COMPACT_FILE,
    INT4_GROUP,
    dequantize_rows,
    is_compact,
    load_compact,
    quantize_rows,
    save_compact,
)
from specviz.models.loading import load_model
from specviz.training.train import in_blocks
from tests.tiny_models import ARCHITECTURES, make_config


def random_model(arch: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config = make_config(arch, vocab_size=96, num_layers=2, hidden=64, context_length=64, init_std=0.2)
    return AutoModelForCausalLM.from_config(config).eval()


def test_int8_and_int4_round_within_half_a_step_of_their_scale():
    torch.manual_seed(1)
    weights = {"w8": torch.randn(40, 64) * 3, "w4": torch.randn(40, 64), "norm": torch.randn(64)}
    stored = quantize_rows(weights, int4=lambda name: name == "w4")
    assert stored["w8"].dtype == torch.int8 and stored["w4"].dtype == torch.uint8
    assert stored["w4"].shape == (40, 32) and stored["w4.int4_scale"].shape == (40, 64 // INT4_GROUP)
    restored = dequantize_rows(stored)
    step8 = stored["w8.int8_scale"].float()  # (40, 1)
    assert ((restored["w8"] - weights["w8"]).abs() <= step8 / 2 + 1e-6).all()
    step4 = stored["w4.int4_scale"].float().repeat_interleave(INT4_GROUP, dim=1)  # (40, 64)
    assert ((restored["w4"] - weights["w4"]).abs() <= step4 / 2 + 1e-6).all()
    assert torch.equal(restored["norm"], weights["norm"].half().float())
    assert not torch.equal(restored["w4"], weights["w4"])  # it did round


def test_rounding_again_changes_nothing():
    """What loads re-saves to the same integers and scales: a model is rounded once, when its file
    is first written, and never drifts by being loaded and saved again."""
    torch.manual_seed(2)
    weights = {"w8": torch.randn(16, 64), "w4": torch.randn(16, 64)}
    int4 = lambda name: name == "w4"  # noqa: E731
    once = quantize_rows(weights, int4)
    twice = quantize_rows(dequantize_rows(once), int4)
    assert once.keys() == twice.keys()
    assert all(torch.equal(once[name], twice[name]) for name in once)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_saved_folder_loads_as_the_same_transformers_model(arch, tmp_path):
    model = random_model(arch)
    save_compact(model, tmp_path, int4=in_blocks)
    assert is_compact(tmp_path) and not (tmp_path / "model.safetensors").exists()
    loaded = load_compact(tmp_path, torch.float32)
    assert type(loaded) is type(model)
    expected = dequantize_rows(load_file(str(tmp_path / COMPACT_FILE)))
    state = loaded.state_dict()
    assert all(torch.equal(state[name], tensor) for name, tensor in expected.items())
    if model.config.tie_word_embeddings:
        assert loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight
        assert not any(name.endswith("lm_head.weight") for name in load_file(str(tmp_path / COMPACT_FILE)))
    save_compact(model, tmp_path / "int8")
    ids = torch.tensor([[3, 5, 7, 11]])
    with torch.no_grad():
        rounded, exact = load_compact(tmp_path / "int8", torch.float32)(ids).logits, model(ids).logits  # (1, 4, vocab)
    assert 0 < (rounded - exact).norm() < 0.05 * exact.norm()  # the same network, its weights rounded


def test_the_pair_loader_reads_a_compact_folder_in_the_precision_asked(tmp_path):
    save_compact(random_model("llama"), tmp_path)
    model = load_model(str(tmp_path), torch.device("cpu"), torch.bfloat16)
    assert model.dtype == torch.bfloat16 and not model.training
