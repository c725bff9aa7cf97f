"""Facts with validity intervals: what is true about a user now, and what was true before.

A :class:`Fact` is a statement ("My city is Lyon") with, when known, its subject ("user"),
attribute ("city") and value ("Lyon"), and three times: when it was stated (``stated_at``),
when it became valid (``valid_from``) and when it stopped being valid (``valid_to``, None
while it holds). It links to the archived messages it came from (``sources``).

:class:`FactMemory` keeps them in any store:

* a fact is current while it is valid (``valid_from`` <= now < ``valid_to``): a fact dated in the
  future (``valid_from``) is current once its time comes, and until then the one it supersedes is;
* a newer fact about the same subject and attribute **supersedes** the older one from its
  ``valid_from`` on: the old one gets ``valid_to`` and ``superseded_by`` and stays (``history()``
  and ``current(at=...)`` see it; ``current()`` once its ``valid_to`` has passed does not);
* a fact that repeats one valid at its ``valid_from`` (same normalized text; for facts without an
  attribute, also a cosine similarity of at least ``duplicate_similarity``; for attribute facts,
  the same value) is **merged** into it: its sources are added and ``mentions`` counts up (a repeat
  from a message the fact already names is the same statement: no new mention, even when two
  threads or processes learn that message at once). Both
  must agree on their exact values (numbers, codes, names: :mod:`._values`), so that "The door
  code is 4417" is never merged into "The door code is 9921";
* without an LLM, facts come from :meth:`FactMemory.remember` and from the rules of
  :func:`extract_facts` (user messages only); with a ``chat_model``, from an extraction prompt
  whose every answer is checked against the source message (its value must be found there
  word for word, its exact values as written; its sentence must state that value, and hold no
  exact value the message does not) before it is stored.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from ..errors import FactExtractionError, MemoryInputError, StateConflict
from ..stores import _validate as V
from ..stores.base import DEFAULT_TENANT, Record, Store
from ._fact_index import USER, FactIndex, normalize, repeatable
from ._records import UPDATE_ATTEMPTS, Entry, check_unicode, open_book, public_data
from ._values import agree, within

NAMESPACE = "facts"
log = logging.getLogger("fullrecall.memory.facts")
DEFAULT_DUPLICATE_SIMILARITY = 0.92
FOLDED = "folded"  # a fact's data: the ids of the duplicates folded into it (the newest MAX_FOLDED)
MAX_FOLDED = 100
FOLDING = "folding_into"  # a duplicate's data while it is folded away: the fact it is folded into


@dataclass
class Fact:
    """One fact and its validity interval (Unix seconds). ``sources``: ``{"session_id", "id"}`` of messages."""

    id: str
    text: str
    subject: str = USER
    attribute: str | None = None
    value: str | None = None
    stated_at: float = field(default_factory=time.time)
    valid_from: float = field(default_factory=time.time)
    valid_to: float | None = None
    superseded_by: str | None = None
    sources: list[dict[str, str]] = field(default_factory=list)
    origin: str = "explicit"  # "explicit", "rule" or "llm"
    mentions: int = 1

    @property
    def is_current(self) -> bool:
        """Whether the fact holds at this moment (by the system clock; :meth:`FactMemory.current` asks the
        memory's own clock): valid from ``valid_from`` on, until ``valid_to`` if it has one.
        """
        return self.valid_at(time.time())

    def valid_at(self, when: float) -> bool:
        return self.valid_from <= when and (self.valid_to is None or when < self.valid_to)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- rules: facts without an LLM ----------------------------------------------------------------

# a sentence ends at . ! or ? followed by a space, or at a line's end: not at a dot inside a word (72.5,
# ann@example.com, v1.2), which cut a fact's value short
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")
# a clause of its own within a sentence: after a semicolon, or an "and" / "but" that the speaker's "I" or "my"
# follows ("my locker code is 4711 and I live in Lyon"), which would otherwise end up in the first one's value
_CLAUSE = re.compile(r"\s*;\s*|,?\s+(?:and|but)\s+(?=(?:i|my)\b)", re.IGNORECASE)
_END = r"\s*[.!?]*\s*$"
_RULES: list[tuple[re.Pattern[str], str | None]] = [
    (re.compile(r"^my (?P<attr>[a-z][\w' -]{0,40}?) (?:is|are) (?P<value>.+?)" + _END, re.IGNORECASE), None),
    (re.compile(r"^i live in (?P<value>.+?)" + _END, re.IGNORECASE), "lives in"),
    (re.compile(r"^i work (?:at|for) (?P<value>.+?)" + _END, re.IGNORECASE), "works at"),
    (re.compile(r"^i(?: am|'m) (?P<value>\d{1,3}) years old" + _END, re.IGNORECASE), "age"),
    (re.compile(r"^i (?:really )?(?:like|love|prefer|enjoy) (?P<value>.+?)" + _END, re.IGNORECASE), ""),
]
# "my city is not Paris", "... is no longer ...", "... isn't ...": a statement of what is not so, no value
_NEGATED_VALUE = re.compile(r"^(?:(?:still|also|really|actually|definitely|certainly|surely|\w+ly) )?"
                            r"(?:not|never|no longer|no more)\b", re.IGNORECASE)  # "... is sadly not Paris"
# "I love it", "I like that": a pronoun names nothing the memory could keep
_PRONOUN_VALUE = re.compile(r"^(?:it|this|that|these|those|them|him|her|you|it all|them all)$",
                            re.IGNORECASE)
_NEGATED_ATTR = re.compile(r"\b(?:not|never|no longer)\b|n't\b", re.IGNORECASE)
_REMEMBER = re.compile(r"^(?:please )?remember(?: that)?,? (?P<inner>.+)$", re.IGNORECASE)


def extract_facts(text: str) -> list[tuple[str | None, str | None, str]]:
    """Facts a user's message states, by simple rules: ``(attribute, value, sentence)`` per fact.

    Per sentence (ended by . ! or ? before a space, or by a line's end) and per clause of it (after a
    semicolon, or an "and" / "but" followed by "I" or "my"), in order: "my <attribute> is/are <value>" (attribute facts: a new value
    supersedes the old one); "I live in <value>" ("lives in"); "I work at/for <value>"
    ("works at"); "I am <n> years old" ("age"); "I like/love/prefer/enjoy <value>" (no
    attribute: several can hold at once). A negated "my <attribute> is/are" ("is not", "isn't",
    "is never", "is no longer", "is sadly not") states no value: no fact; nor does a value that is only a
    pronoun ("I love it"), nor a question (a sentence ending in "?").
    Runs of spaces count as one. "Remember (that) ..." applies the rules to
    the rest, and is kept as a fact of its own when none matches.
    """
    found: list[tuple[str | None, str | None, str]] = []
    for sentence in _SENTENCE_END.split(text):
        sentence = " ".join(sentence.split())  # "My  city is Lyon" is "My city is Lyon"
        if not sentence or sentence.endswith("?"):  # a question states nothing: "My locker code is what?"
            continue
        remember = _REMEMBER.match(sentence)
        inner = remember.group("inner").strip() if remember else sentence
        facts = [fact for clause in _CLAUSE.split(inner) if clause and (fact := _match_rule(clause)) is not None]
        if facts:
            found += facts
        elif remember:
            found.append((None, None, inner))
    return found


def _match_rule(sentence: str) -> tuple[str | None, str | None, str] | None:
    sentence = " ".join(sentence.split())  # runs of spaces count as one
    for pattern, attribute in _RULES:
        m = pattern.match(sentence)
        if m:
            if attribute is None and (_NEGATED_VALUE.match(m.group("value")) or _NEGATED_ATTR.search(m.group("attr"))):
                return None  # what the attribute is not: the sentence gives no value
            if _PRONOUN_VALUE.match(m.group("value").strip()):
                return None
            attr = (m.group("attr").strip().lower() if attribute is None else attribute) or None
            return attr, m.group("value").strip(), sentence
    return None


# -- LLM extraction ---------------------------------------------------------------------------

EXTRACTION_PROMPT = """You extract durable facts about the user from a conversation.
Each message is numbered [i]. Answer ONLY with a JSON array; each element is an object:
{"source": i, "subject": "user", "attribute": "a short attribute name or null", "value": "...", "text": "..."}
"source" is the number of the message that states the fact. "value" must be copied verbatim from that message.
"text" is the fact as one short sentence. Give attribute only for single-valued attributes (city, employer, name);
use null for things several of which can hold (likes, hobbies). Answer [] if there is no durable fact."""


def _parse_extraction(answer: str, finish_reason: str = "stop") -> tuple[list[dict[str, Any]], str | None]:
    """The objects of the JSON array an extraction answer holds (other elements are passed over), and what was
    wrong with it (None when nothing was). Of an array that cannot be read whole (cut short where the model hit
    its max_tokens, or malformed), each object complete before the first element that cannot be read is kept.
    """
    start, end = answer.find("["), answer.rfind("]")
    if start < 0:
        return [], f"its answer holds no JSON array of facts: {answer[:200]!r}"
    if end > start:
        try:
            items = json.loads(answer[start:end + 1])
        except (json.JSONDecodeError, RecursionError):  # (nested too deep)
            pass
        else:
            return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else [], None
    items = _complete_elements(answer, start + 1)
    facts = [i for i in items if isinstance(i, dict)]
    if finish_reason == "length":
        return facts, f"its answer was cut short (finish_reason 'length') after {len(facts)} facts"
    return facts, f"its answer holds no JSON array of facts: element {len(items)} cannot be read, in {answer[:200]!r}"


def _complete_elements(text: str, at: int) -> list[Any]:
    """The JSON values of an array's elements read from ``at`` (just past its ``[``), up to the first one that
    cannot be read (or the array's end).
    """
    decoder, items = json.JSONDecoder(), list[Any]()
    while True:
        while at < len(text) and (text[at].isspace() or text[at] == ","):
            at += 1
        if at == len(text) or text[at] == "]":
            return items
        try:
            item, at = decoder.raw_decode(text, at)
        except (json.JSONDecodeError, RecursionError):
            return items
        items.append(item)


class Candidate(NamedTuple):
    """A fact found in messages (by rules or a checked LLM answer), not yet stored."""

    text: str
    attribute: str | None
    value: str
    sources: list[dict[str, str]]
    origin: str


class FactMemory:
    """One owner's facts (user and agent) in any store; see the module docstring.

    ``clock`` (Unix seconds) is for tests; ``chat_model`` (any
    :class:`~fullrecall.summarizers.chat_models.base.ChatModel`) enables LLM extraction in :meth:`learn`.
    """

    def __init__(
        self,
        store: Store | str = "sqlite:///:memory:",
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        tenant: str = DEFAULT_TENANT,
        embedder: Any = None,
        chat_model: Any = None,
        duplicate_similarity: float = DEFAULT_DUPLICATE_SIMILARITY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store: Store
        self.store, self._owns_store, self.book = open_book(store, NAMESPACE, tenant=tenant, user_id=user_id,
                                                            agent_id=agent_id, embedder=embedder, clock=clock)
        self.chat_model = chat_model
        self.duplicate_similarity = duplicate_similarity
        self.clock = clock
        self._index: FactIndex | None = None  # the facts a write looks up, following the book's cache
        self.book.follow(self._follow)

    # -- writing -----------------------------------------------------------------------------
    def remember(
        self,
        text: str,
        *,
        subject: str | None = None,
        attribute: str | None = None,
        value: str | None = None,
        valid_from: float | None = None,
        stated_at: float | None = None,
        sources: Iterable[dict[str, str]] = (),
        origin: str = "explicit",
        vector: np.ndarray | None = None,
    ) -> Fact:
        """Store a fact (or merge it into the current one it repeats); return the stored fact.

        Without ``attribute``, the rules of :func:`extract_facts` may find one in ``text``
        ("My city is Lyon" -> city = Lyon). ``valid_from`` defaults to ``stated_at`` (now).
        ``vector`` is ``text``'s embedding when the caller has it (else it is embedded here, once).
        """
        return self._record(self._build(text, subject, attribute, value, valid_from, stated_at, sources, origin), vector)

    def check(self, text: str, where: str) -> None:
        """``MemoryInputError`` (``where`` before its words) if :meth:`remember` would refuse ``text``; nothing is
        read or written.
        """
        try:
            self._build(text, None, None, None, None, None, (), "explicit")
        except MemoryInputError as exc:
            raise MemoryInputError(f"{where}: {exc}") from None

    def _build(
        self, text: str, subject: str | None, attribute: str | None, value: str | None, valid_from: float | None,
        stated_at: float | None, sources: Iterable[dict[str, str]], origin: str,
    ) -> Fact:
        """The fact :meth:`remember` is asked to keep, checked (nothing is read or written)."""
        if not isinstance(text, str) or not text.strip():
            raise MemoryInputError(f"fact: 'text' must be a non-empty string, not {text!r}")
        check_unicode(text, "fact: 'text'")
        for name, v in (("subject", subject), ("attribute", attribute), ("value", value)):
            if v is not None and not isinstance(v, str):
                raise MemoryInputError(f"fact {text!r}: {name!r} must be a string, not {v!r}")
            if v is not None:
                check_unicode(v, f"fact {text!r}: {name!r}")
        for name, when in (("valid_from", valid_from), ("stated_at", stated_at)):
            if when is not None and not V.is_time(when):
                raise MemoryInputError(f"fact {text!r}: {name!r} must be Unix seconds of the years 1 to 9999, not {when!r}")
        if not isinstance(origin, str):
            raise MemoryInputError(f"fact {text!r}: 'origin' must be a string, not {origin!r}")
        sources = [_check_source(text, s) for s in sources]
        text = text.strip()
        if attribute is None and value is None:
            rule = _match_rule(text)
            if rule is not None:
                attribute, value, _ = rule
        now = self.clock()
        stated = now if stated_at is None else float(stated_at)
        fact = Fact(
            id=uuid.uuid4().hex, text=text, subject=(subject or USER).strip().lower(),
            attribute=attribute.strip().lower() if attribute else None, value=value.strip() if value else None,
            stated_at=stated, valid_from=stated if valid_from is None else float(valid_from),
            sources=sources, origin=origin,
        )
        return fact

    def _record(self, fact: Fact, vector: np.ndarray | None, *, checked: bool = False) -> Fact:
        """Store a built fact (``checked``: the caller has just checked the cached facts are current)."""
        with self.book.writes():  # the fact and the old ones it closes: logged in one append, before settling
            stored, new = self._store(fact, vector, checked)
        if new and fact.valid_to is None:
            if fact.attribute:
                self._settle(fact.subject, fact.attribute)
            else:
                self._settle_loose(fact)
        return stored

    def _store(self, fact: Fact, vector: np.ndarray | None, checked: bool) -> tuple[Fact, bool]:
        """Write ``fact``, or merge it into the fact valid at its ``valid_from`` that it repeats; (the stored fact,
        whether it is new). A fact valid only later is no repeat: what holds from now is told apart from what
        will hold from next month.

        A merge is written only if nobody wrote the repeated fact meanwhile (any process): else the facts
        are read again and the fact placed again, so that two writers repeating one fact at once count two
        mentions, and a repeat never reopens a fact another writer has just closed.
        """
        embedded: list[np.ndarray] = [] if vector is None else [vector]

        def fact_vector() -> np.ndarray:
            if not embedded:
                embedded.append(self.book.embed([fact.text])[0])
            return embedded[0]

        # an attribute fact without a value is compared by its words: "I moved to Rome" is no repeat of "... Paris"
        when, value, undated = fact.valid_from, fact.value or fact.text, fact.valid_from == fact.stated_at
        for attempt in range(UPDATE_ATTEMPTS):
            index = self._facts(check=not checked or attempt > 0)  # cached: one small round trip when nothing changed
            # the same words are a repeat only of a fact of the same attribute (or, said without one, of any):
            # "My city is Lyon" (city) repeats neither a hometown fact in those words nor one kept without attribute
            same = next((r for r in index.repeated(fact.subject, normalize(fact.text), fact.attribute, normalize(value),
                                                   when, undated=undated)
                         if (agree(fact.text, r.text) and (not fact.attribute
                                                           or r.data.get("attribute") == fact.attribute))
                         or (fact.attribute and r.data.get("attribute") == fact.attribute
                             and agree(value, r.data.get("value") or r.text))), None)
            if same is None and not fact.attribute:  # no attribute to compare: a close enough meaning, the same values
                loose, matrix = index.loose(fact.subject)
                ranked = self.book.similar(fact_vector(), loose, len(loose), matrix=matrix) if matrix is not None else []
                for record, score in ranked:
                    if score < self.duplicate_similarity:
                        break
                    if repeatable(record, when, undated=undated) and agree(fact.text, record.text):
                        same = record
                        break
            if same is None:
                break
            found = _from_record(same)
            if fact.sources and all(s in found.sources for s in fact.sources):
                return found, False  # the same statement kept again (a retried turn): one statement, one mention
            found.mentions += 1
            found.sources += [s for s in fact.sources if s not in found.sources]
            try:
                self._put(found, base=same, expected=same.version)
            except StateConflict:
                time.sleep(0.001 * random.random())  # let the other writer finish before reading again
                continue
            return found, False
        else:
            raise StateConflict(f"fact {fact.text!r} kept changing under {UPDATE_ATTEMPTS} attempts to store it",
                                current=-1)
        rivals = [_from_record(r) for r in index.holding(fact.subject, fact.attribute)] if fact.attribute else []
        later = [f for f in rivals if f.valid_from > fact.valid_from]
        if later:  # told late about an older value: it held until the next known one
            nxt = min(later, key=lambda f: f.valid_from)
            fact.valid_to, fact.superseded_by = nxt.valid_from, nxt.id
        self._put(fact, vector=fact_vector())  # durable before any old fact is closed
        for old in rivals:
            self._close(old.id, fact.valid_from, fact.id, lambda f: f.valid_at(fact.valid_from))
        return fact, True

    def _close(self, fact_id: str, until: float, by: str, applies: Callable[[Fact], bool]) -> None:
        """Close one fact at ``until``, superseded by the fact ``by``, if it still ``applies`` as held now: read again
        and decided again when another writer changed it meanwhile (nothing it wrote is lost).
        """
        def closed(record: Record | None) -> tuple[Record, None] | None:
            fact = _from_record(record) if record is not None else None
            if fact is None or not applies(fact):
                return None
            fact.valid_to, fact.superseded_by = until, by
            return self._as_record(fact, base=record), None

        self.book.update(fact_id, closed, check=False)  # the cache was just checked, or holds this writer's writes

    def warm(self) -> None:
        """Read the facts and build their index, with the facts valid now, ahead of the first search."""
        self._facts().valid(self.clock())

    def _facts(self, *, check: bool = True) -> FactIndex:
        """The index of the live facts (the book's cache checked first unless not ``check``)."""
        live = self.book.state(check=check)
        index = self._index
        if index is None or index.basis is not live:
            index = self._index = FactIndex.of(live)
        return index

    def _follow(self, old: Mapping[str, Entry], new: Mapping[str, Entry], record_id: str,
                replaced: Entry | None, entry: Entry | None) -> None:
        """The book changed its cache: the index follows (or is made again from the next state read)."""
        index = self._index
        try:
            self._index = index.applied(new, record_id, replaced, entry) if index is not None and index.basis is old \
                else None
        except Exception:  # noqa: BLE001 - never fail the write the book has applied: made again when next needed
            log.warning("the facts index could not follow a change of record %s; it is built again", record_id,
                        exc_info=True)
            self._index = None

    def _settle(self, subject: str, attribute: str) -> None:
        """Leave one open fact (``valid_to`` None) per subject and attribute, even after concurrent writers.

        Each writer re-reads after its own write, so the later of two racing writers sees
        both facts and closes the one that starts earlier, at the other's ``valid_from`` (ties: stated
        earlier, then by id): it stays current until then. Of several, each is closed where the next one
        that stays starts, so that no two overlap (closing them all where the last starts left several
        current at once). One with the last's value is the same fact, stated by two writers at once: it is
        folded into it (see :meth:`_fold`).
        """
        held = [_from_record(r) for r in self._facts().holding(subject, attribute)]
        open_ = sorted((f for f in held if f.valid_to is None), key=_chronological)
        if len(open_) < 2:
            return
        winner = open_[-1]
        value = winner.value or winner.text
        folded = {f.id for f in open_[:-1] if normalize(f.value or f.text) == normalize(value)
                  and agree(f.value or f.text, value)}
        for fact_id in folded:
            self._fold(fact_id, winner.id)
        # each closed where the next starts: writers that saw fewer of the racing facts closed one where a later
        # one starts, over another's time (a fold leaves its fact valid at no time: out of the chain)
        chain = sorted((f for f in held if f.id not in folded and (f.valid_to is None or f.valid_to > f.valid_from)),
                       key=_chronological)
        for f, following in zip(chain, chain[1:]):
            if f.valid_to is None or f.valid_to > following.valid_from:
                self._close(f.id, following.valid_from, following.id, _valid_past(following.valid_from))

    def _settle_loose(self, fact: Fact) -> None:
        """Leave one open fact without an attribute per subject and words, even after concurrent writers.

        Writers stating one such fact at once, none having seen the others', each wrote their own. Each re-reads
        after its write: the open facts without an attribute that its fact repeats by its words (normalized, the
        same exact values: what :meth:`_store` merges) are folded into the one that started first (ties: stated
        first, then by id), which every writer names alike and which no later write folds away.
        """
        undated = fact.valid_from == fact.stated_at
        same = [_from_record(r) for r in self._facts().repeated(fact.subject, normalize(fact.text), None, "",
                                                                 fact.valid_from, undated=undated)
                if not r.data.get("attribute") and r.data.get("valid_to") is None and agree(fact.text, r.text)]
        if len(same) < 2:
            return
        first = min(same, key=lambda f: (f.valid_from, f.stated_at, f.id))
        for f in same:
            if f.id != first.id and agree(f.text, first.text):
                self._fold(f.id, first.id)

    def _fold(self, fact_id: str, into: str) -> None:
        """Fold a duplicate fact into the fact ``into`` (its mentions and sources, but the mentions of sources
        ``into`` names already: the same messages learned twice at once), then delete it.

        It is first closed where it starts (valid at no time, so no repeat merges into it any more), marked as
        being folded into ``into``, by a compare-and-set that only one of several writers folding it at once
        wins: only that one adds its mentions, so none is counted twice.

        Another writer may be folding ``into`` itself away meanwhile (into a third fact): found so (marked, or
        deleted and named in the ``folded`` ids of another fact), the mentions go to the fact it was folded
        into, never onto a fact about to be deleted.
        """
        taken: list[Fact] = []  # the duplicate as the winning compare-and-set closed it

        def closed(record: Record | None) -> tuple[Record, None] | None:
            fact = _from_record(record) if record is not None else None
            if fact is None or fact.valid_to is not None:  # folded or closed by another writer meanwhile
                return None
            fact.valid_to, fact.superseded_by = fact.valid_from, into
            taken[:] = [fact]
            marked = self._as_record(fact, base=record)
            marked.data[FOLDING] = into
            return marked, None

        if self.book.update(fact_id, closed, check=False) is None:
            return
        duplicate = taken[0]
        moved: list[str] = []  # where the target was folded, when it was

        def grown(record: Record | None) -> tuple[Record, None] | None:
            moved.clear()
            if record is None or record.data.get(FOLDING):  # folded away by another writer, or being so
                moved.extend([record.data[FOLDING]] if record is not None else self._folded_into(target))
                return None
            fact = _from_record(record)
            # a statement the fact holds already (the same message, learned twice at once) is no new mention
            fact.mentions += max(0, duplicate.mentions - sum(s in fact.sources for s in duplicate.sources))
            fact.sources += [s for s in duplicate.sources if s not in fact.sources]
            grown = self._as_record(fact, base=record)  # which facts it holds, so an import does not bring one back
            grown.data[FOLDED] = [*(grown.data.get(FOLDED) or []), duplicate.id][-MAX_FOLDED:]
            return grown, None

        target, seen = into, {fact_id}
        while target not in seen:  # (a cycle of folds is none to follow)
            seen.add(target)
            if self.book.update(target, grown, check=False) is not None or not moved:
                break
            target = moved[0]
        self.book.delete(fact_id)

    def _folded_into(self, fact_id: str) -> list[str]:
        """The live fact whose ``folded`` ids name ``fact_id`` (read from the store), or none."""
        return [r.id for r, _ in self.book.entries() if fact_id in (r.data.get(FOLDED) or ())][:1]

    def learn(
        self, messages: Sequence[dict[str, Any]], sources: Sequence[dict[str, str]] | None = None,
        *, stated_at: float | None = None, known: Mapping[str, np.ndarray] | None = None,
    ) -> list[Fact]:
        """Facts from conversation messages (app-shaped dicts), each linked to its message in ``sources``.

        With a ``chat_model``: the extraction prompt, each answer checked against its source
        message; otherwise the rules of :func:`extract_facts` on user messages. The facts found are
        embedded in one batch, but those in words ``known`` holds the vector of (a message's words, embedded
        already). Returns the facts stored. An extraction that fails (the chat model does,
        or its answer is no JSON array of facts, or is cut short) raises
        :class:`~fullrecall.errors.FactExtractionError` once the facts complete before a cut are stored
        (its ``facts``).
        """
        found, problem = self._found(self._said(messages, sources), sources)
        facts = self.keep(found, self._vectors([c.text for c in found], known or {}) if found else None,
                          stated_at=stated_at)
        if problem is not None:
            raise FactExtractionError(problem, facts=facts)
        return facts

    def keep(
        self, found: Sequence[Candidate], vectors: np.ndarray | None, *, stated_at: float | None = None,
        checked: bool = False,
    ) -> list[Fact]:
        """Store facts found by :meth:`candidates`, with their vectors (one row each, in order).

        ``checked``: the caller has just called ``book.entries()`` (e.g. while embedding), so the cached
        facts are trusted without another round trip.
        """
        return [
            self._record(self._build(c.text, None, c.attribute, c.value, None, stated_at, c.sources, c.origin),
                         None if vectors is None else vectors[i], checked=checked)
            for i, c in enumerate(found)
        ]

    def candidates(
        self, messages: Sequence[dict[str, Any]], sources: Sequence[dict[str, str]] | None = None,
    ) -> list[Candidate]:
        """The facts :meth:`learn` would store from these messages, found but not stored (nor embedded); an
        extraction that fails raises :class:`~fullrecall.errors.FactExtractionError`, whose ``facts`` are those
        found before an answer was cut short (not stored: :meth:`keep` stores them, as :meth:`learn` does).
        """
        return self.candidates_in(self._said(messages, sources), sources)

    def candidates_in(self, said: Sequence[tuple[str, str]], sources: Sequence[dict[str, str]] | None = None,
                      ) -> list[Candidate]:
        """:meth:`candidates` of messages already parsed: ``(role, text)`` each."""
        found, problem = self._found(said, sources)
        if problem is not None:
            raise FactExtractionError(problem, facts=found)
        return found

    @staticmethod
    def _said(messages: Sequence[dict[str, Any]], sources: Sequence[dict[str, str]] | None) -> list[tuple[str, str]]:
        """Each message's (role, text), parsed in its own shape (a turn may mix them); one malformed is named."""
        from ..errors import MessageFormatError
        from ..messages.formats import detect_shape, parse_message

        if sources is not None and len(sources) != len(messages):
            raise MemoryInputError(f"{len(sources)} sources for {len(messages)} messages")
        said = []
        for i, m in enumerate(messages):
            try:
                parsed = parse_message(m, detect_shape([m]))
            except MessageFormatError as exc:
                raise MessageFormatError(f"message {i}: {str(exc).removeprefix('message 0: ')}") from None
            said.append((parsed.role, parsed.text))
        return said

    def _found(self, said: Sequence[tuple[str, str]], sources: Sequence[dict[str, str]] | None,
               ) -> tuple[list[Candidate], str | None]:
        """The facts found in these messages ((role, text) each), and why the extraction failed (None when it did
        not): the facts found before an answer was cut short are found all the same.
        """
        if sources is not None and len(sources) != len(said):
            raise MemoryInputError(f"{len(sources)} sources for {len(said)} messages")
        refs = list(sources) if sources is not None else [None] * len(said)
        problem = None
        if self.chat_model is not None:
            found, problem = self._llm_facts(list(said))
            origin = "llm"
        else:
            found = [(i, attr, value, text) for i, (role, words) in enumerate(said) if role == "user"
                     for attr, value, text in extract_facts(words)]
            origin = "rule"
        return [Candidate(text, attr or None, value or text, [ref] if (ref := refs[i]) else [], origin)
                for i, attr, value, text in found], problem

    def _llm_facts(self, transcript: list[tuple[str, str]]) -> tuple[list[tuple[int, str | None, str | None, str]],
                                                                     str | None]:
        """The checked facts of the chat model's answer, and why the extraction failed (None when it did not)."""
        from ..summarizers.chat_models.base import ChatRequest, valid_text

        numbered = "\n".join(f"[{i}] {role}: {text}" for i, (role, text) in enumerate(transcript))
        name = getattr(self.chat_model, "name", type(self.chat_model).__name__)
        try:
            answer = self.chat_model.complete(ChatRequest(
                system=EXTRACTION_PROMPT, messages=({"role": "user", "content": numbered},), temperature=0.0))
            text, finish = answer.text, answer.finish_reason
            if not isinstance(text, str):
                raise TypeError(f"its answer's text is {type(text).__name__}, not str")
        except Exception as exc:  # noqa: BLE001 - any chat model of one's own: its failure is the extraction's
            return [], f"the chat model {name} failed: {type(exc).__name__}: {exc}"
        items, problem = _parse_extraction(text, str(finish))
        checked: list[tuple[int, str | None, str | None, str]] = []
        listed: dict[tuple[int, str | None, str, str], list[str]] = {}  # the facts taken, by their words
        for item in items:
            source, value, text, attr = item.get("source"), item.get("value"), item.get("text"), item.get("attribute")
            if not (type(source) is int and 0 <= source < len(transcript) and isinstance(value, str)
                    and value.strip() and isinstance(text, str) and text.strip()):
                continue  # (a bool is no message number)
            said = transcript[source][1]
            if f" {normalize(value)} " not in f" {normalize(said)} " or not within(value, said):
                continue  # not said there word for word (its values too: "441" is not in "4417"): dropped
            if f" {normalize(value)} " not in f" {normalize(text)} " or not within(text.split(maxsplit=1)[-1],
                                                                                     f"{said} {value}"):
                continue  # the sentence must state its value, and only values said there (its first word aside)
            attr = valid_text(attr.strip().lower()) if isinstance(attr, str) and attr.strip() else None  # (JSON's "\ud800")
            taken = listed.setdefault((source, attr, normalize(value), normalize(text)), [])
            if any(agree(text, t) for t in taken):
                continue  # listed twice: one statement, one mention
            taken.append(text)
            checked.append((source, attr, value, text))
        return checked, None if problem is None else f"{name}: {problem}"

    def restore(self, facts: Sequence[Fact]) -> int:
        """Write facts exactly as given (ids, intervals, sources kept: an import), logged as one change; how
        many of them the owner did not hold as given (new, or held in another version).

        A fact the owner holds as its memory settled it after an earlier import (closed since by a newer value,
        grown by a repeat folded into it, or folded into the owner's own fact of the same value) is held already:
        not written again, not counted, so importing one file again writes nothing.

        Only a fact the owner does not hold with the same text is embedded (in one batch): a repeated
        import embeds nothing again. Then one fact per subject and attribute is left current, as after any
        write: of an imported current fact and the owner's, the later valid one holds (an old backup
        restored, or another memory merged in, does not bring back a value the owner has since replaced).
        """
        entries = self.book.entries()
        held = {r.id: (r.text, v) for r, v in entries}
        before = {r.id: _from_record(r) for r, _ in entries}
        folded = {i for r, _ in entries for i in r.data.get(FOLDED) or ()}
        facts = [f for f in facts if not _settled_from(before.get(f.id), f) and f.id not in (folded - before.keys())]
        new = len({f.id for f in facts})
        known = {f.id: held[f.id][1] for f in facts if f.id in held and held[f.id][0] == f.text}
        todo = [f for f in facts if known.get(f.id) is None]
        vectors = dict(zip([f.id for f in todo], self.book.embed([f.text for f in todo]))) if todo else {}
        with self.book.writes():
            for fact in facts:
                self._put(fact, vector=vectors.get(fact.id, known.get(fact.id)))
        for subject, attribute in dict.fromkeys((f.subject, f.attribute) for f in facts
                                                if f.attribute and f.valid_to is None):
            self._settle(subject, attribute)
        return new

    def forget(self, fact_id: str) -> bool:
        """Delete one fact (for good); True if it existed."""
        return self.book.delete(fact_id)

    # -- reading -----------------------------------------------------------------------------
    def get(self, fact_id: str) -> Fact | None:
        return next((_from_record(r) for r, _ in self.book.entries() if r.id == fact_id), None)

    def current(
        self, subject: str | None = None, attribute: str | None = None, *, at: float | None = None
    ) -> list[Fact]:
        """Facts that hold now (or at time ``at``), oldest first: a fact dated in the future is not yet current."""
        if at is not None and not V.is_time(at):
            raise MemoryInputError(f"current: 'at' must be Unix seconds of the years 1 to 9999, not {at!r}")
        when = self.clock() if at is None else float(at)
        return [f for f in self._select(subject, attribute) if f.valid_at(when)]

    def history(self, subject: str | None = None, attribute: str | None = None) -> list[Fact]:
        """Every fact, superseded ones included, by ``valid_from``."""
        return sorted(self._select(subject, attribute), key=lambda f: (f.valid_from, f.stated_at))

    def search(
        self, query: str | np.ndarray, limit: int = 5, *, include_history: bool = False, checked: bool = False,
    ) -> list[tuple[Fact, float]]:
        """The facts most similar to ``query`` (a text, or its vector), current ones only (valid now) unless
        ``include_history``, with cosines. ``checked``: as in :meth:`keep`.
        """
        if include_history:
            found = self.book.nearest(query, limit, keep=_any, check=not checked)
        else:
            valid, matrix = self._facts(check=not checked).valid(self.clock())
            found = self.book.similar(query, valid, limit, matrix=matrix) if matrix is not None else []
        return [(_from_record(r), s) for r, s in found]

    # -- internals ---------------------------------------------------------------------------
    def _vectors(self, texts: list[str], known: Mapping[str, np.ndarray]) -> np.ndarray:
        """The vectors of ``texts``, in order: those ``known`` holds, the others embedded in one batch."""
        todo = list(dict.fromkeys(t for t in texts if t not in known))
        made = dict(zip(todo, self.book.embed(todo))) if todo else {}
        return np.stack([known[t] if t in known else made[t] for t in texts])

    def _all(self) -> list[Fact]:
        return [_from_record(r) for r, _ in self.book.entries()]

    def _select(self, subject: str | None, attribute: str | None) -> list[Fact]:
        subject, attribute = (subject or "").lower() or None, (attribute or "").lower() or None
        return [
            f for f in self._all()
            if (subject is None or f.subject == subject) and (attribute is None or f.attribute == attribute)
        ]

    def _put(self, fact: Fact, *, vector: Any = None, base: Record | None = None, expected: int | None = None) -> None:
        """Write a fact; ``base`` is its stored record when rewriting it (its vector is kept); ``expected``: only
        if the store holds it at that version (see :meth:`RecordBook.put`).
        """
        self.book.put(self._as_record(fact, base=base), vector, expected=expected)

    def _as_record(self, fact: Fact, *, base: Record | None = None) -> Record:
        """The record of a fact (written now); ``base``: its stored record, whose other data it keeps."""
        data = fact.to_dict()
        record_id, text = data.pop("id"), data.pop("text")
        if base is not None:
            data = {**base.data, **data}
        return Record(id=record_id, namespace=NAMESPACE, text=text, data=data,
                      created_at=fact.stated_at, updated_at=self.clock())

    def close(self) -> None:
        """Close the store if this memory opened it (a store passed in is the caller's to close)."""
        if self._owns_store:
            self.store.close()


def _chronological(fact: Fact) -> tuple[float, float, str]:
    """A fact's place among those of one attribute: by start, then by when it was stated, then by id."""
    return fact.valid_from, fact.stated_at, fact.id


def _valid_past(at: float) -> Callable[[Fact], bool]:
    """Whether a fact is still valid after ``at`` (open, or closed later)."""
    return lambda fact: fact.valid_to is None or fact.valid_to > at


def _any(record: Record) -> bool:
    return True


def _settled_from(held: Fact | None, given: Fact) -> bool:
    """Whether ``held`` is ``given`` as the memory left it once written: the same, or since closed by a newer
    value (``given`` open), or grown by the mentions and sources of repeats folded into it.
    """
    if held is None:
        return False
    if given.valid_to is None and held.valid_to is not None:
        held = replace(held, valid_to=None, superseded_by=given.superseded_by)
    if held.mentions >= given.mentions and all(s in held.sources for s in given.sources):
        held = replace(held, mentions=given.mentions, sources=given.sources)
    return held == given


def _from_record(record: Record) -> Fact:
    data = public_data(record)
    known = {k: data[k] for k in Fact.__dataclass_fields__ if k in data}
    if "sources" in known:  # a copy: the record may be the store's cached one
        known["sources"] = [dict(s) for s in known["sources"]]
    return Fact(id=record.id, text=record.text, **known)


def _check_source(text: str, source: Any) -> dict[str, str]:
    if not isinstance(source, dict) or not isinstance(source.get("id"), str):
        raise MemoryInputError(f"fact {text!r}: each source must be a dict with a message 'id', not {source!r}")
    return {k: str(v) for k, v in source.items() if v is not None}
