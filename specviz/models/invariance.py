"""A target forward in which every row rounds as it would alone: batch invariance, by construction.

Greedy speculative decoding equals the target alone only if the logits a (γ+1)-token verify gives
position i are bitwise those a 1-token step gives there. Kernels break that whenever they pick their
summation order by the number of rows (oneDNN's AMX kernels in bfloat16, MKL in float32, cuBLAS) or
keys (SDPA, cuBLAS). No probe covers every machine, so nothing here is chosen by measuring; every row
is computed in one shape:

- attention in slots (specviz.models.slots), for steps, verifies, rivals, trees and transformers' generate();
- every linear layer in products of exactly call_rows(device) rows (4 on a CPU, SLOTS on a GPU): a slots
  call has that many; any other forward of at most MAX_ROWWISE rows runs in such blocks, zeros after the
  real ones; a prompt's own pass (more rows) runs as it is, and both lanes read it;
- in float32 on a CPU, a call's 4 rows through one small C kernel that reads each weight once
  (specviz.models.fixed_rows; the default target's weights read from its GGUF blocks, bitwise the same values:
  specviz.models.gguf_rows), else oneDNN with the weights packed once: MKL's F.linear costs about twice
  as much at 4 rows as at one; in bfloat16 on a CPU, oneDNN with the weights packed once (`packed`, which
  says when oneDNN's copy is made where the C kernel serves);
- a prompt read alone: transformers' assisted generation reads the prompt and its first drafts in one
  forward, where the lanes read the prompt in a pass of its own (its last row's logits alone) and the
  drafts as decoding rows. Inside `prompt_apart(n)` the target's forward splits such a first forward
  at the prompt's n ids into those two forwards, so generate() computes every row as the lanes do.

measure() still compares a verify with steps when a target loads: a check that the construction holds
(a failure there is a bug to report), never what decides it. A model slots cannot compute (attention outside
transformers' attention interface, soft-capping, a sliding window, products outside linear layers such as a
mixture of experts') runs as transformers computes it, and the page says it is not guaranteed.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from transformers import DynamicCache
from transformers.pytorch_utils import Conv1D

from specviz.models.fixed_rows import ROWS, fixed_rows
from specviz.models.precision import precision_name
from specviz.models.slot_calls import run_rows
from specviz.models.slots import MAX_ROWWISE, SLOTS, SLOTS_LAYOUT, SlotCache, call_rows, slots_wanted, uses_slots


PACKED_DTYPES = (torch.float32, torch.bfloat16)  # a CPU target's linear layers in these run oneDNN's packed kernel


def onednn_packs(dtype: torch.dtype) -> bool:
    """Whether oneDNN packs a linear weight of this dtype on this CPU (bfloat16 needs AVX-512 BW/VL/DQ or
    AVX-NE-CONVERT; held to AVX2 it refuses): asked once when a target loads, on a small weight."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(8, 16, dtype=dtype), 4)
    except RuntimeError:
        return False
    return True


def padded(plain_forward, block: int = SLOTS):
    """A row-wise layer's forward that computes its rows in products of exactly `block` rows (call_rows: zeros
    fill the last; up to MAX_ROWWISE rows), so a row's result never depends on how many rows ran beside it: a
    slots call's rows and a padded step run the very same product."""

    def forward(inputs: torch.Tensor) -> torch.Tensor:
        num_rows = inputs.shape[:-1].numel()
        if num_rows == block:  # a slots call's rows (every decoding layer call): one product, no copies
            return plain_forward(inputs.reshape(block, inputs.shape[-1]).contiguous()).view(*inputs.shape[:-1], -1)
        if num_rows > MAX_ROWWISE:
            return plain_forward(inputs)
        flat = inputs.reshape(num_rows, inputs.shape[-1])  # (M, in)
        outs = []
        for start in range(0, num_rows, block):
            rows = flat[start : start + block]
            if rows.shape[0] < block:
                rows = torch.cat([rows, rows.new_zeros(block - rows.shape[0], rows.shape[1])])  # (B, in)
            outs.append(plain_forward(rows.contiguous())[: min(block, num_rows - start)])  # (≤B, out)
        return (outs[0] if len(outs) == 1 else torch.cat(outs)).reshape(*inputs.shape[:-1], -1)

    forward.specviz_padded = True
    forward.specviz_packed = getattr(plain_forward, "specviz_packed", False)  # padded around oneDNN's packed kernel
    forward.specviz_onednn_weight = getattr(plain_forward, "specviz_onednn_weight", None)
    return forward


def packed(layer: torch.nn.Linear):
    """A float32 or bfloat16 linear layer's forward for a CPU: in float32 a call's 4 rows through
    specviz.models.fixed_rows' kernel (where it compiles); other inputs, and every bfloat16 one, through oneDNN
    with the weights packed once for call_rows rows. Why packed: F.linear hands oneDNN the plain weight at every
    call, and oneDNN reorders it into its blocked layout first, a pass over the weight each time (a step's 4-row
    bfloat16 products took 1.2–1.4× their packed time on an Intel Xeon, with AMX and held below it). The lanes'
    guarantee rests on every decoding call having call_rows rows, not on how this kernel rounds. Used only where
    onednn_packs(its dtype), decided once when the target loads, so a run never changes kernels.

    Where the kernel serves the layer, oneDNN's copy of the weight (as large as the weight: 540 MB for the default
    target) serves only 4-row calls while torch runs several threads, so it is packed at load only if torch runs
    several threads then, else at the first such call (OnDemand); a prompt's own pass (more than MAX_ROWWISE rows)
    reads the weight as loaded through F.linear, as fast at those row counts. Each row count still takes one kernel
    in a run: 4-row calls the C kernel (one thread) or oneDNN (several), longer ones F.linear."""
    weight = layer.weight.detach()
    bias = None if layer.bias is None else layer.bias.detach()
    rows = call_rows(weight.device)
    onednn_weight = OnDemand(lambda: torch.ops.mkldnn._reorder_linear_weight(weight, rows))  # oneDNN's layout

    def through_onednn(inputs: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(inputs, onednn_weight(), bias, "none", [], "")

    def off_kernel(inputs: torch.Tensor) -> torch.Tensor:
        if inputs.shape[:-1].numel() == ROWS:  # a decoding call while torch runs several threads
            return through_onednn(inputs)
        return torch.nn.functional.linear(inputs, weight, bias)  # a prompt's own pass: no second copy of the weight

    # the kernel multiplies exactly ROWS float32 rows: it serves only where every CPU call has that many
    forward = fixed_rows(layer, off_kernel) if rows == ROWS else through_onednn
    if forward is off_kernel:  # the kernel cannot serve this layer: oneDNN takes every call, as before
        forward = through_onednn
    if forward is through_onednn or torch.get_num_threads() > 1:
        onednn_weight()  # packed now: it serves this run's decoding calls
    forward.specviz_packed = True
    forward.specviz_onednn_weight = onednn_weight  # whether oneDNN's copy exists yet (its `ready`)
    return forward


class OnDemand:
    """A value computed at its first call (once, under a lock: two visitors' runs may decode at once), then kept."""

    def __init__(self, compute: Callable[[], torch.Tensor]):
        self.compute, self.value, self.lock = compute, None, threading.Lock()

    def __call__(self):
        if self.value is None:
            with self.lock:
                if self.value is None:
                    self.value = self.compute()
        return self.value

    @property
    def ready(self) -> bool:
        return self.value is not None


_PROMPT = threading.local()  # the prompt length of the generate() call running in this thread, if any


@contextlib.contextmanager
def prompt_apart(num_prompt: int) -> Iterator[None]:
    """While a generate() call runs in this thread: its first forward reads the prompt's `num_prompt` ids as
    the lanes' prompt pass does, and any ids after them as decoding rows (read_prompt_apart)."""
    before = getattr(_PROMPT, "length", None)
    _PROMPT.length = num_prompt
    try:
        yield
    finally:
        _PROMPT.length = before


def read_prompt_apart(plain_forward):
    """A causal LM's forward that, inside prompt_apart(n), splits a first forward (empty cache) over n ids or
    more in two: the prompt alone with its last row's logits (the lanes' prompt pass: forward.forward_new_ids,
    `last_only`), then the ids after it (the first drafts of assisted generation) as decoding rows. Its logits
    are those rows' (1, 1 + m − n, vocab): generate() reads the last ones only. Other calls pass through."""

    def forward(input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                past_key_values=None, logits_to_keep: int = 0, **kwargs):
        num_prompt = getattr(_PROMPT, "length", None)
        if (num_prompt is None or input_ids is None or past_key_values is None
                or past_key_values.get_seq_length() > 0 or input_ids.shape[1] < num_prompt):
            return plain_forward(input_ids=input_ids, attention_mask=attention_mask, past_key_values=past_key_values,
                                 logits_to_keep=logits_to_keep, **kwargs)
        positions = kwargs.pop("position_ids", None)  # (1, m) or None
        mask_of = lambda stop: None if attention_mask is None else attention_mask[:, :stop]  # noqa: E731
        output = plain_forward(input_ids=input_ids[:, :num_prompt], attention_mask=mask_of(num_prompt),
                               position_ids=None if positions is None else positions[:, :num_prompt],
                               past_key_values=past_key_values, logits_to_keep=1, **kwargs)
        if input_ids.shape[1] > num_prompt:
            rest = plain_forward(input_ids=input_ids[:, num_prompt:], attention_mask=mask_of(input_ids.shape[1]),
                                 position_ids=None if positions is None else positions[:, num_prompt:],
                                 past_key_values=past_key_values, **kwargs)
            output.logits = torch.cat([output.logits, rest.logits], dim=1)  # (1, 1 + m − n, vocab)
        if logits_to_keep:
            output.logits = output.logits[:, -logits_to_keep:]
        return output

    forward.specviz_prompt_apart = True
    return forward


def replace_forwards(model: torch.nn.Module, kinds: tuple[type, ...], mark: str, forward_for) -> None:
    """Give every layer of `kinds` that lacks `mark` the forward `forward_for(layer)` makes."""
    layers = [layer for layer in model.modules()
              if isinstance(layer, kinds) and not getattr(layer.forward, mark, False)]
    for layer in layers:
        layer.forward = forward_for(layer)


def why_not_slots(model: torch.nn.Module) -> str | None:
    """What keeps a target out of slots, as "this model has …" ends; None where slots serve it. Slots compute
    plain softmax attention over every earlier key, plugged in through transformers' attention interface, and
    pad linear layers to a call's rows: a model that needs more, or whose products are not all linear layers
    (a mixture of experts multiplies each expert's weights with however many rows chose it, so a row's
    rounding depends on the others), keeps its own."""
    config = model.config
    if not getattr(type(model), "_supports_attention_backend", False):
        return "attention written outside transformers' attention interface"
    if getattr(config, "attn_logit_softcapping", None):
        return "soft-capped attention"
    if getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True):
        return "a sliding attention window"
    unpadded = layers_with_weights_outside_linear(model)
    if unpadded:
        return f"weights outside linear layers ({', '.join(unpadded)}), which specviz cannot pad to a call's rows"
    return None


def layers_with_weights_outside_linear(model: torch.nn.Module) -> list[str]:
    """The kinds of layer holding a weight matrix that no padded layer computes (an embedding table is read
    row by row, so it needs none): experts and routers of a mixture of experts, a convolution."""
    padded_kinds = (torch.nn.Linear, Conv1D, torch.nn.Embedding)
    return sorted({type(layer).__name__ for layer in model.modules() if not isinstance(layer, padded_kinds)
                   and any(weight.ndim >= 2 for weight in layer.parameters(recurse=False))})


@dataclass(frozen=True)
class Invariance:
    """Which guarantee a target's forward gives: by construction or not, and what the check at load saw."""

    bitwise: bool  # the check at load: a k-token verify gave bitwise the logits of k 1-token steps
    max_difference: float  # the largest |Δ logit| the check saw between them
    padded_layers: int  # linear layers that compute SLOTS rows whatever the row count
    precision: str
    attention: str  # the attention the target runs: slots, or transformers' own
    by_construction: bool = False  # every decoding row computed in one shape (slots and padded layers)
    reason: str = ""  # why not by construction (a model slots cannot compute; the switch off)
    rows_per_call: int = SLOTS  # query rows in every decoding call (slots.call_rows of the target's device)

    @property
    def exact(self) -> bool:
        """Whether greedy lanes are promised to match: by construction, and the check at load agreed."""
        return self.by_construction and self.bitwise

    def summary(self) -> str:
        """One line a newcomer reads beside the run's precision."""
        if self.exact:
            return (f"the target computes every token it checks in one fixed shape ({self.rows_per_call} rows a call, each over "
                    f"its own keys), so checking several tokens at once rounds exactly like checking one "
                    f"({self.precision}); at temperature 0 both lanes write the same text by construction")
        if self.by_construction:
            return (f"the target computes every token it checks in one fixed shape, yet the check when it loaded "
                    f"found a verify off by up to {self.max_difference:.1g} from single steps ({self.precision}): "
                    f"a fault to report; until it is fixed the lanes may part where two tokens are that close")
        seen = ("the check when it loaded found no difference, which proves nothing for other lengths"
                if self.bitwise else f"the check when it loaded found up to {self.max_difference:.1g} in a score")
        return (f"not guaranteed here: {self.reason}, so checking several tokens at once may round the target's "
                f"numbers differently from checking one at a time ({self.precision}; {seen}); at temperature 0 "
                f"the lanes match unless two tokens are about that close")


def make_batch_invariant(model: torch.nn.Module, vocab_size: int, context_length: int) -> Invariance:
    """Give the target its one-shape forward (pack a CPU's linear layers for oneDNN, pad every linear layer to
    SLOTS rows, attend in slots), then check a verify against steps; what holds comes back."""
    if not slots_wanted():
        return measure(model, vocab_size, context_length, reason="specviz's one-shape forward is switched off")
    reason = why_not_slots(model)
    if reason is not None:
        return measure(model, vocab_size, context_length, reason=f"this model has {reason} and runs as transformers computes it")
    parameter = next(model.parameters())
    # where oneDNN cannot pack the dtype here, the layers keep their own forward (padded below): still one shape
    if parameter.dtype in PACKED_DTYPES and parameter.device.type == "cpu" and onednn_packs(parameter.dtype):
        replace_forwards(model, (torch.nn.Linear,), "specviz_packed", packed)
    # every linear layer, GPT-2's Conv1D too, padded (around the packed forward where there is one)
    block = call_rows(parameter.device)
    replace_forwards(model, (torch.nn.Linear, Conv1D), "specviz_padded", lambda layer: padded(layer.forward, block))
    model.set_attn_implementation(SLOTS_LAYOUT)
    if not getattr(model.forward, "specviz_prompt_apart", False):
        model.forward = read_prompt_apart(model.forward)
    return measure(model, vocab_size, context_length)


def plain_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of a target as transformers loads it (SDPA, plain linear layers): what a batch-invariant
    forward is compared against (`specviz profile`)."""
    plain = copy.deepcopy(model)
    for layer in plain.modules():
        if "forward" in vars(layer) and any(getattr(layer.forward, mark, False) for mark in ("specviz_padded", "specviz_packed", "specviz_prompt_apart")):
            del layer.forward  # the instance's padded or packed forward; the class's plain one shows again
    if plain.config._attn_implementation == SLOTS_LAYOUT:
        plain.set_attn_implementation("sdpa")
    return plain


def logits_of(model: torch.nn.Module, capacity: int):
    """A forward (new ids (1, n) → float32 logits (n, vocab)) and the cache it appends to, as the lanes run
    this target: in slots (specviz.models.slots) or through transformers' forward with a DynamicCache."""
    if uses_slots(model):
        cache = SlotCache(model.config, capacity)
        return lambda new_ids: run_rows(model, cache, new_ids)[0].float(), cache
    cache = DynamicCache()
    return lambda new_ids: model(input_ids=new_ids, past_key_values=cache, use_cache=True).logits[0].float(), cache


@torch.inference_mode()
def measure(model: torch.nn.Module, vocab_size: int, context_length: int, reason: str = "") -> Invariance:
    """Logits of one 5-token forward against five 1-token forwards from the same cache, on random ids (as
    much of it as `context_length` positions hold): bitwise equal or not, and the largest difference."""
    num_tokens = max(2, min(5, context_length - 1))
    generator = torch.Generator().manual_seed(0)
    device = next(model.parameters()).device
    bitwise, difference = True, 0.0
    for wanted in (24, 79):  # two cache lengths: kernels may change with the key count too
        used = max(1, min(wanted, context_length - num_tokens))
        ids = torch.randint(0, vocab_size, (1, used + num_tokens), generator=generator).to(device)  # (1, n)
        forward, cache = logits_of(model, used + num_tokens)
        forward(ids[:, :used])
        verify = forward(ids[:, used:])  # (k, vocab)
        cache.crop(-num_tokens)
        steps = torch.cat([forward(ids[:, i : i + 1]) for i in range(used, used + num_tokens)])  # (k, vocab)
        bitwise &= torch.equal(verify, steps)
        difference = max(difference, float((verify - steps).abs().max()))
    padded_layers = sum(getattr(m.forward, "specviz_padded", False) for m in model.modules())
    return Invariance(bitwise, difference, padded_layers, precision_name(next(model.parameters()).dtype),
                      model.config._attn_implementation, by_construction=uses_slots(model), reason=reason,
                      rows_per_call=call_rows(device))
