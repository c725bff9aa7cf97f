"""A summarizer that asks a chat model, then checks and repairs what it wrote.

The model never sees private text (it is withheld from the transcript), and
whatever it writes is still checked: private terms are redacted, missing
citations and protected items are asked for once more and then appended as a
"Preserved details" list. A bad answer (empty, refusal, garbage, over-long) is
retried; when the model keeps failing the summarizer falls back to the
extractive summary or to truncation, or raises so the manager keeps every
message. Everything that happened lands in ``Summary.report`` and the log.

The flow is written once as a generator that yields requests and receives
answers, so the sync and async entry points cannot drift apart.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Generator, Mapping, Sequence
from re import Pattern
from typing import Any

from ..errors import SummarizationError
from ..messages.model import Message
from .base import CheckReport, Summary, as_messages, covered
from .chat_models.base import ChatModel, ChatModelError, ChatRequest, ChatResponse
from .checks import (
    PLACEHOLDER,
    ExclusionPlan,
    Exclusions,
    compile_patterns,
    find_items,
    missing_items,
    preserved_details,
)
from .extractive import HEADER, WITHHELD, ExtractiveSummarizer

logger = logging.getLogger("fullrecall.summarizers")

DEFAULT_SYSTEM_PROMPT = """You are a conversation summarizer. Provide a concise summary of the conversation history.

Format requirements:
- You MUST create a structured and concise summary in bullet-point format.
- You MUST NOT respond conversationally or address the user directly.
- You MUST write in the third person ("The user asked...", "The assistant found...").

Task:
- Bullet points with the key topics and questions covered, and their answers.
- Bullet points for every significant tool executed and its result.
- Bullet points for code and technical information: keep function names, file paths, numbers, versions,
  product and model names, dates and ids exactly as written.
- Keep every citation reference such as [1] exactly as written, next to the fact it supports.
- A section of key insights and decisions.
- Text shown as [private] was withheld at the user's request: never guess, reconstruct or mention it.

Example format:

## Conversation Summary
* Topic 1: Key information
* Topic 2: Key information

## Tools Executed
* Tool X: Result Y

## Key Insights
* Insight"""

_REFUSAL = re.compile(
    r"^\W*(?:i'?m sorry|i am sorry|sorry,? (?:but )?i|i can(?:not|'t)|i am unable|i'?m unable|i won'?t|"
    r"as an ai\b|i'?m not able|i am not able|unfortunately,? i can)", re.IGNORECASE)
_WORDS = re.compile(r"[A-Za-z][A-Za-z'-]{2,}")
_COMMON = frozenset("the and for that this with from have has was were are you your they their them user "
                    "assistant summary conversation about into which what when where there been also".split())

FALLBACKS = ("extractive", "truncation", "raise")
_NOTE = re.compile(r"\* (?P<count>\d+) earlier messages(?: \(positions (?P<first>\d+)-(?P<last>\d+)\))? "
                   r"were moved to the archive without a summary")


class LLMSummarizer:
    """Summaries written by a chat model, checked for preservation and exclusion.

    Settings: ``enabled`` (False: plain truncation, no model
    call), ``max_summary_tokens`` (sent as max_tokens; answers over
    ``overlong_factor`` times it are rejected), ``summary_temperature``.
    ``system_prompt`` replaces :data:`DEFAULT_SYSTEM_PROMPT` (a Strands agent's own
    system prompt is used when none is given). ``retries``: extra attempts after a
    bad answer (transport errors are retried inside the client). ``fallback``:
    "extractive", "truncation" or "raise" (raise makes the manager keep every
    message). ``model`` may be a :class:`ChatModel`, or a Strands ``Model``/``Agent``.
    """

    name = "llm"

    def __init__(
        self,
        model: ChatModel | Any,
        *,
        system_prompt: str | None = None,
        enabled: bool = True,
        max_summary_tokens: int = 800,
        summary_temperature: float = 0.3,
        protected_patterns: Mapping[str, str | Pattern[str]] | Sequence[str | Pattern[str]] | None = None,
        exclusions: Exclusions | None = None,
        retries: int = 1,
        reprompt: bool = True,
        fallback: str = "extractive",
        overlong_factor: float = 1.5,
        token_counter: Any = None,
    ) -> None:
        if fallback not in FALLBACKS:
            raise ValueError(f"fallback must be one of {FALLBACKS}, got {fallback!r}")
        if not hasattr(model, "complete"):
            from .chat_models.strands import StrandsChatModel

            model = StrandsChatModel(model)
        self.model = model
        self.system_prompt = system_prompt or getattr(model, "system_prompt", None) or DEFAULT_SYSTEM_PROMPT
        self.enabled = enabled
        self.max_summary_tokens = max_summary_tokens
        self.summary_temperature = summary_temperature
        self.patterns = compile_patterns(protected_patterns)
        self.exclusions = exclusions or Exclusions()
        self.retries = retries
        self.reprompt = reprompt
        self.fallback = fallback
        self.overlong_factor = overlong_factor
        if token_counter is None:
            from ..tokens import default_token_counter

            token_counter = default_token_counter()
        self.counter = token_counter
        self.extractive = ExtractiveSummarizer(max_summary_tokens, protected_patterns=self.patterns,
                                               exclusions=self.exclusions, token_counter=token_counter)

    # -- entry points ----------------------------------------------------------------
    def summarize(self, messages: Sequence[Message], previous_summary: str | None = None) -> Summary:
        flow = self._flow(as_messages(messages), previous_summary)
        try:
            request = next(flow)
            while True:
                answer: ChatResponse | BaseException
                try:
                    answer = self.model.complete(request)
                except Exception as exc:  # any failure of the model is an answer the flow judges
                    answer = exc
                request = flow.send(answer)
        except StopIteration as done:
            return done.value

    async def asummarize(self, messages: Sequence[Message], previous_summary: str | None = None) -> Summary:
        flow = self._flow(as_messages(messages), previous_summary)
        try:
            request = next(flow)
            while True:
                answer: ChatResponse | BaseException
                try:
                    answer = await self.model.acomplete(request)
                except Exception as exc:
                    answer = exc
                request = flow.send(answer)
        except StopIteration as done:
            return done.value

    # -- the flow ----------------------------------------------------------------------
    def _flow(self, msgs: list[Message], previous_summary: str | None
              ) -> Generator[ChatRequest, ChatResponse | BaseException, Summary]:
        plan = self.exclusions.resolve(msgs, previous_summary)
        private = set(plan.private_indexes)
        transcript = self._transcript(msgs, private, plan)
        prev = plan.redact(previous_summary)[0] if previous_summary else None
        required = [i for i in find_items("\n".join(filter(None, [prev, transcript])), self.patterns)
                    if PLACEHOLDER not in i and not plan.leaks(i)]
        report = CheckReport(required=required, excluded=len(plan.terms),
                             excluded_messages=[_ident(msgs[i]) for i in sorted(private)])
        if not self.enabled:
            report.fallback = "truncation"
            return self._finish(self._truncation(msgs, prev), "truncation", msgs, plan, report)
        if not transcript.strip() and not prev:
            # nothing the model may see (every message private): no call needed
            return self._finish(self._truncation(msgs, prev), "truncation", msgs, plan, report)

        first = ChatRequest(system=self.system_prompt,
                            messages=({"role": "user", "content": self._prompt(transcript, prev, required, plan)},),
                            max_tokens=self.max_summary_tokens, temperature=self.summary_temperature)
        text: str | None = None
        for _ in range(1 + self.retries):
            report.attempts += 1
            answer = yield first
            problem = self._judge(answer, transcript, prev)
            if problem is None:
                assert isinstance(answer, ChatResponse)
                text = answer.text.strip()
                break
            self._failed(report, problem)
            if isinstance(answer, ChatModelError) and not _answer_problem(answer):
                break  # the client already retried its transport; more tries would only repeat that
            if isinstance(answer, BaseException) and not isinstance(answer, ChatModelError):
                break
        if text is None:
            return self._fall_back(msgs, prev, plan, report)

        text = self._redact(text, plan, report)
        missing = missing_items(text, required)
        report.missing = list(missing)
        if missing and self.reprompt:
            report.reprompted = True
            report.attempts += 1
            again = ChatRequest(
                system=self.system_prompt,
                messages=first.messages + (
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": "Your summary omitted these items, which must appear exactly as "
                                                "written: " + ", ".join(missing) + ". Rewrite the complete summary "
                                                "so that it includes every one of them."}),
                max_tokens=self.max_summary_tokens, temperature=self.summary_temperature)
            answer = yield again
            problem = self._judge(answer, transcript, prev)
            if problem is None:
                assert isinstance(answer, ChatResponse)
                candidate = self._redact(answer.text.strip(), plan, report)
                if len(missing_items(candidate, required)) <= len(missing):
                    text = candidate
            else:
                self._failed(report, f"re-ask: {problem}")
        return self._finish(text, "llm", msgs, plan, report)

    # -- pieces --------------------------------------------------------------------------
    def _transcript(self, msgs: list[Message], private: set[int], plan: ExclusionPlan) -> str:
        lines = []
        for index, msg in enumerate(msgs):
            if index in private:
                continue
            text = plan.redact(msg.text)[0].strip()
            if text:
                where = msg.position if msg.position is not None else index
                lines.append(f"[message {where}] {msg.role.upper()}: {text}")
        return "\n\n".join(lines)

    def _prompt(self, transcript: str, prev: str | None, required: list[str], plan: ExclusionPlan) -> str:
        parts = ["Summarize the conversation below."]
        if prev:
            parts.append("The new summary replaces this earlier summary, so carry its content forward:\n"
                         f"<earlier_summary>\n{prev}\n</earlier_summary>")
        parts.append(f"<conversation>\n{transcript}\n</conversation>")
        if required:
            parts.append("IMPORTANT: keep these items exactly as written: " + ", ".join(required))
        if plan.private_indexes or plan.terms or plan.patterns:
            parts.append(f"Some text was withheld at the user's request and is shown as {PLACEHOLDER}: "
                         "do not guess, reconstruct or mention it.")
        parts.append(f"Write at most {self.max_summary_tokens} tokens.")
        return "\n\n".join(parts)

    def _judge(self, answer: ChatResponse | BaseException, transcript: str, prev: str | None) -> str | None:
        """None when the answer is usable, else why not (this goes to the log and the report)."""
        if isinstance(answer, BaseException):
            cause = answer.__cause__
            detail = f" (cause: {type(cause).__name__}: {cause})" if cause is not None else ""
            return f"{type(answer).__name__}: {answer}{detail}"
        if not isinstance(answer, ChatResponse):  # a chat model of one's own answering a string, None...
            return f"malformed: the model returned {type(answer).__name__}, not a ChatResponse"
        if not isinstance(answer.text, str):
            return f"malformed: the model's ChatResponse holds {type(answer.text).__name__}, not text"
        text = (answer.text or "").strip()
        if answer.finish_reason in ("refusal", "content_filter"):
            return f"refused ({answer.finish_reason}): {text[:120]!r}"
        if not text:
            return "empty answer"
        if _REFUSAL.match(text):
            return f"refusal: {text[:120]!r}"
        if answer.finish_reason == "length":
            return f"over-long: cut off at max_tokens={self.max_summary_tokens}"
        tokens = self.counter.count(text)
        if tokens > self.max_summary_tokens * self.overlong_factor:
            return f"over-long: {tokens} tokens, limit {self.max_summary_tokens}"
        words = _WORDS.findall(text)
        visible = sum(not c.isspace() for c in text)
        letters = sum(c.isalpha() for c in text)
        if len(words) < 3 or letters < 0.5 * visible:
            return f"garbage: {text[:120]!r}"
        source = {w.casefold() for w in _WORDS.findall(f"{prev or ''}\n{transcript}")} - _COMMON
        mine = [w.casefold() for w in words if w.casefold() not in _COMMON]
        if len(source) >= 5 and len(mine) >= 8 and sum(w in source for w in mine) < 0.2 * len(mine):
            return f"garbage: unrelated to the conversation: {text[:120]!r}"
        return None

    def _failed(self, report: CheckReport, problem: str) -> None:
        report.errors.append(problem)
        logger.warning("summarizer %s: attempt %d failed: %s", getattr(self.model, "name", "model"),
                       report.attempts, problem)

    def _redact(self, text: str, plan: ExclusionPlan, report: CheckReport) -> str:
        leaks = plan.leaks(text)
        if not leaks:
            return text
        report.leaked += len(leaks)
        report.redacted = True
        logger.warning("summarizer %s leaked %d private item(s); redacted", getattr(self.model, "name", "model"),
                       len(leaks))
        return plan.redact(text)[0]

    def _fall_back(self, msgs: list[Message], prev: str | None, plan: ExclusionPlan, report: CheckReport) -> Summary:
        causes = "; ".join(report.errors)
        if self.fallback == "raise":
            raise SummarizationError(f"summarization failed after {report.attempts} attempt(s), "
                                     f"no message removed: {causes}")
        logger.warning("summarizer %s failed (%s); falling back to %s", getattr(self.model, "name", "model"),
                       causes, self.fallback)
        report.fallback = self.fallback
        if self.fallback == "extractive":
            fallback = self.extractive.summarize_with_plan(msgs, prev, plan, budget=self.max_summary_tokens)
            return self._finish(fallback.text, "extractive", msgs, plan, report)
        return self._finish(self._truncation(msgs, prev), "truncation", msgs, plan, report)

    def _truncation(self, msgs: list[Message], prev: str | None) -> str:
        """A note that the messages went to the archive, folding the note of an earlier truncation in.

        The note comes first, the earlier summary's other lines after it: a budget cut drops old prose, not it.
        """
        positions, _ = covered(msgs)
        count, span = len(msgs), (positions[0], positions[-1]) if positions else None
        rest = []
        for line in (prev or "").splitlines():
            earlier = _NOTE.match(line.strip())
            if earlier:  # fold: one note counting every message moved without a summary
                count += int(earlier["count"])
                if earlier["first"] is not None:
                    old = (int(earlier["first"]), int(earlier["last"]))
                    span = (min(old[0], span[0]), max(old[1], span[1])) if span else old
            elif line.strip() and line.strip() != HEADER:
                rest.append(line)
        where = f" (positions {span[0]}-{span[1]})" if span else ""
        note = (f"* {count} earlier messages{where} were moved to the archive without a summary; "
                "search the archive to recall them verbatim.")
        return "\n".join([HEADER, note, *rest])

    def _finish(self, text: str, method: str, msgs: list[Message], plan: ExclusionPlan,
                report: CheckReport) -> Summary:
        """The last word, whatever produced ``text``: private text out, required items in, within budget.

        When the required items do not fit beside the body, lines of the body go
        (from the end) before any required item does; a window manager that cuts
        an over-long summary would otherwise cut the "Preserved details" first.
        """
        body = self._redact(text, plan, report).rstrip()
        note = WITHHELD if (plan.private_indexes or plan.terms) and WITHHELD not in body else ""
        first_missing = missing_items(body, report.required)
        if method != "llm" and not report.missing:
            report.missing = list(first_missing)
        lines = body.split("\n")
        while True:
            body = "\n".join(lines).rstrip()
            still = missing_items(f"{body}\n{note}", report.required)
            text = "\n".join(p for p in (body, note) if p)
            if still:
                text = f"{text}\n\n{preserved_details(still)}"
            tokens = self.counter.count(text)
            if tokens <= self.max_summary_tokens or len(lines) <= 1:
                break
            lines.pop()
        report.appended = list(still)
        text = self._redact(text, plan, report)  # an appended item is never private; checked anyway
        report.over_budget = tokens > self.max_summary_tokens
        positions, ids = covered(msgs)
        return Summary(text=text, positions=positions, message_ids=ids, token_count=self.counter.count(text),
                       method=method, report=report)


def _answer_problem(error: ChatModelError) -> bool:
    """A malformed body is a bad answer worth asking again for; other client errors were retried already."""
    return "malformed" in str(error) or "non-text" in str(error)


def _ident(msg: Message) -> int | str:
    return msg.position if msg.position is not None else (msg.id or -1)


def summarizer_from_prompt(system_prompt: str, **kwargs: Any) -> LLMSummarizer:
    """An :class:`LLMSummarizer` with this system prompt and the chat model the environment configures.

    Raises :class:`~fullrecall.summarizers.chat_models.ChatModelError` (a
    ``SummarizationError``) naming the variables to set when none is configured.
    """
    from .chat_models.env import chat_model_from_env

    return LLMSummarizer(chat_model_from_env(), system_prompt=system_prompt, **kwargs)
