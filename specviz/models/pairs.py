"""A loaded pair (the named ones are in specviz.models.presets, loading them in specviz.models.loading), and its
drafters' output heads restricted to their head rows (RowScorer, the one place both model drafters score tokens)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import PretrainedConfig

from specviz.catalogue import DrafterInfo
from specviz.models.errors import ModelLoadError
from specviz.models.int8 import quantize_linears
from specviz.models.invariance import Invariance, make_batch_invariant
from specviz.models.precision import precision_name


class RowScorer(nn.Module):
    """Hidden state (1, d) → full-vocabulary logits (1, vocab), -inf outside the rows, and the
    rows' own logits (1, rows): a linear layer over the chosen rows of an output matrix.

    At a 49k-token vocabulary the output head is most of a small drafter's step; scoring only the rows a
    drafter is likely to pick (sorted token ids, chosen when it was trained) costs a fraction of it. q is then
    zero outside the rows, which the rejection rule handles like any other q: the output stays the target's.
    """

    def __init__(self, output_weight: torch.Tensor, rows: torch.Tensor, vocab_size: int):
        super().__init__()
        self.rows = rows  # (rows,) sorted token ids
        self.vocab_size = vocab_size
        self.linear = nn.Linear(output_weight.shape[1], rows.shape[0], bias=False,
                                device=output_weight.device, dtype=output_weight.dtype)
        with torch.no_grad():
            self.linear.weight.copy_(output_weight[rows])  # (rows, d)
        self.input_dtype = output_weight.dtype

    @classmethod
    def over_output_of(cls, model: nn.Module, rows: torch.Tensor, vocab_size: int) -> "RowScorer":
        """The scorer over those rows of a model's output head (a causal LM's, or a target's for the head)."""
        return cls(model.get_output_embeddings().weight, rows, vocab_size)

    def to_int8(self) -> "RowScorer":
        """The rows as an int8 layer (specviz.models.int8), taking float32 inputs."""
        quantize_linears(self)
        self.input_dtype = torch.float32
        return self

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        row_logits = self.linear(hidden.to(self.input_dtype)).float()  # (1, rows)
        logits = row_logits.new_full((hidden.shape[0], self.vocab_size), float("-inf"))  # (1, vocab)
        logits[:, self.rows] = row_logits
        return logits, row_logits


def scorer_for(prepared: RowScorer | None, model: nn.Module, rows: torch.Tensor, vocab_size: int) -> RowScorer:
    """The scorer built when the pair loaded (int8 on a CPU) if it is for these rows; else a
    plain one over the model's output matrix (a pair assembled by hand, or whose rows were
    swapped since)."""
    if prepared is not None and prepared.rows is rows:
        return prepared
    return RowScorer.over_output_of(model, rows, vocab_size)


@dataclass
class ModelPair:
    """A target, its draft, and what the engine needs to know about them."""

    target: torch.nn.Module
    draft: torch.nn.Module | None  # None is allowed for drafters that need no model
    tokenizer: object | None  # a transformers tokenizer; the engine itself only sees ids
    device: torch.device  # where inputs go and sampling happens
    vocab_size: int  # shared vocabulary: logits are sliced to this many entries
    context_length: int  # most positions both models accept
    eos_id: int | None
    name: str = "custom"
    # Output rows the drafter may restrict itself to (sorted ids), from the draft's folder;
    # None: the draft's whole head. Any q keeps the rejection rule exact.
    draft_head_rows: torch.Tensor | None = None
    # The head drafter (specviz.decoding.drafters) and its output rows, for a target one was trained on.
    head: torch.nn.Module | None = None
    head_rows: torch.Tensor | None = None
    head_error: str | None = None  # why a head shipped for this target did not load
    # The draft's and the head's output rows as layers (RowScorer), built once at load;
    # a pair assembled by hand has none and its drafters build plain ones.
    draft_scorer: RowScorer | None = None
    head_scorer: RowScorer | None = None
    int8_drafters: bool = False  # whether the draft and the head run in int8 (specviz.models.int8)
    # Whether a verify rounds exactly like a step for this target here (specviz.models.invariance, at load)
    invariance: Invariance | None = None

    def lacks_for(self, info: DrafterInfo) -> str | None:
        """Why this pair cannot run the drafter, in words; None when it can."""
        if info.needs_draft_model and self.draft is None:
            return f"this pair has no draft model, which the {info.label} drafter needs: choose another drafter"
        if info.needs_head and self.head is None and self.head_error:
            return f"{self.head_error}: choose the draft model or prompt lookup, or train it again (`python -m specviz train --recipe head`)"
        if info.needs_head and self.head is None:
            return (f"no {info.label} was trained for this pair's target: choose the draft model or prompt lookup "
                    f"(the default pair's head is trained with `python -m specviz train --recipe head`)")
        return None

    @property
    def precision(self) -> str:
        """The target's weights' precision (both models load in one)."""
        return precision_name(next(self.target.parameters()).dtype)

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def uses_chat(self, chat: bool | None) -> bool:
        """chat=None means: the template when the pair has one (instruct targets want it)."""
        return self.has_chat_template and chat is not False

    def format_prompt(self, prompt_text: str, chat: bool | None = None) -> str:
        """The text the models see: the user's words, inside the chat template when it applies."""
        if not self.uses_chat(chat):
            return prompt_text
        messages = [{"role": "user", "content": prompt_text}]
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def encode(self, prompt_text: str, chat: bool | None = None, max_tokens: int = 0) -> list[int]:
        """Prompt text → ids, with the messages a user needs for empty or too-long prompts; `max_tokens` is a
        host's cap (hosting.HostingPolicy.max_prompt_tokens; 0: the context length alone)."""
        refuse_empty_prompt(prompt_text)
        ids = self.tokenizer(self.format_prompt(prompt_text, chat), add_special_tokens=False)["input_ids"]
        if not ids:
            raise ValueError("the prompt is empty after tokenizing: type some text to continue")
        templated = " (with the chat template)" if self.uses_chat(chat) else ""
        if len(ids) >= self.context_length:
            raise ValueError(f"the prompt is {len(ids)} tokens long{templated}, but these models see at most "
                             f"{self.context_length} tokens: shorten it to at most {self.context_length - 1} tokens")
        if max_tokens and len(ids) > max_tokens:
            raise ValueError(f"the prompt is {len(ids):,} tokens long{templated}, and this server reads at most "
                             f"{max_tokens:,} prompt tokens a run, so every visitor gets a turn: shorten it, or run "
                             f"specviz on your own machine")
        return ids

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids, skip_special_tokens=False)

    @classmethod
    def from_models(cls, target, draft, tokenizer=None, name: str = "custom", draft_head_rows=None) -> "ModelPair":
        """Wrap two loaded models; used by load_pair and by tests with tiny random models. The
        target gets its batch-invariant forward here (specviz.models.invariance), so every lane,
        transformers' generate() included, runs it; the pair records which guarantee holds."""
        models = [target] + ([draft] if draft is not None else [])
        for role, model in zip(("target", "draft"), models):
            refuse_recurrent(role, type(model), model.config)
        vocab_size = min([model.config.vocab_size for model in models]
                         + ([len(tokenizer)] if tokenizer is not None else []))
        eos_id = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else target.config.eos_token_id
        if isinstance(eos_id, list):
            eos_id = eos_id[0]
        device = next(target.parameters()).device
        if draft_head_rows is not None:
            draft_head_rows = draft_head_rows[draft_head_rows < vocab_size].to(device)
        context_length = min(context_length_of(model) for model in models)
        return cls(target=target, draft=draft, tokenizer=tokenizer, device=device, vocab_size=vocab_size,
                   context_length=context_length, eos_id=eos_id, name=name, draft_head_rows=draft_head_rows,
                   invariance=checked_at_load(target, vocab_size, context_length))


# layer_types entries of layers that keep a running state of the text (LFM2's "conv"); other entries name kinds
# of attention or of feed-forward ("sparse", "dense"), which a cache of keys and values serves
STATE_LAYER_TYPES = ("conv", "short_conv", "linear_attention", "mamba", "mamba2", "ssm", "recurrent", "rwkv")


def refuse_empty_prompt(prompt_text: str | None, hint: str = "type some text to continue") -> None:
    """ValueError for a prompt of nothing but white space: callers check the text before loading a pair too,
    so an empty prompt is refused at once rather than after the models' load."""
    if prompt_text is None or not str(prompt_text).strip():
        raise ValueError(f"the prompt is empty: {hint}")


def checked_at_load(target: nn.Module, vocab_size: int, context_length: int) -> Invariance:
    """The target's one-shape forward and its check at load (a verify against single steps through the cache
    the lanes cut back): a model that cannot even run that check cannot serve a round, so it is refused here
    with what failed, not in the middle of a visitor's run."""
    try:
        return make_batch_invariant(target, vocab_size, context_length)
    except torch.OutOfMemoryError:
        raise
    except (RuntimeError, IndexError, KeyError, TypeError, AttributeError, NotImplementedError) as error:
        raise ModelLoadError(
            f"the target ({type(target).__name__}) failed the check every target runs when it loads, a verify "
            f"against single steps through the cache speculative decoding cuts back ({type(error).__name__}: "
            f"{error}): it cannot serve speculative decoding here") from error


def refuse_recurrent(role: str, model_class: type, config: PretrainedConfig) -> None:
    """Speculative decoding drops the drafts the target rejects by cutting both models' caches back. A recurrent
    model (Mamba, RWKV, RecurrentGemma, hybrids such as Jamba: transformers marks them stateful) folds the
    text into a running state that cannot be cut back, and so do the convolution layers of a hybrid such as
    LFM2 (its config's layer_types): neither can serve a round (transformers' assisted generation refuses the
    stateful ones too). Said at load (from the config alone, before any weights download: loading.build_pair),
    before a run fails inside a round."""
    layer_types = getattr(config, "layer_types", None) or ()
    others = sorted({str(kind) for kind in layer_types if kind in STATE_LAYER_TYPES})
    if getattr(model_class, "_is_stateful", False):
        what = "is a recurrent model: it keeps a running state of the text"
    elif others:
        what = f"has {', '.join(others)} layers beside its attention, which keep a running state of the text"
    else:
        return
    raise ModelLoadError(f"the {role} ({model_class.__name__}) {what}, and that state cannot step back to drop the "
                         f"drafts the target rejects, which speculative decoding does every round; pick a transformer "
                         f"(attention) model")


def context_length_of(model) -> int:
    for attribute in ("max_position_embeddings", "n_positions", "seq_length"):
        value = getattr(model.config, attribute, None)
        if isinstance(value, int) and value > 0:
            return value
    return 2048
