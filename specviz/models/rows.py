"""A drafter's output head restricted to some rows: the one place both model drafters score tokens.

At a 49k-token vocabulary the output head is most of a small drafter's step; scoring only the
rows a drafter is likely to pick (sorted token ids, chosen when it was trained) costs a sixth of
it. q is then zero outside the rows, which the rejection rule handles like any other q: the
output stays exactly the target's.
"""

from __future__ import annotations

import torch
from torch import nn

from specviz.models.int8 import quantize_linears


class RowScorer(nn.Module):
    """Hidden state (1, d) → full-vocabulary logits (1, vocab), -inf outside the rows, and the
    rows' own logits (1, rows): a linear layer over the chosen rows of an output matrix."""

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
