"""The offline summarizer: picks the sentences that carry the facts, no model needed.

Every sentence is scored by the facts it carries (numbers, dates, named
things, code identifiers, citations, protected items, questions, decisions);
sentences are picked greedily by new facts per token until the budget is
spent, then facts no picked sentence carries are listed compactly under "Key
details". The result keeps the "## Conversation Summary" / topic-bullet layout
and never exceeds its token budget. Same input, same output.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from re import Pattern
from typing import Any

from ..messages.model import Message, TextBlock, ToolResultBlock, ToolUseBlock, json_text
from .base import CheckReport, Summary, as_messages, covered
from .checks import CITATION, ExclusionPlan, Exclusions, compile_patterns, find_items, missing_items

HEADER = "## Conversation Summary"
TOOLS_HEADER = "## Tools Executed"
WITHHELD = "* Some details were withheld at the user's request (kept verbatim in the archive)."

_SPLIT = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])|\n+")
_FILLER = re.compile(
    r"^(?:(?:hey|hi|hello|wow|whoa|oh|ah|aw+|yeah|yes|yep|haha|lol|thanks|thank you|great|cool|awesome|nice|"
    r"sure|okay|ok|so|well|omg|hmm|totally|definitely|absolutely|congrats|wow+)\b[^.!?,]{0,20}[,!.]+\s*)+",
    re.IGNORECASE)
_TOPIC_LINE = re.compile(r"^Topic \d+: [a-z ,'-]{0,60}(?: \(earlier summary\))?$")
_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*")
_CAPS = re.compile(r"\b[A-Z][\w'’&-]*(?:[ \t]+(?:of|the|de|van|von)?[ \t]*[A-Z][\w'’&-]*)*")
_DIGITS = re.compile(r"(?<![\w])[$€£]?\d[\d,.:/-]*(?:\s?(?:%|am|pm|k|K|M))?")
_TIME_WORDS = re.compile(
    r"\b(?:(?:last|next|this|past|coming)\s+(?:week(?:end)?|month|year|night|summer|winter|spring|fall|autumn|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday)|yesterday|today|tomorrow|tonight|"
    r"(?:a|one|two|three|four|five|few|couple of)\s+(?:days?|weeks?|months?|years?)\s+ago|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|april|june|july|"
    r"august|september|october|november|december)\b",
    re.IGNORECASE)
_NUMBER_WORDS = re.compile(
    r"\b(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|fifty|hundred|"
    r"thousand|million|dozen|first|second|third|fourth|fifth|tenth)\b", re.IGNORECASE)
_DECISION = re.compile(r"\b(?:decid\w*|agreed|chose|plan(?:s|ned|ning)?|going to|will|must|need to|should|"
                       r"conclu\w*|because|result\w*|fix\w*|caus\w*)\b", re.IGNORECASE)
_COMMON = frozenset("""
i i'm i've i'd i'll im a an the it its it's this that these those what when where who why how which
hey hi hello wow whoa oh ah yeah yes yep no nope haha lol thanks thank great cool awesome nice sure okay ok
so well and but or if then my your our their his her we you he she they me us them be is are was were
do did does have has had can could would should will just also really very too any some all not
let let's that's there there's here here's what's how's i'd sounds glad good love omg hmm totally
definitely absolutely congrats congratulations wishing maybe sorry please same yay aww amazing
""".split())
_STOP = _COMMON | frozenset("""
about after again against am because been before being below between both by down during each few for
from further into more most other own same such than through to under until up while with of on in at
as out over off once only nor don't can't won't didn't doesn't isn't aren't wasn't weren't got get gets
going really lot lots thing things stuff kind much many something anything everything one ones time
feel feeling felt think know see make made way want like been being going doing pretty super bit
""".split())


@dataclass
class _Unit:
    index: int  # order in the conversation
    message: int  # message index (-1: previous summary)
    speaker: str | None
    text: str
    items: dict[str, float] = field(default_factory=dict)  # normalized fact -> weight
    surface: dict[str, str] = field(default_factory=dict)  # normalized fact -> text as written
    bonus: float = 0.0
    words: frozenset[str] = frozenset()  # content words: topics count too, weakly
    tool: bool = False
    cost: int = 0
    listed: bool = False  # only its facts count, under "Key details": it has no sentence to show as prose


class ExtractiveSummarizer:
    """Offline, deterministic summarizer; the default of ``SummarizingConversationManager``.

    ``max_summary_tokens`` caps the summary; ``target_ratio`` shrinks it further
    for short spans (summary <= ratio * input tokens, never below
    ``min_summary_tokens``), so summarizing 300 tokens does not return 800.
    ``protected_patterns`` (default: :data:`~fullrecall.summarizers.checks.DEFAULT_PROTECTED`)
    mark items that weigh most; ``exclusions`` say what must never appear.
    """

    name = "extractive"
    word_weight = 0.25  # a new content word is worth an eighth of a named fact: topics, not just names

    def __init__(
        self,
        max_summary_tokens: int = 800,
        *,
        target_ratio: float | None = 0.25,
        min_summary_tokens: int = 128,
        protected_patterns: Mapping[str, str | Pattern[str]] | Sequence[str | Pattern[str]] | None = None,
        exclusions: Exclusions | None = None,
        token_counter: Any = None,
    ) -> None:
        if max_summary_tokens < 1:
            raise ValueError("max_summary_tokens must be at least 1")
        self.max_summary_tokens = max_summary_tokens
        self.target_ratio = target_ratio
        self.min_summary_tokens = min_summary_tokens
        self.patterns = compile_patterns(protected_patterns)
        self.exclusions = exclusions or Exclusions()
        if token_counter is None:
            from ..tokens import default_token_counter

            token_counter = default_token_counter()
        self.counter = token_counter

    # -- public ------------------------------------------------------------------
    def summarize(self, messages: Sequence[Message], previous_summary: str | None = None) -> Summary:
        msgs = as_messages(messages)
        plan = self.exclusions.resolve(msgs, previous_summary)
        return self.summarize_with_plan(msgs, previous_summary, plan)

    async def asummarize(self, messages: Sequence[Message], previous_summary: str | None = None) -> Summary:
        """:meth:`summarize` in a worker thread: thousands of messages take a second, the event loop runs on."""
        return await asyncio.to_thread(self.summarize, messages, previous_summary)

    def budget_for(self, messages: Sequence[Message], previous_summary: str | None = None) -> int:
        """Token budget for this span: the cap, shrunk by ``target_ratio`` for short spans."""
        if self.target_ratio is None:
            return self.max_summary_tokens
        tokens_in = sum(self.counter.count_message(m) for m in messages)
        if previous_summary:
            tokens_in += self.counter.count(previous_summary)
        target = max(self.min_summary_tokens, math.floor(self.target_ratio * tokens_in))
        return max(1, min(self.max_summary_tokens, target))

    def summarize_with_plan(self, msgs: list[Message], previous_summary: str | None,
                            plan: ExclusionPlan, budget: int | None = None) -> Summary:
        """Summarize with exclusions already resolved (the LLM summarizer's fallback uses this)."""
        budget = self.budget_for(msgs, previous_summary) if budget is None else budget
        units = self._units(msgs, previous_summary, plan)
        required = self._required(msgs, previous_summary, plan)
        text = self._compose(units, budget, withheld=bool(plan.private_indexes or plan.terms))
        text = self._fit(text, budget)
        leftover = plan.leaks(text)
        if leftover:  # cannot happen by construction; the check runs anyway
            text, _ = plan.redact(text)
        report = CheckReport(required=required, missing=missing_items(text, required), excluded=len(plan.terms),
                             excluded_messages=[_ident(msgs[i]) for i in plan.private_indexes],
                             leaked=len(leftover), redacted=bool(leftover), attempts=1)
        positions, ids = covered(msgs)
        return Summary(text=text, positions=positions, message_ids=ids, token_count=self.counter.count(text),
                       method="extractive", report=report)

    # -- units -------------------------------------------------------------------
    def _required(self, msgs: list[Message], previous_summary: str | None, plan: ExclusionPlan) -> list[str]:
        texts = [m.text for i, m in enumerate(msgs) if i not in set(plan.private_indexes)]
        if previous_summary:
            texts.insert(0, previous_summary)
        items = find_items("\n".join(texts), self.patterns)
        return [i for i in items if not plan.leaks(i)]

    def _units(self, msgs: list[Message], previous_summary: str | None, plan: ExclusionPlan) -> list[_Unit]:
        units: list[_Unit] = []
        private = set(plan.private_indexes)
        if previous_summary:
            for line in previous_summary.splitlines():
                line = line.strip().lstrip("*-• ").strip()
                if not line or line.startswith("#") or line == WITHHELD.lstrip("* ") or _TOPIC_LINE.match(line):
                    continue  # headings and topic labels are layout, not facts
                units.append(_Unit(len(units), -1, None, line))
            units += _uncarried_citations(units, -1, previous_summary)
        results = _tool_results(msgs)
        for mi, msg in enumerate(msgs):
            if mi in private:
                continue
            speaker = _speaker(msg)
            for block in msg.content:
                if isinstance(block, ToolUseBlock):
                    args = json_text(block.input)
                    result = results.get(block.id, "")
                    line = f"{block.name}({_clip(args, 120)})" + (f" → {_clip(result, 200)}" if result else "")
                    units.append(_Unit(len(units), mi, None, line, tool=True, bonus=2.0))
                elif isinstance(block, TextBlock):
                    question_next = mi + 1 < len(msgs) and msgs[mi + 1].role != msg.role
                    for sentence in _sentences(block.text):
                        bonus = 0.0
                        if sentence.endswith("?") and question_next:
                            bonus += 0.5
                        if _DECISION.search(sentence):
                            bonus += 0.5
                        units.append(_Unit(len(units), mi, speaker, sentence, bonus=bonus))
            units += _uncarried_citations(units, mi, msg.text)
        names = _names(units)
        kept = []
        for unit in units:
            if plan.leaks(unit.text):
                unit.text = plan.redact(unit.text)[0]  # the rest of the sentence may still matter
            self._score(unit, names)
            line = self._line(unit)
            unit.cost = self.counter.count(line) + 1
            kept.append(unit)
        return kept

    def _score(self, unit: _Unit, names: set[str]) -> None:
        text = unit.text

        def add(surface: str, weight: float) -> None:
            key = " ".join(surface.split()).casefold().strip(".,;:!?'\"")
            if len(key) == 1 and key.isalpha():
                return  # the "O" of O(1), a stray initial: no fact
            if key and key not in _STOP and weight > unit.items.get(key, 0.0):
                unit.items[key] = weight
                unit.surface.setdefault(key, surface.strip().strip(".,;:!?'\""))

        for item in find_items(text, self.patterns):
            add(item, 6.0 if CITATION.fullmatch(item) else 3.0)
        for m in _DIGITS.finditer(text):
            add(m.group(0).rstrip(".,:/-"), 2.0)
        for m in _TIME_WORDS.finditer(text):
            add(m.group(0), 2.0)
        for m in _NUMBER_WORDS.finditer(text):
            add(m.group(0), 1.0)
        for m in _CAPS.finditer(text):
            words = m.group(0).split()
            if _starts_sentence(text, m.start()) and words[0].strip("'’") not in names:
                words = words[1:]  # a capital that only starts a sentence is no evidence of a name
            while words and words[0].casefold().strip("'’") in _COMMON:
                words = words[1:]
            if words:
                add(" ".join(words).rstrip("-'’"), 2.0)
        content = [w for w in _WORD.findall(text) if w.casefold() not in _STOP and len(w) > 3 and w not in names]
        if len(content) < 2 and not any(w >= 3.0 for w in unit.items.values()):
            unit.items.clear()  # "That's great, Mel!", "How have you been?": nothing to summarize
            unit.bonus = 0.0
            return
        unit.words = frozenset(w.casefold() for w in content)
        if not unit.items and unit.text.endswith("?"):
            unit.bonus = 0.0  # a question naming nothing is worth less than its answer

    def _line(self, unit: _Unit) -> str:
        if unit.tool or unit.speaker is None:
            return f"  - {unit.text}"
        return f"  - {unit.speaker}: {unit.text}"

    # -- selection and layout -------------------------------------------------------
    def _compose(self, units: list[_Unit], budget: int, withheld: bool) -> str:
        fixed = self.counter.count(HEADER) + 2 + (self.counter.count(WITHHELD) + 1 if withheld else 0)
        room = budget - fixed
        chosen: list[_Unit] = []
        covered_items: set[str] = set()
        covered_words: set[str] = set()
        remaining = list(units)
        topic_cost = 14  # a topic line, paid for every four sentences
        # citations are never traded for prose: room to list every uncovered one stays reserved
        cite_cost = {k: self.counter.count(u.surface[k]) + 1 for u in units for k in u.items if CITATION.fullmatch(k)}
        details_line = self.counter.count("* Key details: ") + 1  # the line the reserved citations are listed on
        while remaining and room > 0:
            best, best_score = None, 0.0
            uncovered = [c for k, c in cite_cost.items() if k not in covered_items]
            reserve = sum(uncovered) + (details_line if uncovered else 0)
            extra = topic_cost if len(chosen) % 4 == 0 else 0  # what the next line costs besides itself
            for unit in remaining:
                if unit.listed:
                    continue
                gain = (sum(w for k, w in unit.items.items() if k not in covered_items) + unit.bonus
                        + self.word_weight * len(unit.words - covered_words))
                freed = sum(c for k, c in cite_cost.items() if k in unit.items and k not in covered_items)
                if freed and freed == sum(uncovered):
                    freed += details_line  # the last citations listed: no details line needed for them
                if gain <= 0 or unit.cost + extra > room - reserve + freed:
                    continue
                score = gain / (unit.cost + 8)  # each line has a fixed cost: prefer full sentences to fragments
                if score > best_score:
                    best, best_score = unit, score
            if best is None:
                break
            remaining.remove(best)
            if best.cost + extra > room:
                continue
            chosen.append(best)
            covered_items.update(best.items)
            covered_words.update(best.words)
            room -= best.cost + extra
        chosen.sort(key=lambda u: u.index)
        first = _first_indexes(units)
        details = self._details(units, covered_items)
        while True:
            text = self._render(chosen, details, units, withheld, first)
            over = self.counter.count(text) - budget
            if over <= 0:
                break
            if details:  # drop as many details as the overflow needs, not one per render
                freed = 0
                while details and freed < over:
                    freed += self.counter.count(f"; {details.pop()[1]}")
            elif chosen:
                chosen.remove(min(chosen, key=lambda u: (sum(u.items.values()) + u.bonus, -u.index)))
            else:
                break
        # fill what the budget still allows with more key details: each costs its own
        # tokens plus a separator, so no re-rendering per candidate (that was quadratic)
        now = {k for u in chosen for k in u.items} | {k for k, _ in details}
        used = self.counter.count(self._render(chosen, details, units, withheld, first))
        for item in self._details(units, now):
            cost = self.counter.count(f"; {item[1]}") + (0 if details else self.counter.count("* Key details: ") + 1)
            if used + cost <= budget:
                details.append(item)
                used += cost
        text = self._render(chosen, details, units, withheld, first)
        while details and self.counter.count(text) > budget:  # a tokenizer that is not additive
            details.pop()
            text = self._render(chosen, details, units, withheld, first)
        return text

    def _details(self, units: list[_Unit], covered_items: set[str]) -> list[tuple[str, str]]:
        weights: dict[str, float] = {}
        surface: dict[str, str] = {}
        first: dict[str, int] = {}
        for unit in units:
            for key, weight in unit.items.items():
                if key in covered_items:
                    continue
                weights[key] = max(weights.get(key, 0.0), weight)
                surface.setdefault(key, unit.surface[key])
                first.setdefault(key, unit.index)
        # citations first: the budget drops details from the end, and citations are never traded for others
        order = sorted(weights, key=lambda k: (not CITATION.fullmatch(k), -weights[k], first[k]))
        return [(k, surface[k]) for k in order]

    def _render(self, chosen: list[_Unit], details: list[tuple[str, str]], units: list[_Unit],
                withheld: bool, first: dict[str, int]) -> str:
        lines = [HEADER]
        talk = [u for u in chosen if not u.tool]
        tools = [u for u in chosen if u.tool]
        for number, group in enumerate(_topics(talk), start=1):
            label = _label(group, units)
            where = " (earlier summary)" if all(u.message < 0 for u in group) else ""
            lines.append(f"* Topic {number}: {label}{where}")
            lines.extend(self._line(u) for u in group)
        if details:
            shown = sorted(details, key=lambda d: first.get(d[0], 0))
            lines.append("* Key details: " + "; ".join(s for _, s in shown))
        if withheld:
            lines.append(WITHHELD)
        if tools:
            lines.append(TOOLS_HEADER)
            lines.extend(f"* {u.text}" for u in tools)
        return "\n".join(lines)

    def _fit(self, text: str, budget: int) -> str:
        """Hard cap: drop whole lines, then words, until the text fits."""
        lines = text.split("\n")
        while len(lines) > 1 and self.counter.count("\n".join(lines)) > budget:
            lines.pop()
        text = "\n".join(lines)
        words = text.split(" ")
        while words and self.counter.count(" ".join(words)) > budget:
            words.pop()
        return " ".join(words)


def _uncarried_citations(units: list[_Unit], message: int, text: str) -> list[_Unit]:
    """A listed-only unit with the citations of ``text`` (message ``message``, -1: the previous summary)
    that none of its units carries; none if they all are carried.

    Citations are never traded for prose: room is reserved for listing the citations the units carry.
    A citation in no sentence (a message that is ``[1].`` alone, one after a greeting the filler rule
    drops, one past a tool result's clip) would not be counted, so it gets a unit of its own, listed
    under "Key details" like any fact no chosen sentence carries.
    """
    carried = {c for u in units if u.message == message for c in CITATION.findall(u.text)}
    missing = [c for c in dict.fromkeys(CITATION.findall(text)) if c not in carried]
    return [_Unit(len(units), message, None, " ".join(missing), listed=True)] if missing else []


def _starts_sentence(text: str, start: int) -> bool:
    return re.search(r"(?:^|[.!?…]\s+|[\"“(]\s*)$", text[:start]) is not None


def _names(units: list[_Unit]) -> set[str]:
    """Capitalized words seen inside a sentence somewhere in the span: names, not sentence starts."""
    names: set[str] = set()
    for unit in units:
        for m in re.finditer(r"\b[A-Z][\w'’&-]*", unit.text):
            if not _starts_sentence(unit.text, m.start()) and m.group(0).casefold() not in _COMMON:
                names.add(m.group(0).strip("'’"))
        if unit.speaker:
            names.add(unit.speaker)
    return names


def _sentences(text: str) -> list[str]:
    out = []
    for part in _SPLIT.split(text):
        part = _FILLER.sub("", part.strip()).strip()
        if len(part) > 1 and _WORD.search(part):
            out.append(part[0].upper() + part[1:] if part[0].islower() else part)
    return out


def _speaker(msg: Message) -> str:
    meta = msg.metadata or {}
    name = meta.get("speaker") or meta.get("name")
    return str(name) if name else msg.role.capitalize()


def _tool_results(msgs: list[Message]) -> dict[str, str]:
    out: dict[str, str] = {}
    for msg in msgs:
        for block in msg.content:
            if isinstance(block, ToolResultBlock):
                text = " ".join(b.text for b in block.content if isinstance(b, TextBlock))
                out[block.tool_use_id] = ("error: " if block.status == "error" else "") + " ".join(text.split())
    return out


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _topics(units: list[_Unit]) -> list[list[_Unit]]:
    """Consecutive groups of about four sentences, cut where the vocabulary shifts most."""
    if not units:
        return []
    n_groups = max(1, round(len(units) / 4))
    if n_groups == 1:
        return [units]
    bags = [Counter(w.casefold() for w in _WORD.findall(u.text) if w.casefold() not in _STOP) for u in units]
    gaps = []
    for i in range(1, len(units)):
        left = sum(bags[max(0, i - 2):i], Counter())
        right = sum(bags[i:i + 2], Counter())
        overlap = sum((left & right).values()) / max(1, min(sum(left.values()), sum(right.values())))
        gaps.append((overlap, units[i].message - units[i - 1].message, i))
    gaps.sort(key=lambda g: (g[0], -g[1], g[2]))
    cuts = sorted(g[2] for g in gaps[: n_groups - 1])
    groups, start = [], 0
    for cut in cuts:
        groups.append(units[start:cut])
        start = cut
    groups.append(units[start:])
    return [g for g in groups if g]


def _label(group: list[_Unit], units: list[_Unit]) -> str:
    words = Counter(w.casefold() for u in group for w in _WORD.findall(u.text)
                    if len(w) > 3 and w.casefold() not in _STOP and not w[0].isupper())
    top = [w for w, _ in sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))[:2]]
    return ", ".join(top) if top else "conversation"


def _first_indexes(units: list[_Unit]) -> dict[str, int]:
    """Where each key detail first appears, so details are listed in conversation order."""
    first: dict[str, int] = {}
    for unit in units:
        for key in unit.items:
            first.setdefault(key, unit.index)
    return first


def _ident(msg: Message) -> int | str:
    return msg.position if msg.position is not None else (msg.id or -1)

