"""Inputs a user can get wrong, model pairs that cannot work, and padded vocabularies.

Every error must say what is wrong in words a user can act on, so the tests assert on the text.
Nothing here downloads: hub ids are tried with the hub in offline mode, and local pairs are tiny
random models saved to temporary folders.
"""

from __future__ import annotations

import math

import pytest
import torch

import specviz.models.precision
from specviz.analysis.architectures import tiny_model
from specviz.decoding.config import MAX_GAMMA, DecodeConfig
from specviz.decoding.engine import autoregressive_decode, decode_lanes, speculative_decode
from specviz.models.errors import IncompatiblePairError, ModelLoadError
from specviz.models.loading import check_tokenizers, load_pair, load_tokenizer
from specviz.models.pairs import ModelPair
from specviz.models.precision import PRECISION_ENV, choose_device_and_dtype, cpu_has_native_bf16, device_default
from specviz.models.presets import PRESETS, resolve_pair
from specviz.analysis.trace import Trace
from tests.tiny_models import EOS_ID, make_model, make_tokenizer, noisy_copy, random_prompts, tiny_pair

DECODERS = (autoregressive_decode, speculative_decode, decode_lanes)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(gamma=0), r"gamma \(γ, tokens drafted per round\) must be an integer from 1 to 16, got 0"),
        (dict(gamma=-3), r"gamma .* from 1 to 16, got -3"),
        (dict(gamma=MAX_GAMMA + 1), rf"gamma .* from 1 to {MAX_GAMMA}, got {MAX_GAMMA + 1}"),
        (dict(gamma=2.5), r"gamma .* must be an integer"),
        (dict(temperature=-0.5), r"temperature must be from 0 \(greedy\) to 10.0, got -0.5"),
        (dict(temperature=math.nan), r"temperature must be from 0 .*got nan"),
        (dict(temperature=math.inf), r"temperature must be from 0 .*got inf"),
        (dict(top_p=0.0), r"top-p must be in \(0, 1\] \(1 turns it off\), got 0.0"),
        (dict(top_p=1.5), r"top-p must be in \(0, 1\]"),
        (dict(top_p=-0.2), r"top-p must be in \(0, 1\]"),
        (dict(top_p=math.nan), r"top-p must be in \(0, 1\]"),
        (dict(top_k=-1), r"top-k must be an integer ≥ 0 \(0 turns it off\), got -1"),
        (dict(max_new_tokens=0), r"max new tokens must be a positive integer, got 0"),
        (dict(max_new_tokens=-5), r"max new tokens must be a positive integer"),
        (dict(draft_confidence=-0.1), r"draft confidence threshold must be from 0 \(off\) to below 1, got -0.1"),
        (dict(draft_confidence=1.0), r"draft confidence threshold must be from 0 \(off\) to below 1, got 1.0"),
        (dict(draft_confidence=math.nan), r"draft confidence threshold must be from 0"),
    ],
)
def test_bad_settings_are_refused_with_a_clear_message(settings, message):
    config = DecodeConfig(**settings)
    with pytest.raises(ValueError, match=message):
        config.validate()
    pair = tiny_pair("gpt2")
    for decode in DECODERS:  # refused before any model work
        with pytest.raises(ValueError, match=message):
            next(iter(decode(pair, [5, 6, 7], config)))


def test_the_default_precision_follows_the_device_and_the_host(monkeypatch):
    """float32 on every CPU: without native bf16 (AVX2 emulates it: a 4-token verify cost ~3 steps) and with it,
    AVX512-BF16 or AMX alike (specviz's float32 kernels decode faster than oneDNN's bf16 ones there); the host's
    variable overrides it, and an asked-for precision is always that."""
    monkeypatch.delenv(PRECISION_ENV, raising=False)
    for native, amx in ((False, False), (True, False), (True, True)):
        monkeypatch.setattr(specviz.models.precision, "cpu_has_native_bf16", lambda native=native: native)
        monkeypatch.setattr(specviz.models.precision, "cpu_has_amx", lambda amx=amx: amx)
        assert choose_device_and_dtype("cpu") == (torch.device("cpu"), torch.float32), (native, amx)
        assert choose_device_and_dtype("cpu", "bfloat16")[1] == torch.bfloat16  # asked for: always that
    monkeypatch.setenv(PRECISION_ENV, "bfloat16")
    assert choose_device_and_dtype("cpu")[1] == torch.bfloat16
    monkeypatch.setenv(PRECISION_ENV, "fp8")
    with pytest.raises(ModelLoadError, match="unknown precision 'fp8'"):
        choose_device_and_dtype("cpu")
    assert isinstance(cpu_has_native_bf16(), bool)
    monkeypatch.delenv(PRECISION_ENV)
    for native, expected in ((True, "bfloat16"), (False, "float16")):  # a GPU: its fast 16-bit type
        monkeypatch.setattr(specviz.models.precision, "cuda_has_native_bf16", lambda native=native: native)
        assert specviz.models.precision.default_precision(torch.device("cuda")) == expected
    # the page's and the README's "(default)" mark reads the same rule for each record's kind
    assert [device_default(kind) for kind in ("cuda", "cpu-amx", "cpu-native-bf16", "cpu-avx2")] == [
        "bfloat16", "float32", "float32", "float32"]


def test_the_precision_control_says_why_the_cpu_default_is_float32(monkeypatch):
    """The page's words follow the rule: with native bf16 the default is float32 all the same (and says why),
    without it bfloat16 would be software; a host's $SPECVIZ_PRECISION is named as the reason instead."""
    from specviz.app.run_section import words

    monkeypatch.delenv(PRECISION_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for native, amx, phrase in ((True, True, "native bf16 (AMX), and the default is float32 all the same"),
                                (True, False, "native bf16 (AVX512-BF16), and the default is float32 all the same"),
                                (False, False, "without native bf16 (AMX / AVX512-BF16), so the default is float32")):
        monkeypatch.setattr(words, "cpu_has_native_bf16", lambda native=native: native)
        monkeypatch.setattr(words, "cpu_has_amx", lambda amx=amx: amx)
        assert phrase in words.precision_info(), (native, amx)
        assert "by construction" in words.precision_info() and "“Exact here”" in words.precision_info()
        assert "rows a call" not in words.precision_info()  # how: the result card's one answer
    monkeypatch.setenv(PRECISION_ENV, "bfloat16")
    assert words.precision_info().startswith(f"Here the host set {PRECISION_ENV}, so the default is bfloat16.")


def test_good_settings_pass():
    for settings in (dict(), dict(gamma=1), dict(gamma=MAX_GAMMA), dict(temperature=0.0, top_p=1.0, top_k=0),
                     dict(temperature=2.0, top_p=0.01, top_k=3, max_new_tokens=1)):
        DecodeConfig(**settings).validate()


def test_bad_prompts_are_refused():
    pair = tiny_pair("gpt2")
    for decode in DECODERS:
        with pytest.raises(ValueError, match="the prompt is empty"):
            next(iter(decode(pair, [], DecodeConfig())))
        with pytest.raises(ValueError, match=r"prompt token ids \[128, 500\] are outside the vocabulary \(size 128\)"):
            next(iter(decode(pair, [3, 128, 500], DecodeConfig())))
        with pytest.raises(ValueError, match="outside the vocabulary"):
            next(iter(decode(pair, [-1], DecodeConfig())))


def test_encode_refuses_empty_and_too_long_prompts():
    tokenizer = make_tokenizer(["<s>", "</s>", "<pad>"] + [f"w{i}" for i in range(125)])
    pair = ModelPair.from_models(tiny_pair("gpt2", context_length=24).target, None, tokenizer)
    for text in ("", "   ", "\n"):
        with pytest.raises(ValueError, match="the prompt is empty"):
            pair.encode(text)
    assert pair.encode("w1 w2 w3") == [4, 5, 6]
    assert pair.decode([4, 5, 6]) == "w1 w2 w3"
    with pytest.raises(ValueError, match=r"the prompt is 30 tokens long, but these models see at most 24 tokens"):
        pair.encode(" ".join(["w7"] * 30))


def test_unknown_preset_and_half_custom_pairs():
    with pytest.raises(ModelLoadError, match=r"unknown model pair 'gpt-5'; choose one of: smollm2-135m, tiny-code, pythia"):
        load_pair("gpt-5")
    with pytest.raises(ModelLoadError, match="a custom pair needs both a target and a draft model id"):
        resolve_pair(target="some/model")
    with pytest.raises(ModelLoadError, match="needs both"):
        load_pair(draft="some/model")
    assert resolve_pair().name == "smollm2-135m"
    assert resolve_pair(target=" a/b ", draft="c/d ").target_id == "a/b"
    for name, preset in PRESETS.items():
        assert resolve_pair(name) is preset


def test_the_default_pairs_old_name_is_still_taken_everywhere_a_name_comes_in():
    """"embedded" was the default preset's name: saved runs, API calls and scripts that use it get
    smollm2-135m (one alias table), and a cached load under either name is the same pair."""
    from specviz.analysis.run import Run
    from specviz.app.request import Request
    from specviz.app.replay_page import replayed_controls
    from specviz.models.presets import DEFAULT_PRESET, PRESET_ALIASES, default_drafter_for, preset_name

    assert DEFAULT_PRESET == "smollm2-135m" and PRESET_ALIASES == {"embedded": "smollm2-135m"}
    assert "embedded" not in PRESETS and set(PRESET_ALIASES.values()) <= set(PRESETS)
    assert preset_name("embedded") == "smollm2-135m" and preset_name("tiny-code") == "tiny-code"
    assert resolve_pair("embedded") is PRESETS["smollm2-135m"]
    assert default_drafter_for("embedded") == default_drafter_for("smollm2-135m")
    settings = dict(target_id="", draft_id="", gamma=3, temperature=0, top_k=0, top_p=1, max_new_tokens=8, seed=0)
    assert Request.parse("Hi", "embedded", **settings).pair_name == "smollm2-135m"
    saved = Run.from_json(Run("hi", [1], {"pair": "embedded", "gamma": 3}, chat=True).to_json())  # a run saved before the rename
    assert replayed_controls(saved)["pair"] == "smollm2-135m"


def test_the_train_command_takes_the_default_pairs_old_name(monkeypatch):
    import specviz.training.distil as distil
    from specviz.cli import main

    seen = []
    monkeypatch.setattr(distil, "distil", seen.append)  # the recipe itself is not run
    for name in ("embedded", "smollm2-135m"):
        assert main(["train", "--recipe", name, "--steps", "3"]) == 0
    assert [config.steps for config in seen] == [3, 3]


def test_an_old_name_loads_the_same_pair(monkeypatch):
    # tiny-code stands in for a renamed preset: the default pair would need its converted target
    import specviz.models.presets as presets

    monkeypatch.setitem(presets.PRESET_ALIASES, "old-tiny", "tiny-code")
    assert load_pair("old-tiny", device="cpu") is load_pair("tiny-code", device="cpu")


@pytest.mark.timeout(60)
def test_unreachable_hub_id_fails_fast_with_a_clear_message(monkeypatch, tmp_path):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))  # nothing cached: must not be found
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    model_id = "specviz-tests/no-such-model"
    with pytest.raises(ModelLoadError) as error:
        load_pair(target=model_id, draft="specviz-tests/no-such-draft")
    message = str(error.value)
    assert repr(model_id) in message
    assert "Hugging Face Hub" in message and "network" in message
    # a path that is not there reads as a missing folder, not a hub problem
    with pytest.raises(ModelLoadError, match=r"no model folder at '\./no/such/folder'"):
        load_tokenizer("./no/such/folder")


def save_local_model(folder, model, tokenizer):
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_incompatible_tokenizers_are_refused_naming_both(tmp_path):
    special = ["<s>", "</s>", "<pad>"]
    target_tokenizer = make_tokenizer(special + [f"w{i}" for i in range(61)])
    draft_tokenizer = make_tokenizer(special + [f"v{i}" for i in range(61)])  # same size, other words
    target_dir, draft_dir = tmp_path / "target-model", tmp_path / "draft-model"
    target_tokenizer.save_pretrained(target_dir)
    draft_tokenizer.save_pretrained(draft_dir)
    loaded_target, loaded_draft = load_tokenizer(str(target_dir)), load_tokenizer(str(draft_dir))
    with pytest.raises(IncompatiblePairError) as error:
        check_tokenizers(str(target_dir), loaded_target, str(draft_dir), loaded_draft)
    message = str(error.value)
    assert repr(str(target_dir)) in message and repr(str(draft_dir)) in message
    assert "different vocabularies" in message and "one tokenizer shared by both models" in message
    check_tokenizers("a", loaded_target, "b", load_tokenizer(str(target_dir)))  # the same one passes

    # through load_pair too, with models in the folders: refused before the models are loaded
    save_local_model(target_dir, make_model("llama", vocab_size=64, hidden=32), target_tokenizer)
    save_local_model(draft_dir, make_model("llama", vocab_size=64, hidden=32, num_layers=1), draft_tokenizer)
    with pytest.raises(IncompatiblePairError, match="target-model.*draft-model"):
        load_pair(target=str(target_dir), draft=str(draft_dir))


def test_a_draft_folder_without_a_tokenizer_uses_the_targets_if_the_vocabulary_matches(tmp_path):
    """The shipped draft keeps no tokenizer (it is the target's); a mismatched one is still refused."""
    tokenizer = make_tokenizer(["<s>", "</s>", "<pad>"] + [f"w{i}" for i in range(61)])
    target = make_model("gpt2", vocab_size=64, hidden=32)
    target_dir = save_local_model(tmp_path / "target", target, tokenizer)
    (tmp_path / "bare-draft").mkdir()
    noisy_copy(target, 0.02).save_pretrained(tmp_path / "bare-draft")
    pair = load_pair(target=target_dir, draft=str(tmp_path / "bare-draft"), device="cpu")
    assert pair.vocab_size == 64 and pair.decode(pair.encode("w3 w4")).split() == ["w3", "w4"]
    make_model("gpt2", vocab_size=80, hidden=32).save_pretrained(tmp_path / "other-draft")
    with pytest.raises(IncompatiblePairError, match="no tokenizer of its own.*80 tokens.*64"):
        load_pair(target=target_dir, draft=str(tmp_path / "other-draft"), device="cpu")


@pytest.mark.parametrize("arch, words", [("mamba", "(MambaForCausalLM) is a recurrent model"),
                                         ("lfm2", "(Lfm2ForCausalLM) has conv layers beside its attention")])
def test_a_model_whose_state_cannot_step_back_is_refused_at_load(tmp_path, arch, words):
    """Rejected drafts are dropped by cutting the caches back; a recurrent model's running state cannot be (a
    tiny Mamba loaded, then failed in its first round with "only one element tensors can be converted to Python
    scalars"; LFM2 with "list index out of range" at load). Refused when the pair loads, as target or draft,
    through the loader the page uses, in words that name the model and the way out."""
    tokenizer = make_tokenizer(["<s>", "</s>", "<pad>"] + [f"w{i}" for i in range(125)])
    model_dir = save_local_model(tmp_path / arch, tiny_model(arch), tokenizer)
    for weights in tmp_path.joinpath(arch).glob("*.safetensors"):
        weights.unlink()  # refused from its config alone: a Space never downloads weights it would refuse
    with pytest.raises(ModelLoadError, match=r"the target \(") as error:
        load_pair(target=model_dir, draft=model_dir, device="cpu", precision="float32")
    assert words in str(error.value) and "pick a transformer (attention) model" in str(error.value)
    attention_model = make_model("llama")
    with pytest.raises(ModelLoadError, match=r"the draft \(") as error:
        ModelPair.from_models(attention_model, tiny_model(arch))
    assert words in str(error.value)


def test_a_model_that_writes_no_text_left_to_right_is_refused_in_one_sentence(tmp_path):
    """An encoder-decoder (T5) named as a pair's model: transformers' refusal listed some 400 config classes (3,249
    characters); the config alone now says what it is and what to pick, before any weights are read."""
    from transformers import AutoConfig, T5ForConditionalGeneration

    tokenizer = make_tokenizer(["<s>", "</s>", "<pad>"] + [f"w{i}" for i in range(61)])
    config = AutoConfig.for_model("t5", vocab_size=64, d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16)
    model_dir = save_local_model(tmp_path / "t5", T5ForConditionalGeneration(config), tokenizer)
    for weights in tmp_path.joinpath("t5").glob("*.safetensors"):
        weights.unlink()
    with pytest.raises(ModelLoadError, match=r"the target '.*t5' is no causal language model \(a t5 model") as error:
        load_pair(target=model_dir, draft=model_dir, device="cpu", precision="float32")
    assert len(str(error.value)) < 300 and "HuggingFaceTB/SmolLM2-135M-Instruct" in str(error.value)


def test_a_target_that_fails_the_check_at_load_is_refused_with_what_failed(monkeypatch):
    """Any other model whose forward cannot run the lanes' path (a verify against steps through the cache the
    lanes cut back) is refused at load with the error it gave, never in a visitor's run."""
    from specviz.models import invariance

    def failing_check(*args, **kwargs):
        raise IndexError("list index out of range")

    monkeypatch.setattr(invariance, "measure", failing_check)
    with pytest.raises(ModelLoadError, match=r"the target \(LlamaForCausalLM\) failed the check every target runs when "
                                             r"it loads.*\(IndexError: list index out of range\)"):
        ModelPair.from_models(make_model("llama", seed=5), None)


def test_local_custom_pair_loads_and_decodes(tmp_path):
    tokenizer = make_tokenizer(["<s>", "</s>", "<pad>"] + [f"w{i}" for i in range(61)])
    # GPT-2 layout, like the embedded pair: transformers 5's AutoTokenizer loads a qwen2/llama
    # folder's tokenizer as that model's own tokenizer class, which mangles this word-level one
    target = make_model("gpt2", vocab_size=64, hidden=32)
    target_dir = save_local_model(tmp_path / "target", target, tokenizer)
    draft_dir = save_local_model(tmp_path / "draft", noisy_copy(target, 0.02), tokenizer)
    pair = load_pair(target=target_dir, draft=draft_dir, device="cpu", precision="float32")
    assert load_pair(target=target_dir, draft=draft_dir, device="cpu", precision="float32") is pair  # loaded once per process
    assert pair.vocab_size == 64 and pair.eos_id == EOS_ID and pair.name == "custom"
    assert next(pair.target.parameters()).dtype == torch.float32
    prompt_ids = pair.encode("w3 w4 w5")
    config = DecodeConfig(gamma=3, max_new_tokens=12, stop_at_eos=False)
    baseline = Trace.from_events(autoregressive_decode(pair, prompt_ids, config))
    speculative = Trace.from_events(speculative_decode(pair, prompt_ids, config))
    assert speculative.token_ids == baseline.token_ids
    assert isinstance(pair.decode(speculative.token_ids), str)
    # a broken folder is a load error naming the folder, not a traceback
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="could not load the model folder"):
        load_pair(target=str(tmp_path / "broken"), draft=draft_dir)
    # the same folders in bfloat16 are another pair (both models cast), named by their precision
    half = load_pair(target=target_dir, draft=draft_dir, device="cpu", precision="bfloat16")
    assert half is not pair and half.precision == "bfloat16" and pair.precision == "float32"
    assert next(half.draft.parameters()).dtype == torch.bfloat16
    assert Trace.from_events(speculative_decode(half, prompt_ids, config)).num_tokens == 12
    with pytest.raises(ModelLoadError, match="unknown precision 'float8'; choose one of: float32, bfloat16"):
        load_pair(target=target_dir, draft=draft_dir, device="cpu", precision="float8")


def padded_pair(arch: str, shared: int = 96, padded: int = 128, with_tokenizer: bool = False):
    """Target with `padded` embedding rows, draft with `shared`; the padding rows win every argmax."""
    target = make_model(arch, seed=3, vocab_size=padded, hidden=32)
    draft = make_model(arch, seed=4, vocab_size=shared, hidden=32)
    with torch.no_grad():  # the draft: the target's weights cut to the shared vocabulary, plus noise
        target_state = target.state_dict()
        for name, parameter in draft.named_parameters():
            source = target_state[name]
            parameter.copy_(source[tuple(slice(0, n) for n in parameter.shape)])
            parameter.add_(torch.randn(parameter.shape, generator=torch.Generator().manual_seed(0)) * 0.03)
    head = target.get_output_embeddings()
    boost = torch.zeros(padded)
    boost[shared:] = 1e4  # what untrained padding rows could do: unsliced, the engine would emit them
    handle = head.register_forward_hook(lambda module, args, output: output + boost)
    tokenizer = make_tokenizer(["<s>", "</s>", "<pad>"] + [f"w{i}" for i in range(shared - 3)]) if with_tokenizer else None
    return ModelPair.from_models(target, draft, tokenizer), handle


@pytest.mark.parametrize("arch, with_tokenizer", [("gpt2", False), ("qwen2", True)])
def test_padded_vocabulary_is_sliced_to_the_shared_length(arch, with_tokenizer):
    pair, handle = padded_pair(arch, with_tokenizer=with_tokenizer)
    try:
        assert pair.target.config.vocab_size == 128 and pair.vocab_size == 96
        for seed, prompt_ids in enumerate(random_prompts(3, 96, seed=6)):
            greedy = DecodeConfig(gamma=3, max_new_tokens=16, stop_at_eos=False)
            baseline = Trace.from_events(autoregressive_decode(pair, prompt_ids, greedy))
            speculative = Trace.from_events(speculative_decode(pair, prompt_ids, greedy))
            assert speculative.token_ids == baseline.token_ids
            assert speculative.num_accepted > 0
            sampled = DecodeConfig(gamma=3, temperature=1.0, max_new_tokens=16, seed=seed, stop_at_eos=False, inspect=True)
            for decode in (autoregressive_decode, speculative_decode):
                trace = Trace.from_events(decode(pair, prompt_ids, sampled))
                assert trace.num_tokens == 16
                assert max(trace.token_ids) < 96
                for event in trace.rounds:
                    for detail in event.details or ():
                        assert all(token_id < 96 for token_id, _ in detail.target_top + detail.draft_top)
        # and out-of-range prompt ids are refused against the shared size, not the padded one
        with pytest.raises(ValueError, match=r"outside the vocabulary \(size 96\)"):
            next(iter(speculative_decode(pair, [3, 100], DecodeConfig())))
    finally:
        handle.remove()
