"""The app's API endpoint, called with gradio_client against the launched server."""

from __future__ import annotations

import pytest

gradio_client = pytest.importorskip("gradio_client")
from gradio_client.exceptions import AppError  # noqa: E402

PROMPT = "def fibonacci(n):\n"
MAX_NEW_TOKENS = 24


@pytest.fixture(scope="module")
def client(app_url):
    return gradio_client.Client(app_url, verbose=False)


def generate(client, prompt=PROMPT, **settings):
    settings = {"pair": "tiny-code", "gamma": 4, "temperature": 0.0, "max_new_tokens": MAX_NEW_TOKENS, "seed": 0, **settings}
    return client.predict(prompt=prompt, api_name="/generate", **settings)


def test_generate_endpoint_is_listed(client):
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert "/generate" in endpoints


def test_the_api_documents_the_engines_defaults(client):
    """gradio reads /generate's arguments from its signature, built from specviz.app.settings: what a
    client sees is the engine's defaults (the API once said γ = 4 while the engine and the page used 3)."""
    from specviz.decoding.config import DecodeConfig

    parameters = client.view_api(print_info=False, return_format="dict")["named_endpoints"]["/generate"]["parameters"]
    documented = {p["parameter_name"]: p.get("parameter_default") for p in parameters}
    assert list(documented)[:3] == ["prompt", "pair", "gamma"]  # the positional order clients rely on
    for name in ("gamma", "temperature", "top_k", "top_p", "max_new_tokens", "seed", "ngram", "draft_confidence",
                 "gamma_schedule", "rivals", "tree"):
        assert documented[name] == getattr(DecodeConfig(), name), name


def test_a_tree_through_the_api_writes_the_target_alones_text(client):
    baseline_text, speculative_text, stats = generate(client, temperature=0.0, tree=6)
    assert baseline_text and baseline_text == speculative_text and stats["settings"]["tree"] == 6


def test_greedy_lanes_agree_and_stats_are_complete(client):
    baseline_text, speculative_text, stats = generate(client, temperature=0.0)
    assert baseline_text and baseline_text == speculative_text  # greedy: token for token
    baseline, speculative = stats["baseline"], stats["speculative"]
    assert baseline["num_tokens"] == speculative["num_tokens"] <= MAX_NEW_TOKENS
    assert baseline["target_forward_passes"] == baseline["num_tokens"]  # one forward per token
    assert baseline["draft_forward_passes"] == 0
    assert 1 <= speculative["target_forward_passes"] <= baseline["target_forward_passes"]
    assert speculative["draft_forward_passes"] > 0
    assert stats["speedup"] > 0 and stats["predicted_speedup"] > 0
    assert 0 <= stats["acceptance_rate"] <= 1
    assert 1 <= stats["best_gamma"] <= 16
    assert stats["settings"]["gamma"] == 4


def test_sampling_run(client):
    baseline_text, speculative_text, stats = generate(client, temperature=1.0, top_k=50, top_p=0.95, seed=3, gamma=6)
    assert baseline_text and speculative_text
    assert stats["settings"]["top_k"] == 50
    assert 1 <= stats["speculative"]["num_tokens"] <= MAX_NEW_TOKENS
    assert stats["speculative"]["mean_tokens_per_round"] >= 1


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"prompt": ""}, "prompt is empty"),
        ({"prompt": "   \n"}, "prompt is empty"),
        ({"gamma": 99}, "γ"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top-p"),
        ({"max_new_tokens": 0}, "max new tokens"),
        ({"pair": "no-such-pair"}, "unknown model pair"),
        ({"pair": "custom", "target_id": "/nonexistent/target", "draft_id": "/nonexistent/draft"}, "no model folder"),
        ({"pair": "custom", "target_id": "", "draft_id": ""}, "needs both"),
        ({"pair": "custom", "target_id": "specviz-test/no-such-model", "draft_id": "specviz-test/no-such-draft"}, "Hugging Face Hub"),
        ({"prompt": "x = 1\n" * 400}, "shorten"),
        ({"drafter": "ngram"}, "unknown drafter"),
        ({"drafter": "prompt-lookup", "ngram": 0}, "n-gram size"),
        ({"drafter": "prompt-lookup", "ngram": 2.5}, "n-gram size must be a whole number"),
        ({"reference": "yes"}, "reference must be true or false"),
    ],
)
def test_bad_inputs_give_clear_errors(client, settings, message):
    with pytest.raises(AppError) as raised:
        generate(client, **settings)
    assert message in str(raised.value)
    assert "Traceback" not in str(raised.value)


def test_still_serving_after_errors(client):
    with pytest.raises(AppError):
        generate(client, prompt="")
    baseline_text, speculative_text, stats = generate(client, max_new_tokens=8)
    assert stats["baseline"]["num_tokens"] >= 1 and speculative_text


def test_the_default_pair_answers_a_chat_question(client):
    """The default pair is a real instruct model: greedy, chat template on, lanes identical."""
    baseline_text, speculative_text, stats = generate(
        client, prompt="What is the capital of Scotland?", pair="embedded", max_new_tokens=12, chat=True
    )
    assert "Edinburgh" in baseline_text and baseline_text == speculative_text
    assert "<|im_start|>" not in baseline_text  # the template is the model's input, not its answer
    assert stats["settings"]["chat"] is True


def test_prompt_lookup_with_the_reference_lane(client):
    """Three lanes through the API: ours with prompt lookup, the target alone, transformers'."""
    prompt = "def add(a, b):\n    return a + b\n\n\ndef add("
    baseline_text, speculative_text, stats = generate(client, prompt=prompt, drafter="prompt-lookup", ngram=3,
                                                      reference=True)
    assert baseline_text == speculative_text == stats["reference"]["text"]
    assert stats["identical_tokens"] == {"speculative": True, "reference": True}
    assert stats["speculative"]["draft_forward_passes"] == 0  # no draft model ran
    assert stats["settings"]["drafter"] == "prompt-lookup" and stats["settings"]["reference"] is True
    assert stats["reference_speedup"] > 0 and stats["ours_over_reference"] > 0
