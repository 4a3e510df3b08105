"""What specviz decides for a CUDA device, checked on a CPU: the precision a card gets, the drafters kept in
the target's 16-bit type (fbgemm's int8 kernels are CPU-only), float16 where only CUDA has it, and what a
bench record says about the GPU. The GPU's own answers (bitwise verify, speed) need the GPU run."""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch

from specviz.analysis.expectations import describe_machine
from specviz.models import loading
from specviz.models.errors import ModelLoadError
from specviz.models.int8 import int8_available
from specviz.models.precision import choose_device_and_dtype, default_precision


def card(monkeypatch, native_bf16: bool) -> None:
    """torch.cuda's bf16 check as a card answers it: an A100/H100 natively, a T4 only by emulation."""
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: native_bf16 or including_emulation)


def test_a_card_with_native_bf16_gets_bf16_and_one_that_only_emulates_it_gets_float16(monkeypatch):
    monkeypatch.delenv("SPECVIZ_PRECISION", raising=False)
    card(monkeypatch, native_bf16=True)
    assert default_precision(torch.device("cuda")) == "bfloat16"
    card(monkeypatch, native_bf16=False)  # torch's default check says yes here: emulation counts
    assert default_precision(torch.device("cuda")) == "float16"
    assert choose_device_and_dtype("cuda", None) == (torch.device("cuda"), torch.float16)


def test_float16_is_a_cuda_precision_only():
    assert choose_device_and_dtype("cuda", "float16") == (torch.device("cuda"), torch.float16)
    with pytest.raises(ModelLoadError, match="CUDA only"):
        choose_device_and_dtype("cpu", "float16")


def test_on_cuda_the_drafters_stay_in_the_targets_16_bit_type(monkeypatch):
    """The default pair's preset asks for int8 drafters; on a CUDA device they are not int8 and load in the
    target's bfloat16 (the models are built on the CPU here: only the device choice is CUDA's)."""
    card(monkeypatch, native_bf16=True)
    real_load_model = loading.load_model
    monkeypatch.setattr(loading, "load_model", lambda model_id, device, dtype, spread=False:
                        real_load_model(model_id, torch.device("cpu"), dtype))
    monkeypatch.setattr(loading, "_cache", OrderedDict())
    assert int8_available(torch.device("cpu"))  # so on this CPU the same preset would give int8 drafters
    pair = loading.load_pair(device="cuda")
    assert not pair.int8_drafters and pair.precision == "bfloat16"
    for module in (pair.draft, pair.head, pair.draft_scorer, pair.head_scorer):
        assert {parameter.dtype for parameter in module.parameters()} == {torch.bfloat16}, type(module).__name__


def test_on_cuda_attention_never_waits_for_a_cudnn_plan_per_shape(monkeypatch):
    """A pair loaded for CUDA turns cuDNN's SDPA off (a plan per new key count cost the H200 head c = 0.87 on
    lengths it met first, 0.094 on the same lengths again); a CPU load leaves the flag as it found it."""
    real_load_model = loading.load_model
    monkeypatch.setattr(loading, "load_model", lambda model_id, device, dtype, spread=False:
                        real_load_model(model_id, torch.device("cpu"), dtype))
    monkeypatch.setattr(loading, "_cache", OrderedDict())
    was = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        loading.avoid_per_shape_attention_plans(torch.device("cpu"))
        assert torch.backends.cuda.cudnn_sdp_enabled()
        loading.load_pair("tiny-code", device="cuda")
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)


def test_a_record_made_on_cuda_names_the_gpu_its_cuda_and_capability(monkeypatch):
    card(monkeypatch, native_bf16=True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    machine = describe_machine("cuda")
    assert (machine["kind"], machine["gpu"], machine["cuda"], machine["gpu_capability"]) == (
        "cuda", "NVIDIA H100 80GB HBM3", "13.0", "9.0")
    assert machine["native_bf16"] and machine["float32_matmul"] == torch.get_float32_matmul_precision()
    assert describe_machine("cpu")["cuda"] is None
