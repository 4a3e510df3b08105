"""The lanes: each lane's coloured text as it grows, and the run view the page keeps.

A `LaneView` is fed engine events plus a `decode` function (ids → text) and keeps the text of
every token it has shown, so everything after the run (inspector, explainer) works from plain
data. Every token is drawn by one rule, `RoundEvent.shown_tokens()`, whatever the lane.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from specviz.catalogue import DEFAULT_LANES, PLAIN_LANES, drafter_info, lane_info
from specviz.decoding.events import Event, PrefillEvent, RoundEvent, ShownToken
from specviz.app.render.tokens import (
    LANE_STYLE, LEGEND_ITEMS, STRUCK, draft_reason, draft_verdict_text, drafted_title, escape_text, first_pick_title, mark_parting,
    own_reason, rejected_index, rivals_marker, stop_marker, taken_rival_title, token_span, visible_text,
)
from specviz.app.render.pieces import Piece, byte_note, label_text, token_piece
from specviz.app.render.rule import PLAIN_KEY
from specviz.app.render.tree_round import node_texts, tree_mark
from specviz.analysis.run import Run
from specviz.analysis.payoff import Payoff
from specviz.analysis.trace import Trace, first_divergence, first_parting
from specviz.app.wording import count

Decode = Callable[[list[int]], str]
LANE_TEXT_MAX_PX = 400  # a longer lane scrolls inside its box; the title and figures above it stay put


@dataclass
class RoundTexts:
    """The text of one round's tokens, as shown."""

    drafted: list[str]  # each drafted token, in order
    own: list[str] = field(default_factory=list)  # the target's own kept tokens (resample/bonus/plain)
    guesses: list[str] = field(default_factory=list)  # a rival round's guesses (RoundEvent.guesses), surest first
    nodes: list[str] = field(default_factory=list)  # a tree round's nodes (RoundEvent.nodes), each after its ancestors
    # hover lines on how a token's bytes join its neighbours' into characters (pieces.byte_note), by
    # ("drafted" | "own", index); absent for tokens of whole characters
    byte_notes: dict[tuple[str, int], str] = field(default_factory=dict)

    def titled(self, role: str, index: int, title: str) -> str:
        """A token's hover with its byte note first, where it has one."""
        note = self.byte_notes.get((role, index))
        return f"{note}\n{title}" if note else title

    @property
    def next_text(self) -> str:
        return "".join(self.own)


def own_title(event: RoundEvent, lane: str, greedy: bool = False, rejected_text: str | None = None) -> str:
    """The tooltip of a target token: how it came about (where it replaced a draft: `rejected_text`)."""
    if event.gamma > 0:
        return own_reason(event, greedy, rejected_text)
    if lane == "reference":
        return f"from transformers' generate(): {count(len(event.emitted_ids), 'token')} from one target forward"
    if lane == "baseline":
        return f"token {event.position + 1}: one target forward"
    return "nothing drafted (no room left, or prompt lookup found no match): one plain target step"


def target_pick_text(event: RoundEvent, index: int, texts: "RoundTexts") -> str | None:
    """The target's own top pick at drafted position `index` at temperature 0, where the round shows it:
    the draft itself where it was kept, the target's own token where it was rejected, else unknown."""
    verdict = event.verdict(index)
    if verdict == "accepted":
        return texts.drafted[index]
    if verdict == "rejected" and event.next_kind == "resample" and texts.own:
        return texts.own[0]
    return None


@dataclass
class LaneView:
    """One lane as the page shows it: its trace, its HTML fragments and the text of every token."""

    lane: str
    prompt_ids: list[int]
    prompt_text: str
    chat: bool = False  # the prompt went through the chat template: show it as a user turn
    # Temperature 0: a draft is kept exactly when it is the target's top pick, so hovers say that, not q, p and r.
    greedy: bool = False
    trace: Trace = field(default_factory=Trace)
    fragments: list[str] = field(default_factory=list)
    committed_ids: list[int] = field(default_factory=list)  # prompt + generated
    first_text: str = ""
    round_texts: dict[int, RoundTexts] = field(default_factory=dict)
    labels: dict[int, str] = field(default_factory=dict)  # token id → text alone (inspector charts)
    # A live run: seconds on screen from the run's first lane reading its prompt to this lane's end: its model work, the
    # other lane's turns and the page's drawing (None: a replay)
    shown_s: float | None = None

    def __post_init__(self):
        self.trace.lane = self.lane
        self.committed_ids = list(self.prompt_ids)

    def add(self, event: Event, decode: Decode) -> None:
        self.trace.add(event)
        if isinstance(event, PrefillEvent):
            first = token_piece(decode, self.committed_ids, event.next_id)
            self.first_text = first.text
            self.committed_ids.append(event.next_id)
            title = f"{byte_note(first)}\nthe target's first token (from the prompt's prefill)".lstrip("\n")
            self.fragments.append(token_span(first.text, "target", title, index=0))
        elif isinstance(event, RoundEvent):
            self.fragments.append(self.round_html(event, decode))
            self.committed_ids.extend(event.emitted_ids)

    def token_text(self, event: RoundEvent, shown: ShownToken, num_own_before: int, decode: Decode) -> Piece:
        """A drafted token reads after the drafts before it; a target token after what was kept."""
        if shown.draft_index is not None:
            context = self.committed_ids + [token.token_id for token in event.drafted[: shown.draft_index]]
        else:
            context = self.committed_ids + list(event.emitted_ids[: event.num_accepted + num_own_before])
        return token_piece(decode, context, shown.token_id)

    def round_texts_of(self, event: RoundEvent, decode: Decode) -> RoundTexts:
        """The text of every token of the round (and of its rival guesses), as each reads in place."""
        texts = RoundTexts([])
        for shown in event.shown_tokens():
            piece = self.token_text(event, shown, len(texts.own), decode)
            role, pieces = ("drafted", texts.drafted) if shown.draft_index is not None else ("own", texts.own)
            if byte_note(piece):  # a token holding part of a character: its hover says how the pieces join
                texts.byte_notes[(role, len(pieces))] = byte_note(piece)
            pieces.append(piece.text)
        texts.guesses = [token_piece(decode, self.committed_ids, token.token_id).text for token in event.guesses]
        if event.is_tree:  # a chain's and a rival round's tokens are read as the chain tells them, above
            texts.nodes = node_texts(event, self.committed_ids,
                                     lambda context, token_id: token_piece(decode, context, token_id).text)
        return texts

    def draft_spans(self, event: RoundEvent, index: int, kind: str, texts: RoundTexts) -> list[str]:
        """A drafted token as drawn. Where the target took a rival at the first position, the drafter's own
        first pick is drawn as the rejected first draft and the rival after it as taken; the guesses left
        over follow, small and struck through."""
        text = texts.drafted[index]
        kept_at = event.position + index if kind == "accepted" else None  # its place in the generated text
        if index == 0 and event.took_rival:
            spans = [token_span(texts.guesses[0], "rejected", first_pick_title(event, texts.guesses), keep_breaks=False),
                     token_span(text, kind, taken_rival_title(event, texts.guesses),
                                extra_class="tok-rival-taken", index=kept_at)]
        else:
            reason = draft_reason(event, index, self.greedy, text, target_pick_text(event, index, texts))
            title = drafted_title(index, event.gamma, event.drafted[index], draft_verdict_text(event, index), reason,
                                  self.greedy)
            spans = [token_span(text, kind, texts.titled("drafted", index, title), keep_breaks=kind not in STRUCK,
                                index=kept_at)]
        if index == 0 and event.guesses:
            spans.append(rivals_marker(event, texts.guesses))
        if index == event.gamma - 1:
            spans.append(stop_marker(event))
        return spans

    def round_html(self, event: RoundEvent, decode: Decode) -> str:
        texts = self.round_texts_of(event, decode)
        self.round_texts[event.round_index] = texts
        rejected = rejected_index(event)
        rejected_text = texts.drafted[rejected] if rejected is not None else None
        spans, num_own = [], 0
        for shown in event.shown_tokens():
            if shown.draft_index is not None:
                spans += self.draft_spans(event, shown.draft_index, shown.kind, texts)
            else:
                title = texts.titled("own", num_own, own_title(event, self.lane, self.greedy, rejected_text))
                spans.append(token_span(texts.own[num_own], shown.kind, title, keep_breaks=shown.kind not in STRUCK,
                                        index=event.position + event.num_accepted + num_own))
                num_own += 1
        spans.append(tree_mark(event))  # "" unless the round checked more than a chain
        if self.lane in PLAIN_LANES:
            return "".join(spans)
        self.remember_labels(event, decode)
        separator = '<span class="round-sep" style="border-left:1px dashed #bbb;margin:0 2px 0 1px"></span>'
        return f'<span class="round" data-round="{event.round_index + 1}">{"".join(spans)}</span>{separator}'

    def remember_labels(self, event: RoundEvent, decode: Decode) -> None:
        """Texts of the tokens the inspector's chart shows (the deciding position's top tokens), and the
        target's favourite after the last draft, which step mode names even after a rejection."""
        if not event.details or event.num_accepted >= len(event.details):
            return
        detail = event.details[event.num_accepted]
        drafted_ids = [token.token_id for token in event.drafted]
        # A byte of a character is named by the character it makes in its place (pieces.label_text), not "�".
        deciding = self.committed_ids + drafted_ids[: event.num_accepted]
        for token_id, _ in (*detail.draft_top, *detail.target_top, *detail.residual_top):
            if token_id not in self.labels:
                self.labels[token_id] = label_text(decode, deciding, token_id)
        after_drafts = event.details[event.gamma] if len(event.details) > event.gamma else None
        if after_drafts is not None and after_drafts.target_top:
            favourite_id = after_drafts.target_top[0][0]
            self.labels.setdefault(favourite_id, label_text(decode, self.committed_ids + drafted_ids, favourite_id))
        for index, token_id in enumerate(drafted_ids):
            self.labels.setdefault(token_id, label_text(decode, self.committed_ids + drafted_ids[:index], token_id))
        self.labels.setdefault(event.next_id, label_text(decode, self.committed_ids + list(event.emitted_ids[:-1]),
                                                         event.next_id))

    @property
    def text(self) -> str:
        """The generated text (no prompt), joined from the shown pieces that were kept."""
        pieces = [self.first_text] if self.trace.prefill else []
        for event in self.trace.rounds:
            texts = self.round_texts.get(event.round_index, RoundTexts([]))
            pieces += texts.drafted[: event.num_kept_drafts] + texts.own
        return "".join(pieces)

    def html(self, title: str, status: str = "", run_id: int = 0, max_height_px: int = LANE_TEXT_MAX_PX,
             parting: int | None = None) -> str:
        """The lane as drawn; `parting`: the index of the token where the greedy lanes parted, marked."""
        trace = self.trace
        done = "true" if trace.done else "false"
        measured = (f"{count(trace.num_tokens, 'token')} · {trace.wall_s:.2f} s · {trace.tokens_per_s:.1f} tokens/s"
                    if trace.prefill else "")
        figures = " · ".join(part for part in (measured, status) if part)
        tokens = "".join(self.fragments)
        prompt = f'<span class="prompt" style="color:#8a8a8a">{visible_text(self.prompt_text)}</span>'
        if self.chat:  # the template's markup stays hidden: the user's words, then the answer
            prompt = (
                f'<div class="prompt prompt-chat" style="color:#8a8a8a;margin-bottom:4px">'
                f'<span class="chat-role" style="font-weight:600">you:</span> {visible_text(self.prompt_text)}</div>'
                f'<span class="chat-role" style="color:#8a8a8a;font-weight:600">answer:</span> '
            )
        return (
            f'<div class="lane lane-{self.lane}" data-lane="{self.lane}" data-done="{done}" '
            f'data-tokens="{trace.num_tokens}" data-run="{run_id}">'
            f'<div class="lane-head" style="display:flex;justify-content:space-between;flex-wrap:wrap;font-weight:600;'
            f'margin:0 0 6px 2px;font-size:14px"><span>{escape_text(title)}</span>'
            f'<span class="lane-figures" style="font-weight:400;color:#555">{escape_text(figures)}</span></div>'
            f'<div class="lane-text" style="{LANE_STYLE}max-height:{max_height_px}px;overflow-y:auto">'
            f'{prompt}{tokens if parting is None else mark_parting(tokens, parting)}</div></div>'
        )


class RunView:
    """Everything the page shows about one run: its data (a `Run`) and a view per lane; kept in the session for the
    inspector, and the thing a saved run replays into."""

    def __init__(self, prompt_text: str, prompt_ids: list[int], gamma: int, settings: dict, run_id: int = 0,
                 chat: bool = False, lanes: Sequence[str] = DEFAULT_LANES):
        self.run = Run(prompt_text, list(prompt_ids), {"gamma": gamma, **settings}, chat)
        # the run's own fields, the same objects (the settings are one dict, whoever writes to it)
        self.prompt_text, self.prompt_ids, self.settings, self.chat = (
            self.run.prompt_text, self.run.prompt_ids, self.run.settings, self.run.chat)
        self.run_id = run_id  # tells the runs apart, for a page (or a test): ui_handlers.new_run_id
        self.lane_names = tuple(lanes)  # the lanes this run will have, in order
        self.views: dict[str, LaneView] = {}
        # Speedups of this page's runs of the same setup, this one's included (specviz.app.history): with
        # enough of them their own min–max is the verdict's band. Empty for the API, the CLI and replays.
        self.repeats: tuple[float, ...] = ()
        # The verdict of this page's last γ sweep of the same setup but γ (specviz.app.history): its recommended γ
        # is measured over several γ, so the stats quote it as the one recommendation. None for the API and the CLI.
        self.sweep: Payoff | None = None
        # A Stop, an error or the host's time cap ended the run while lanes were open: the engine's stream ends
        # there, so those lanes never get a FinishEvent; the page marks the run (cut_short) when it shows it stopped.
        self.cut_short = False

    @classmethod
    def replaying(cls, saved: Run, run_id: int = 0) -> "RunView":
        """An empty view of a saved run's prompt and settings, ready to be fed its events."""
        settings = dict(saved.settings)
        return cls(saved.prompt_text, saved.prompt_ids, settings.pop("gamma", 0), settings, run_id, saved.chat,
                   tuple(saved.lanes) or DEFAULT_LANES)

    @property
    def gamma(self) -> int:
        return self.settings.get("gamma", 0)

    def lane(self, name: str) -> LaneView:
        if name not in self.views:
            self.views[name] = LaneView(name, self.prompt_ids, self.prompt_text, self.chat,
                                        greedy=self.settings.get("temperature", 0) == 0, trace=self.run.trace(name))
        return self.views[name]

    @property
    def baseline(self) -> LaneView:
        return self.lane("baseline")

    @property
    def speculative(self) -> LaneView:
        return self.lane("speculative")

    def has_lane(self, name: str) -> bool:
        return name in self.lane_names

    def add(self, event: Event, decode: Decode) -> None:
        view = self.lane(event.lane)  # first: the view and the run then share the lane's trace
        self.run.lanes.setdefault(event.lane, view.trace)
        view.add(event, self.run.recording(decode))

    @property
    def done(self) -> bool:
        return all(self.lane(name).trace.done for name in self.lane_names)

    @property
    def was_stopped(self) -> bool:
        """A Stop ended some lane: the lanes were cut at different lengths and did unequal work."""
        return self.cut_short or any(self.lane(name).trace.done and self.lane(name).trace.finish.stop_reason == "stopped"
                   for name in self.lane_names)

    def greedy_parting(self) -> int | None:
        """Where a finished greedy run's speculative lane left the target alone's tokens (None: it did not)."""
        if self.settings.get("temperature", 0) != 0 or not (self.has_lane("speculative") and self.has_lane("baseline")):
            return None
        baseline, speculative = self.baseline.trace, self.speculative.trace
        if self.was_stopped:  # a Stop cuts the lanes at different lengths: they part only where both have tokens
            return first_divergence(speculative, baseline)
        if not (baseline.done and speculative.done):
            return None
        return first_parting(speculative.token_ids, baseline.token_ids)


def stop_text(trace: Trace, max_new_tokens: int | None = None) -> str | None:
    """Why a finished lane stopped, in words; None while it runs."""
    if trace.finish is None:
        return None
    reason = trace.finish.stop_reason
    if reason == "eos":
        # Say it ended early: the end-of-text token itself often draws as nothing (∅).
        limit = f" before the {max_new_tokens}-token limit" if max_new_tokens and trace.finish.num_new_tokens < max_new_tokens else ""
        return f"stopped at end of text{limit}"
    return {"context_length": "context full", "max_new_tokens": "done (token limit)", "stopped": "stopped"}.get(reason, "done")


def lane_status(trace: Trace, running: bool, max_new_tokens: int | None = None, stopped: bool = False) -> str:
    if trace.finish:
        return stop_text(trace, max_new_tokens)
    if stopped:
        return "stopped" if trace.prefill else "not run (stopped)"
    if running and not trace.prefill:  # a long prompt's prefill takes a while: say what the lane is doing
        return "reading the prompt…"
    return "generating…" if running else "waiting"


def lane_title(run: RunView, name: str) -> str:
    info = lane_info(name)
    drafter = run.settings.get("drafter")
    if info.names_drafter and drafter:
        try:
            chosen = drafter_info(drafter)
            return f"{info.title} · {(info.in_transformers and chosen.in_transformers) or chosen.label}"
        except ValueError:  # a saved run's drafter this version lacks: the lane's own title
            pass
    return info.title


# What each lane will show, said before the first run (the page's first view).
EMPTY_LANE_WORDS = {
    "baseline": "The target alone will write here, one token per forward pass: the plain way, to compare against.",
    "speculative": "Speculative decoding will write here, a few tokens per target pass. Each guess of the drafter "
                   "is coloured by what happened to it:",
    "reference": "transformers' own generate() will write here, on the same models, when you switch it on.",
}
# Each sample chip carries the legend's name for its kind (render.tokens.LEGEND_ITEMS): one name per kind; the
# words beside it are the rule's (render.rule.PLAIN_KEY).
EMPTY_SPECULATIVE_KEY = tuple(PLAIN_KEY.items())
CLICK_WORDS = "After a run, click a coloured token to see why it was kept or thrown away."


def empty_lane_html(name: str) -> str:
    """A lane before any run: its title and what will appear in it (the speculative lane's colours explained on
    sample tokens drawn as a run draws them), so the first view says what to watch."""
    if name == "speculative":
        names = {kind: name for kind, name, _ in LEGEND_ITEMS}
        samples = "".join(
            f"<li>{token_span(names[kind], kind, words, keep_breaks=False)} {escape_text(words)}</li>"
            for kind, words in EMPTY_SPECULATIVE_KEY)
        words = (f"{escape_text(EMPTY_LANE_WORDS[name])}<ul style='margin:4px 0 0 1.1em;padding:0'>{samples}</ul>"
                 f"{escape_text(CLICK_WORDS)}")
    else:
        words = escape_text(EMPTY_LANE_WORDS.get(name, f"{lane_info(name).title} will write here."))
    return (f'<div class="lane lane-{name} lane-empty" data-lane="{name}" data-done="false">'
            f'<div class="lane-head" style="font-weight:600;margin:0 0 6px 2px;font-size:14px">'
            f'{escape_text(lane_info(name).title)}</div>'
            f'<div class="lane-text" style="{LANE_STYLE}color:#666;font-family:inherit">{words}</div></div>')


def lanes_html(run: RunView | None, active: Sequence[str] = (), names: Sequence[str] | None = None) -> tuple[str, ...]:
    """Each named lane's HTML (default: the run's lanes); `active` names the lanes now generating. In a run cut
    short (RunView.cut_short) the lanes still open say they stopped instead of "generating…"."""
    if run is None:
        return tuple(empty_lane_html(name) for name in names or DEFAULT_LANES)
    limit = run.settings.get("max_new_tokens")
    parting = run.greedy_parting()  # marked in the two lanes it is about
    htmls = []
    for name in names or run.lane_names:
        if not run.has_lane(name):
            htmls.append(f'<div class="lane lane-{name}" data-lane="{name}" data-done="false" style="{LANE_STYLE}color:#999">'
                         f"{escape_text(lane_info(name).title)}: off for this run</div>")
            continue
        view = run.lane(name)
        status = lane_status(view.trace, name in active, limit, run.cut_short)
        htmls.append(view.html(lane_title(run, name), status, run.run_id,
                               parting=parting if name in ("baseline", "speculative") else None))
    return tuple(htmls)
