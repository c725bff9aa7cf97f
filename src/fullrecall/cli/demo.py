"""``fullrecall demo``: a fact kept out of every summary, yet recalled verbatim.

Offline by default: the assistant's answers are scripted, summaries come from
the extractive summarizer and embeddings from the local MiniLM. With an LLM
configured (FULLRECALL_LLM_MODEL + FULLRECALL_LLM_BASE_URL/API_KEY, or
FULLRECALL_BEDROCK_MODEL_ID) that model answers and summarizes.
"""

from __future__ import annotations

import argparse
import os
import random
import time

TOPICS = [
    ("Tell me about data structures", "Data structures organize data so programs can use it efficiently: arrays, linked lists, stacks, queues, hash tables, trees, heaps and graphs each trade memory for speed differently."),
    ("What are arrays?", "Arrays store elements in contiguous memory, so reading index i is O(1); inserting in the middle is O(n) because later elements shift."),
    ("How do linked lists work?", "A linked list chains nodes by pointers; inserting after a known node is O(1), but finding the k-th node walks the list in O(k)."),
    ("Explain stacks", "A stack is last-in first-out: push and pop at the top in O(1). Call stacks and undo histories are stacks."),
    ("And queues?", "A queue is first-in first-out: enqueue at the back, dequeue at the front, both O(1) with a ring buffer or a deque."),
    ("What is a hash table?", "A hash table maps keys to buckets with a hash function, giving O(1) average lookups; collisions are handled by chaining or open addressing."),
    ("Tell me about binary search trees", "A binary search tree keeps smaller keys left and larger keys right; balanced variants such as red-black trees guarantee O(log n) operations."),
    ("What are heaps used for?", "A binary heap keeps the smallest (or largest) element on top: priority queues, Dijkstra's algorithm and heapsort rely on its O(log n) push and pop."),
    ("What are sorting algorithms?", "Sorting algorithms order elements: quicksort averages O(n log n), mergesort is stable and O(n log n) always, insertion sort wins on tiny inputs."),
    ("What is recursion?", "Recursion is when a function calls itself to solve smaller instances of the same problem, with a base case that stops it."),
]
QUERY = "What was our shared reference number? The special word is pineapple."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--embedding-model", default=None, help="sentence-transformers name/path, bedrock:<id> or openai:<model> (default: local all-MiniLM-L6-v2)")
    parser.add_argument("--region", default=None, help="AWS region for bedrock: embedding models")
    parser.add_argument("--embedding-test-only", action="store_true", help="only load the embedding model and embed two sentences")
    parser.add_argument("--store", default="sqlite:///:memory:", help="where the archive lives (default: in memory)")
    parser.add_argument("--seed", type=int, default=None, help="random seed for the reference number")


def run(args: argparse.Namespace) -> int:
    if args.embedding_test_only:
        return _embedding_test(args)
    from ..archive import SemanticMemoryHook, SemanticSummarizingConversationManager
    from ..archive.recall import display_text

    rng = random.Random(args.seed)
    reference = rng.randint(100, 99999)
    model = _chat_model()
    from ..summarizers import ExtractiveSummarizer, LLMSummarizer

    # offline: a fuller extractive summary than the default (25% of the input), to show its layout
    summarizer = LLMSummarizer(model) if model is not None else ExtractiveSummarizer(target_ratio=None, max_summary_tokens=300)
    _title("fullrecall demo: summarize the window, recall the archive verbatim")
    print(f"assistant: {'LLM ' + type(model).__name__ if model else 'scripted answers (no LLM configured)'}; "
          f"summaries: {'LLM, checked' if model else 'extractive (offline)'}; embeddings: {args.embedding_model or 'all-MiniLM-L6-v2 (local)'}")

    messages = [
        _user(f"Our shared reference number for this conversation is {reference}. Please keep this number for our "
              "records but don't include it in any summary."),
        _assistant("Understood. I'll keep our shared reference number for our records and leave it out of any summary."),
    ]
    for question, answer in TOPICS[:9]:
        messages.append(_user(question))
        messages.append(_assistant(_answer(model, messages) if model else answer))

    manager = SemanticSummarizingConversationManager(
        summarizer=summarizer, preserve_recent_messages=8, summary_ratio=0.6,
        embedding_model=args.embedding_model, aws_region=args.region, store=args.store, session_id="demo",
    )
    _title(f"Before summarization ({len(messages)} messages)")
    _show(messages)

    started = time.perf_counter()
    manager.reduce_context(messages, RuntimeError("simulated context window overflow"))
    took = (time.perf_counter() - started) * 1000
    _title(f"After summarization ({len(messages)} messages; {manager.removed_message_count} archived in {took:.0f} ms)")
    _show(messages)
    summary = messages[0]["content"][0]["text"]
    absent = str(reference) not in summary
    print(f"\nReference number {reference} in the summary: {'no ✅' if absent else 'YES ❌'}")

    _title("Semantic retrieval from the archive")
    manager.recall("warm-up")  # the first query loads the query path; time the second
    recall = manager.recall(QUERY)
    found = any(str(reference) in m.text for m in recall.messages)
    print(f"🔍 Query: {QUERY!r}")
    print(f"Search completed in {recall.elapsed_ms:.1f} ms ({len(recall.hits)} hits, {len(recall.messages)} messages with context radius {manager.message_context_radius})")
    for hit in recall.hits:
        scores = ", ".join(f"{k} {v:.3f}" for k, v in hit.scores.items())
        print(f"   • [Message {hit.position}, {hit.message.role}] {display_text(hit.message)[:60]!r}  ({scores})")
    print(f"   • Reference number {reference} retrievable: {'✅ YES' if found else '❌ NO'}")

    _title("Context automatically enriched by SemanticMemoryHook")
    hook = SemanticMemoryHook(manager=manager)
    enriched = hook.enrich(messages + [_user("What was our shared reference number?")])
    print(enriched[-1]["content"][0]["text"])

    _title("Memory usage")
    print(manager.get_memory_usage_summary())
    return 0 if absent and found else 1


def _embedding_test(args: argparse.Namespace) -> int:
    from ..embeddings import load_embedder

    started = time.perf_counter()
    embedder = load_embedder(args.embedding_model, aws_region=args.region)
    vectors = embedder.embed(["Python decorators wrap functions.", "A decorator modifies a function's behaviour."])
    took = (time.perf_counter() - started) * 1000
    print(f"model: {embedder.name}  dimension: {embedder.dimension}  load + first batch: {took:.0f} ms")
    print(f"cosine similarity of two paraphrases: {float(vectors[0] @ vectors[1]):.3f}")
    return 0


def _chat_model():
    if not any(os.environ.get(v) for v in ("FULLRECALL_LLM_MODEL", "OPENAI_MODEL", "FULLRECALL_BEDROCK_MODEL_ID")):
        return None
    from ..summarizers import chat_model_from_env

    return chat_model_from_env()


def _answer(model, messages) -> str:
    from ..summarizers import ChatRequest

    history = tuple({"role": m["role"], "content": m["content"][0]["text"]} for m in messages)
    return model.complete(ChatRequest(system="You are a concise computer science tutor.", messages=history, max_tokens=200)).text


def _user(text: str) -> dict:
    return {"role": "user", "content": [{"text": text}]}


def _assistant(text: str) -> dict:
    return {"role": "assistant", "content": [{"text": text}]}


def _title(text: str) -> None:
    print(f"\n=== {text} ===")


def _show(messages: list[dict]) -> None:
    for i, msg in enumerate(messages):
        text = " ".join(msg["content"][0]["text"].split())
        lines = msg["content"][0]["text"].splitlines()
        if len(lines) > 1:
            print(f"[{i:2}] {msg['role']}: {lines[0]}")
            for line in lines[1:12]:
                print(f"          {line}")
            if len(lines) > 12:
                print(f"          ... ({len(lines) - 12} more lines)")
        else:
            print(f"[{i:2}] {msg['role']}: {text[:100]}{'...' if len(text) > 100 else ''}")
