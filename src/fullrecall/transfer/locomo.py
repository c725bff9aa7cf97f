"""LoCoMo-format conversation files: a JSON list of samples (or one sample).

Each sample (``sample_id``; ``conversation`` with ``speaker_a``, ``speaker_b``, and for each
session N ``session_N_date_time`` and ``session_N``, a list of turns ``{"speaker", "dia_id",
"text"}``, picture turns with ``img_url``, ``blip_caption``, ``query``) becomes one
conversation named by its ``sample_id``. A turn is stored as an OpenAI-shape message:
``speaker_a``'s turns as ``user``, the other's as ``assistant``, ``"name"`` the speaker,
``"id"`` the ``dia_id`` (the idempotency key), the rest of the turn and its session under
``"locomo"``; it is indexed as "speaker (session date): text" with the photo's caption, and
created at the session's date. Questions and the authors' annotations are not conversation
and are not imported. Export writes the samples back (turns, speakers, session dates).
"""

from __future__ import annotations

import calendar
import json
import re
import time
from dataclasses import replace
from typing import IO, Any

from .._json import dumps_text
from .._json import parse as parse_json
from ..errors import MessageFormatError
from ..search.terms import index_text
from ..stores.base import Scope, Store
from ._common import Progress, conversations, created_date, no_progress, read_all, records_for, write_all

DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
_SESSION = re.compile(r"session_([1-9][0-9]{0,8})(?:_date_time)?")  # a session's turns, or its date


def session_time(value: str) -> float | None:
    """Unix seconds (UTC) of a LoCoMo session date, or None if it does not parse."""
    try:
        return float(calendar.timegm(time.strptime(value.strip(), DATE_FORMAT)))
    except (ValueError, AttributeError):
        return None


def session_numbers(conv: dict[str, Any]) -> list[int]:
    """The numbers of every session a LoCoMo conversation has (``session_<n>`` or its date), in numeric
    order: a trimmed file may skip a number, and ``session_10`` comes after ``session_9``.
    """
    return sorted({int(m.group(1)) for key in conv if (m := _SESSION.fullmatch(str(key)))})


def turns(sample: dict[str, Any]) -> list[dict[str, Any]]:
    """The sample's turns as messages, in order."""
    conv = sample.get("conversation")
    if not isinstance(conv, dict):
        raise MessageFormatError(f"sample {sample.get('sample_id')!r}: 'conversation' must be an object")
    speaker_a = conv.get("speaker_a")
    out = []
    for n in session_numbers(conv):
        date = conv.get(f"session_{n}_date_time") or ""
        for i, turn in enumerate(conv.get(f"session_{n}") or []):
            if not isinstance(turn, dict) or not isinstance(turn.get("text"), str) or not turn.get("dia_id"):
                raise MessageFormatError(f"sample {sample.get('sample_id')!r}: session_{n}[{i}] needs 'dia_id' "
                                         "and a string 'text'")
            speaker = turn.get("speaker") or ""
            extra = {k: v for k, v in turn.items() if k not in ("speaker", "dia_id", "text")}
            out.append({"role": "user" if speaker == speaker_a else "assistant", "content": turn["text"],
                        "name": speaker, "id": str(turn["dia_id"]),
                        "locomo": {"session": n, "date_time": date, **extra}})
    return out


def import_locomo(store: Store, scope: Scope, fp: IO[str], *, progress: Progress = no_progress,
                  embedder: Any = None) -> dict[str, int]:
    """Import every sample of a LoCoMo file into ``scope``'s owner (``scope.session_id`` takes them all)."""
    try:
        data = parse_json(fp.read().removeprefix("\ufeff"))  # a byte order mark (on stdin too) is no JSON
    except json.JSONDecodeError as exc:
        raise MessageFormatError(f"not a LoCoMo file: invalid JSON ({exc.msg})") from None
    samples = data if isinstance(data, list) else [data]
    prepared = []
    for index, sample in enumerate(samples):
        if not isinstance(sample, dict):
            raise MessageFormatError(f"sample {index}: expected an object")
        name = str(sample.get("sample_id") or f"sample-{index}")
        messages = turns(sample)
        times = [session_time(m["locomo"]["date_time"]) for m in messages]
        ids = [f"{name}:{m['id']}" if scope.session and len(samples) > 1 else m["id"] for m in messages]
        records = records_for(messages, ids, times=times, where=f"sample {name!r}: ")
        for record, m in zip(records, messages):
            caption = m["locomo"].get("blip_caption")
            text = f"{m['content']} [shares a photo: {caption}]" if caption else m["content"]
            record.text = index_text(text, speaker=m["name"], date=m["locomo"]["date_time"] or None)
        prepared.append((replace(scope, session_id=scope.session or name), records))
    return write_all(store, prepared, len({s.session_id for s, _ in prepared}), progress, embedder)


def export_locomo(store: Store, scope: Scope, fp: IO[str], *, progress: Progress = no_progress) -> dict[str, int]:
    """Write the conversations of ``scope`` as a JSON list of LoCoMo samples; counts."""
    samples = []
    sessions = conversations(store, scope)
    count = 0
    for n, session in enumerate(sessions):
        stored = read_all(store, replace(scope, session_id=session))
        if not stored:
            continue
        conv: dict[str, Any] = {}
        for m in stored:
            data = m.data
            found = data.get("locomo")
            meta: dict[str, Any] = found if isinstance(found, dict) else {}
            speaker = data.get("name") or m.role
            if m.role == "user":
                conv.setdefault("speaker_a", speaker)
            else:
                conv.setdefault("speaker_b", speaker)
            number = meta.get("session", 1)
            conv.setdefault(f"session_{number}_date_time", meta.get("date_time") or
                            created_date(m, session, "locomo").strftime(DATE_FORMAT).lower().lstrip("0"))
            content = data.get("content")
            text = content if isinstance(content, str) else " ".join(
                p.get("text", "") for p in content or [] if isinstance(p, dict))
            turn = {"speaker": speaker, "dia_id": data.get("id") or m.id, "text": text}
            turn.update({k: v for k, v in meta.items() if k not in ("session", "date_time")})
            conv.setdefault(f"session_{number}", []).append(turn)
            count += 1
        samples.append({"sample_id": session, "conversation": conv, "qa": []})
        progress("exporting", n + 1, len(sessions))
    fp.write(dumps_text(samples, indent=1))
    fp.write("\n")
    return {"conversations": len(samples), "messages": count}
