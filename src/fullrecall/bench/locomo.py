"""Retrieval quality and speed of SemanticSearch on LoCoMo-format conversations.

Every turn is indexed through the public API as "speaker (session date): text"
(picture turns with their caption); for each question with evidence, evidence
recall@k and all-evidence-hit@k for k = 1, 5, 10, plain and with a context
radius (the recall path: hits spread at least the radius apart, each returned
with its neighbours, overlapping ranges merged). Categories 1-4 make the
headline; category 5 (adversarial) is reported apart.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

KS = (1, 5, 10)
BUDGETS = (250, 500, 1000, 2000)  # tokens of recalled context handed to the model
TURNS = (10, 25, 50)  # dialogue turns handed to the model
HEADLINE_CATEGORIES = ("1", "2", "3", "4")
_ID = re.compile(r"D\d+:\d+")


def default_data_path() -> Path:
    """``../shared/bench/locomo-dev.json`` beside the repository (found from here or the cwd)."""
    here = Path(__file__).resolve()
    for root in [Path.cwd(), *Path.cwd().parents, *here.parents]:
        candidate = root.parent / "shared" / "bench" / "locomo-dev.json"
        if (root / "pyproject.toml").exists() and candidate.exists():
            return candidate
    return Path.cwd().parent / "shared" / "bench" / "locomo-dev.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, default=None, help="LoCoMo-format JSON (default: ../shared/bench/locomo-dev.json)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--embedding-model", default=None, help="embedding model (default: all-MiniLM-L6-v2, ONNX int8)")
    parser.add_argument("--variant", choices=("int8", "fp32"), default=None, help="ONNX variant of the default model")
    parser.add_argument("--reranker-model", default=None, help="optional cross-encoder (name or path)")
    parser.add_argument("--fusion", choices=("weighted", "rrf"), default="weighted", help="rrf = the plain-hybrid baseline")
    parser.add_argument("--lexical-weight", type=float, default=None)
    parser.add_argument("--neighbour-weight", type=float, default=None)
    parser.add_argument("--candidates", type=int, default=None)
    parser.add_argument("--speaker-boost", type=float, default=None, help="boost for turns of a person named")
    parser.add_argument("--date-boost", type=float, default=None, help="boost for dated turns on 'when' questions")
    parser.add_argument("--facet-depth", type=int, default=None, help="how many of the best candidates facets rescore")
    parser.add_argument("--near-weight", type=float, default=None,
                        help="boost for candidates near the best hits of the conversation (0: off)")
    parser.add_argument("--radius", type=int, default=2, help="context radius around each hit")
    parser.add_argument("--no-spread", action="store_true", help="radius around the plain top-k instead of spread hits")
    parser.add_argument("--scale", type=int, default=10_000, help="also time queries on an archive of this many messages (0: skip)")
    parser.add_argument("--busy-core", action="store_true", help="keep one core busy with another process while timing queries")
    parser.add_argument("--limit", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--packing", choices=("budget", "classic"), default="budget",
                        help="delivered recall: the hook's budget packing, or the classic top 3 hits with radius 2")
    parser.add_argument("--radius-hits", type=int, default=0, help="packing: hits that get their radius neighbours")
    parser.add_argument("--no-pair-questions", action="store_true", help="packing: no question/answer neighbours")
    parser.add_argument("--include-metadata", action="store_true",
                        help="delivered recall with '[Message N, speaker]: text' lines instead of the hook's default "
                             "'speaker: text'")
    parser.add_argument("--tokenizer", default=None, help="token counter for budgets (default: the hook's estimate)")
    parser.add_argument("--embedding-cache", type=Path, default=None,
                        help="reuse vectors of texts embedded before (an .npz file, written back; quality runs only: "
                             "query latencies then leave out embedding)")


# -- data --------------------------------------------------------------------------


def conversation_turns(sample: dict[str, Any]) -> list[dict[str, Any]]:
    """Turns in order with their speaker, session date and text (caption added to picture turns); every
    ``session_<n>`` is read, in numeric order, as the import reads them (a file may skip a number).
    """
    from ..transfer.locomo import session_numbers

    conv = sample["conversation"]
    turns: list[dict[str, Any]] = []
    for n in session_numbers(conv):
        date = conv.get(f"session_{n}_date_time", "")
        for t in conv.get(f"session_{n}") or []:
            text = t.get("text", "")
            if t.get("blip_caption"):
                text = f"{text} [shares a photo: {t['blip_caption']}]"
            turns.append({"id": t["dia_id"], "speaker": t.get("speaker", ""), "date": date, "text": text, "session": n})
    return turns


def evidence_ids(raw: list[Any], known: set[str], counts: dict[str, int]) -> list[str]:
    """Valid evidence ids: strings holding several ids are split, ids of no turn skipped (and counted)."""
    out: list[str] = []
    for item in raw:
        found = _ID.findall(str(item))
        if len(found) > 1:
            counts["evidence_split"] += 1
        if not found:
            counts["evidence_skipped"] += 1
        for e in found:
            if e in known:
                out.append(e)
            else:
                counts["evidence_skipped"] += 1
    return list(dict.fromkeys(out))


# -- measuring ---------------------------------------------------------------------


class Tally:
    """Recall and all-hit sums per k, plain and with radius."""

    def __init__(self) -> None:
        self.n = 0
        self.sums: dict[str, float] = {}

    def add(self, name: str, value: float) -> None:
        self.sums[name] = self.sums.get(name, 0.0) + value

    def report(self) -> dict[str, Any]:
        def avg(name: str) -> float:
            return round(self.sums.get(name, 0.0) / self.n, 4) if self.n else 0.0

        return {
            "questions": self.n,
            "recall": {str(k): avg(f"recall@{k}") for k in KS},
            "all_hit": {str(k): avg(f"all@{k}") for k in KS},
            "recall_radius": {str(k): avg(f"recall_r@{k}") for k in KS},
            "all_hit_radius": {str(k): avg(f"all_r@{k}") for k in KS},
            "radius_turns": {str(k): round(self.sums.get(f"turns@{k}", 0.0) / self.n, 1) if self.n else 0.0 for k in KS},
            "delivered_recall": {str(b): avg(f"delivered@{b}") for b in BUDGETS},
            "delivered_tokens": {str(b): round(self.sums.get(f"tokens@{b}", 0.0) / self.n, 1) if self.n else 0.0
                                 for b in BUDGETS},
            "recall_at_turns": {str(t): avg(f"turns_recall@{t}") for t in TURNS},
        }


def recall_context(search: Any, question: str, k: int, radius: int, spread: bool) -> tuple[list[Any], list[Any], str]:
    """The recall path: search, context ranges from the store, formatted text (what a hook injects)."""
    from ..search.packing import spans_around

    hits = search.search(question, top_k=k, spread=radius if spread else 0)
    ranges = spans_around([h.position for h in hits], radius)
    messages = search.messages_at([p for lo, hi in ranges for p in range(lo, hi + 1)])
    text = "\n".join(f"[Message {m.position}, {m.role}]: {m.data.get('text', m.text)}" for m in messages)
    return hits, messages, text


class Delivery:
    """What the hook hands the model for a question, at each budget (the hook's own packing code)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from ..archive.recall import line_cost
        from ..tokens import default_token_counter

        self.counter = default_token_counter(args.tokenizer)
        self.include_metadata = args.include_metadata
        self.tokens = line_cost(self.counter, self.include_metadata)
        self.turns = lambda m: (1,)
        self.seed = args.packing == "classic"
        self.radius = args.radius
        self.radius_hits = args.radius_hits
        self.pair_questions = not args.no_pair_questions

    def packings(self, search: Any, question: str) -> dict[str, Any]:
        """``"tokens@B"`` and ``"turns@T"``: the packed positions and what they cost."""
        from ..archive.recall import pack_hits

        out: dict[str, Any] = {}
        if self.seed:  # the classic hook: top 3 hits spread apart, radius 2 around each, cut at the budget
            hits = search.search(question, top_k=3, spread=self.radius)
            options = {"radius": self.radius, "radius_hits": 3, "pair_questions": False}
        else:
            options = {"radius": self.radius, "radius_hits": self.radius_hits, "pair_questions": self.pair_questions}
        searched: dict[int, list[Any]] = {}

        def hits_for(depth: int) -> list[Any]:  # the search the hook runs (the candidate pool grows with depth)
            if self.seed:
                return hits
            if depth not in searched:
                searched[depth] = search.search(question, top_k=depth)
            return searched[depth]

        for b in BUDGETS:
            out[f"tokens@{b}"] = pack_hits(search, hits_for(b // 20 + 2), (b,), lambda m: self.tokens(m)[1:], **options)
        for t in TURNS:
            out[f"turns@{t}"] = pack_hits(search, hits_for(t), (t,), self.turns, **options)
        return out


class CachedEmbedder:
    """An embedder that remembers every vector it made, by text, in memory and in an ``.npz`` file.

    For quality runs: the dev set's turns and questions are embedded once, not once a run
    (a question is searched about ten times a run). Same ``name``, so stores see the same space.
    """

    def __init__(self, embedder: Any, path: Path) -> None:
        import numpy as np

        self.inner = embedder
        self.name = embedder.name
        self.path = path
        self.vectors: dict[str, Any] = {}
        self.dirty = False
        if path.exists():
            with np.load(path, allow_pickle=False) as saved:
                if str(saved["name"]) == embedder.name:
                    self.vectors = dict(zip(saved["texts"].tolist(), saved["vectors"]))

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    def embed(self, texts: Any) -> Any:
        import numpy as np

        texts = list(texts)
        todo = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        if todo:
            self.vectors.update(zip(todo, self.inner.embed(todo)))
            self.dirty = True
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([self.vectors[t] for t in texts]).astype(np.float32, copy=False)

    def save(self) -> None:
        import numpy as np

        if self.dirty and self.vectors:
            texts = list(self.vectors)
            with self.path.open("wb") as f:
                np.savez(f, name=np.array(self.name), texts=np.array(texts),
                         vectors=np.stack([self.vectors[t] for t in texts]))
            self.dirty = False


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))], 3)


def run(args: argparse.Namespace) -> int:
    t_start = time.perf_counter()
    data_path = args.data or default_data_path()
    if not data_path.exists():
        print(f"no LoCoMo data at {data_path}; pass --data", file=sys.stderr)
        return 2
    samples = json.loads(data_path.read_text())
    if args.limit:
        samples = samples[: args.limit]

    from ..embeddings import load_embedder

    t0 = time.perf_counter()
    embedder = load_embedder(args.embedding_model, variant=args.variant or "int8")
    load_s = time.perf_counter() - t0
    if args.embedding_cache is not None:
        embedder = CachedEmbedder(embedder, args.embedding_cache)

    busy = _busy_process() if args.busy_core else None
    try:
        return _run(args, samples, data_path, embedder, load_s, t_start)
    finally:
        if isinstance(embedder, CachedEmbedder):
            embedder.save()
        if busy is not None:
            busy.kill()
            busy.wait()


def _busy_process():
    """Another process spinning on one core, as a busy machine has."""
    import subprocess

    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def _run(args: argparse.Namespace, samples: list[Any], data_path: Path, embedder: Any, load_s: float, t_start: float) -> int:
    from ..search import SemanticSearch
    from ..search.packing import spans_around
    from ..stores.base import Scope

    options: dict[str, Any] = {"fusion": args.fusion}
    for name in ("lexical_weight", "neighbour_weight", "candidates", "speaker_boost", "date_boost", "facet_depth",
                 "near_weight"):
        if getattr(args, name) is not None:
            options[name] = getattr(args, name)
    tallies: dict[str, Tally] = {}
    counts = {"evidence_split": 0, "evidence_skipped": 0, "questions_without_evidence": 0}
    index_s = 0.0
    indexed = 0
    latencies: list[float] = []
    per_conversation: dict[str, Tally] = {}
    spread = not args.no_spread
    delivery = Delivery(args)
    for sample in samples:
        turns = conversation_turns(sample)
        scope = Scope(user_id=sample.get("sample_id"), session_id=sample.get("sample_id") or "conversation")
        search = SemanticSearch(embedder, args.reranker_model, scope=scope, **options)
        t0 = time.perf_counter()
        search.add(
            [t["text"] for t in turns],
            ids=[t["id"] for t in turns],
            metadata=[{"speaker": t["speaker"], "date": t["date"], "role": t["speaker"]} for t in turns],
        )
        index_s += time.perf_counter() - t0
        indexed += len(turns)
        position = {m.id: m.position for m in search.store.range(scope, 0, len(turns))}
        for qa in sample.get("qa", []):
            category = str(qa.get("category"))
            evidence = evidence_ids(qa.get("evidence") or [], set(position), counts)
            if not evidence:
                counts["questions_without_evidence"] += 1
                continue
            wanted = {position[e] for e in evidence}
            plain = search.search(qa["question"], top_k=max(KS))
            t0 = time.perf_counter()
            hits, _, _ = recall_context(search, qa["question"], max(KS), args.radius, spread)
            latencies.append((time.perf_counter() - t0) * 1000)
            tally = tallies.setdefault(category, Tally())
            tally.n += 1
            for name, packed in delivery.packings(search, qa["question"]).items():
                found_d = len(wanted & set(packed.positions)) / len(wanted)
                if name.startswith("tokens@"):
                    tally.add(f"delivered@{name[7:]}", found_d)
                    tally.add(name, packed.spent[0])
                else:
                    tally.add(f"turns_recall@{name[6:]}", found_d)
            conv_tally = per_conversation.setdefault(str(sample.get("sample_id")), Tally())
            if category in HEADLINE_CATEGORIES:
                conv_tally.n += 1
            for k in KS:
                got = {h.position for h in plain[:k]}
                found = len(wanted & got)
                tally.add(f"recall@{k}", found / len(wanted))
                tally.add(f"all@{k}", float(found == len(wanted)))
                covered = {p for lo, hi in spans_around([h.position for h in hits[:k]], args.radius) for p in range(lo, hi + 1)}
                covered &= set(position.values())
                found_r = len(wanted & covered)
                tally.add(f"recall_r@{k}", found_r / len(wanted))
                tally.add(f"all_r@{k}", float(found_r == len(wanted)))
                tally.add(f"turns@{k}", len(covered))
                if category in HEADLINE_CATEGORIES and k == 10:
                    conv_tally.add("recall@10", found / len(wanted))
                    conv_tally.add("recall_r@10", found_r / len(wanted))
        search.close()

    headline = Tally()
    for cat in HEADLINE_CATEGORIES:
        t = tallies.get(cat)
        if t:
            headline.n += t.n
            for name, value in t.sums.items():
                headline.add(name, value)
    result: dict[str, Any] = headline.report()
    result["by_category"] = {cat: tallies[cat].report() for cat in sorted(tallies)}
    result["by_conversation"] = {
        cid: {"questions": t.n, "recall@10": t.report()["recall"]["10"], "recall_radius@10": t.report()["recall_radius"]["10"]}
        for cid, t in per_conversation.items()
    }
    result["index_messages_per_s"] = round(indexed / index_s, 1) if index_s else 0.0
    result["query_ms"] = {"p50": _pct(latencies, 0.5), "p95": _pct(latencies, 0.95), "archive_messages": round(indexed / max(1, len(samples)))}
    if args.scale:
        result["query_ms_at_scale"] = _scale_latency(embedder, samples, args, options)
    result.update(counts)
    result["busy_core"] = bool(args.busy_core)
    result["packing"] = {"mode": args.packing, "radius_hits": args.radius_hits,
                         "pair_questions": not args.no_pair_questions, "tokenizer": delivery.counter.name,
                         "include_metadata": delivery.include_metadata}
    result["radius"] = args.radius
    result["spread"] = spread
    result["embedder"] = embedder.name
    result["embedder_load_s"] = round(load_s, 3)
    result["options"] = options
    result["data"] = str(data_path)
    result["conversations"] = len(samples)
    result["seconds"] = round(time.perf_counter() - t_start, 1)
    if args.json:
        print(json.dumps(result))
    else:
        _print_table(result)
    return 0


def _scale_latency(embedder: Any, samples: list[dict[str, Any]], args: argparse.Namespace, options: dict[str, Any]) -> dict[str, Any]:
    """Query latency on one archive of ``args.scale`` messages (the turns repeated, vectors reused).

    The archive is written by this process, as an agent's archive is by the manager
    that recalls from it (a fresh process starts with no positions cached: see docs).
    """
    from ..search import SemanticSearch, index_text
    from ..stores.base import Scope, StoredMessage

    turns = [t for s in samples for t in conversation_turns(s)]
    texts = [index_text(t["text"], speaker=t["speaker"], date=t["date"]) for t in turns]
    vectors = embedder.embed(texts)
    scope = Scope(session_id="scale")
    search = SemanticSearch(embedder, None, scope=scope, **options)
    n = 0
    while n < args.scale:
        take = min(len(turns), args.scale - n)
        batch = [
            StoredMessage(id=f"{n + i}", role=turns[i]["speaker"], text=texts[i], data={"text": turns[i]["text"]},
                          position=n + i)
            for i in range(take)
        ]
        search.store.append(scope, batch)
        search.store.set_vectors(scope, [m.id for m in batch], vectors[:take], embedder.name)
        search.index(batch, append=False)  # as the archive does; the vectors are there, so nothing is embedded
        n += take
    questions = [qa["question"] for s in samples for qa in s.get("qa", []) if str(qa.get("category")) in HEADLINE_CATEGORIES]
    for q in questions[:20]:  # warm caches (vector matrix, SQLite pages)
        recall_context(search, q, max(KS), args.radius, not args.no_spread)
    from ..archive.recall import format_context, packed_recall

    delivery = Delivery(args)
    times, packed_times, embed_times = [], [], []
    for q in questions:
        t0 = time.perf_counter()
        recall_context(search, q, max(KS), args.radius, not args.no_spread)
        t1 = time.perf_counter()
        _, packed = packed_recall(search, q, (500,), lambda m: delivery.tokens(m)[1:], depth=500 // 20 + 2,
                                  radius=args.radius, radius_hits=args.radius_hits,
                                  pair_questions=not args.no_pair_questions)
        format_context(q, packed.messages, include_metadata=delivery.include_metadata)
        t2 = time.perf_counter()
        search.embed_query(q)
        t3 = time.perf_counter()
        times.append((t1 - t0) * 1000)
        packed_times.append((t2 - t1) * 1000)
        embed_times.append((t3 - t2) * 1000)
    search.close()
    return {"messages": n, "queries": len(times), "p50": _pct(times, 0.5), "p95": _pct(times, 0.95),
            "hook_500_p50": _pct(packed_times, 0.5), "hook_500_p95": _pct(packed_times, 0.95),
            "embed_p50": _pct(embed_times, 0.5)}


def _print_table(r: dict[str, Any]) -> None:
    print(f"LoCoMo retrieval: {r['conversations']} conversations, {r['questions']} questions (categories 1-4), embedder {r['embedder']}")
    print(f"{'':14} {'@1':>7} {'@5':>7} {'@10':>7}")
    for label, key in (("recall", "recall"), ("all-hit", "all_hit"), (f"recall r={r['radius']}", "recall_radius"),
                       (f"all-hit r={r['radius']}", "all_hit_radius"), ("turns r", "radius_turns")):
        print(f"{label:14} " + " ".join(f"{r[key][str(k)]:>7}" for k in KS))
    print("delivered recall (tokens spent): " + ", ".join(
        f"{b}: {r['delivered_recall'][str(b)]} ({r['delivered_tokens'][str(b)]})" for b in BUDGETS)
        + f"; tokenizer {r['packing']['tokenizer']}, packing {r['packing']['mode']}")
    print("recall at turns handed over: " + ", ".join(f"{t}: {r['recall_at_turns'][str(t)]}" for t in TURNS))
    for cat, c in r["by_category"].items():
        tag = " (adversarial, not in the headline)" if cat == "5" else ""
        print(f"category {cat}: {c['questions']} questions, recall@10 {c['recall']['10']}, with radius "
              f"{c['recall_radius']['10']}, delivered@500 {c['delivered_recall']['500']}, "
              f"@1000 {c['delivered_recall']['1000']}{tag}")
    print(f"indexing: {r['index_messages_per_s']} messages/s; query (embed + search + radius + format): "
          f"p50 {r['query_ms']['p50']} ms, p95 {r['query_ms']['p95']} ms")
    if "query_ms_at_scale" in r:
        s = r["query_ms_at_scale"]
        print(f"at {s['messages']} messages: p50 {s['p50']} ms, p95 {s['p95']} ms; the hook at 500 tokens "
              f"(search + pack + format) p50 {s['hook_500_p50']} ms, p95 {s['hook_500_p95']} ms; "
              f"embedding the question alone p50 {s['embed_p50']} ms")
    print(f"evidence ids split {r['evidence_split']}, skipped {r['evidence_skipped']}; "
          f"questions without evidence {r['questions_without_evidence']}")
