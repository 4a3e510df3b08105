"""Long prompts: a host's cap on prompt tokens, the measured prefill speed and the reading time a page says
before a long prompt is read (minutes under a bare "Generating…" read as a hang)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from specviz.analysis import prefill
from specviz.app import request as request_module
from specviz.app import ui
from specviz.app.request import Request
from specviz.decoding.events import PrefillEvent
from tests.test_ui_handlers import page_handler
from tests.tiny_models import tiny_pair


@pytest.fixture(autouse=True)
def no_measurements(monkeypatch):
    monkeypatch.setattr(prefill, "measured", {})


def test_a_prompt_is_estimated_from_a_prefill_measured_near_its_length():
    pair = tiny_pair("llama", context_length=1024)
    key = prefill.pair_key(pair)
    prefill.record_prefill(key, 100, 0.5)
    prefill.record_prefill(key, 800, 2.0)
    near = prefill.estimate_prefill(pair, list(range(900)))
    assert near.measured_tokens == 800 and near.seconds == pytest.approx(900 * 2.0 / 800) and not near.extrapolated
    assert prefill.estimate_prefill(pair, list(range(110))).measured_tokens == 100


def test_a_prompt_far_longer_than_any_measured_adds_its_attention_timed_at_its_length(monkeypatch):
    """A 7,800-token prompt was estimated at 5 s from a fit through 256- and 512-token probes and took 11 s
    (an Intel Xeon with AMX, bfloat16): the attention, which grows with the square of the length, is too
    small at 512 tokens to measure. The estimate scales the probe's other work per token and adds the
    attention timed at the prompt's own length."""
    pair = tiny_pair("llama", context_length=4096)
    monkeypatch.setattr(prefill, "probe_prefill", lambda _pair, ids: (len(ids), {512: 1.5}[len(ids)]))
    monkeypatch.setattr(prefill, "attention_seconds", lambda _pair, num_tokens: 1e-6 * num_tokens ** 2)
    estimate = prefill.estimate_prefill(pair, [1] * 2048)
    assert estimate.extrapolated and estimate.measured_tokens == 512
    linear = 1.5 - 1e-6 * 512 ** 2  # the probe without its attention
    assert estimate.seconds == pytest.approx(linear * 4 + 1e-6 * 2048 ** 2)  # 9.1 s; per token from 512: 6 s
    assert prefill.measured[prefill.pair_key(pair)] == [(512, 1.5)]  # probed once, kept
    note = prefill.reading_note(estimate, 2)
    assert "from a 512-token prefill measured here, per token, and the attention" in note


def test_the_attention_is_timed_on_the_targets_own_shapes():
    pair = tiny_pair("llama", context_length=1024)
    assert prefill.attention_seconds(pair, 600) > 0
    estimate = prefill.estimate_prefill(pair, [1] * 1000)  # the real probe and the real attention
    assert estimate.extrapolated and estimate.measured_tokens == 512 and estimate.seconds > 0


def test_a_prompt_no_longer_than_the_probes_is_timed_itself():
    pair = tiny_pair("llama", context_length=1024)
    estimate = prefill.estimate_prefill(pair, [1] * 300)
    assert estimate.measured_tokens == 300 and not estimate.extrapolated and estimate.measured_tokens_per_s > 0


def test_a_live_runs_target_alone_prefill_is_recorded():
    pair = SimpleNamespace(name="p", device="cpu", precision="float32")
    events = [PrefillEvent("baseline", 500, 1, 1.25, 1, 0), PrefillEvent("speculative", 500, 1, 9.0, 1, 1)]
    assert list(prefill.recording_prefills(pair, events)) == events
    assert prefill.measured[prefill.pair_key(pair)] == [(500, 1.25)]  # the target's alone, not both models'


def test_the_reading_note_is_said_above_its_threshold_only():
    slow = prefill.PrefillEstimate(8000, 96.0, 1000, 83.3)
    note = prefill.reading_note(slow, 2)
    assert note.startswith("Reading the prompt first: 8,000 tokens take the target about 96 s in each of the 2 lanes")
    assert "83 tokens/s measured on a 1,000-token prompt here" in note
    assert prefill.reading_note(prefill.PrefillEstimate(400, 1.0, 400, 400.0), 2) == ""


def test_a_host_caps_the_prompts_tokens_with_a_message(monkeypatch):
    """SPECVIZ_MAX_PROMPT_TOKENS (hosting.HostingPolicy.max_prompt_tokens): too long a prompt is a message
    before anything runs, at the one place the page, the API and the teaching sections encode a prompt."""
    monkeypatch.setattr(request_module, "POLICY", dataclasses.replace(request_module.POLICY, max_prompt_tokens=50))
    long = Request.parse(prompt="def add(a, b):\n    return a + b\n" * 20, pair="tiny-code", chat=False)
    pair = long.load()
    with pytest.raises(ValueError, match=r"this server reads at most 50 prompt tokens a run.*shorten it"):
        long.encode(pair)
    assert len(Request.parse(prompt="def add(a, b):", pair="tiny-code", chat=False).encode(pair)) <= 50


def test_the_page_says_the_reading_time_before_a_long_prompt_is_read(monkeypatch):
    """Through the page's own Run handler: the status before the first token names the reading time."""
    monkeypatch.setattr(prefill, "NOTE_ABOVE_S", 0.0)  # the tiny-code pair reads fast: say it anyway
    demo = ui.build_app(preload=False)
    block_fn = page_handler(demo, "on_run", reads="pace")
    # past a probe's 256 tokens, within tiny-code's 384
    settings = {"prompt": "def add(a, b):\n    return a + b\n" * 24, "chat": False, "pair": "tiny-code",
                "drafter": "model", "max-new-tokens": 4}
    arguments = [settings.get(component.elem_id, component.value) for component in block_fn.inputs]
    updates = block_fn.fn(SimpleNamespace(session_hash="prefill-test"), *arguments)
    try:
        statuses = [str(value.get(next(c for c in block_fn.outputs if c.elem_id == "status"), ""))
                    for value in (next(updates), next(updates))]
    finally:
        updates.close()
    assert "Reading the prompt first:" in statuses[1] and "tokens/s measured" in statuses[1], statuses
    short = {**settings, "prompt": "def add(a, b):"}
    updates = block_fn.fn(SimpleNamespace(session_hash="prefill-test"),
                          *[short.get(component.elem_id, component.value) for component in block_fn.inputs])
    try:
        next(updates)
        assert "Reading the prompt" not in str(next(updates))  # a short prompt: nothing to say
    finally:
        updates.close()
