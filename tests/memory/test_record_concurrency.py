"""Writers updating one long-term record at once, from several processes, on every backend: every update lands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from record_worker import FACT, LOOSE, open_memory

WORKER = Path(__file__).with_name("record_worker.py")
WORKERS, COUNT = 4, 12


def run_writers(store_url: str, kind: str, go: Path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = [subprocess.Popen([sys.executable, str(WORKER), store_url, kind, str(COUNT), str(go)], env=env)
             for _ in range(WORKERS)]
    go.touch()
    assert [p.wait(timeout=240) for p in procs] == [0] * WORKERS


@pytest.mark.parametrize("kind", ["pattern", "fact"])
def test_processes_updating_one_record_lose_no_update(store_url, tmp_path, kind):
    """Each process read the record, counted one up and wrote it back: two at once wrote the same count."""
    run_writers(store_url, kind, tmp_path / "go")
    memory = open_memory(store_url, kind)
    if kind == "pattern":
        [pattern] = memory.patterns()
        assert pattern["success_count"] == WORKERS * COUNT
    else:
        [fact] = memory.current()
        assert (fact.text, fact.mentions) == (FACT, WORKERS * COUNT)
    memory.close()


def test_processes_stating_a_fact_without_attribute_for_the_first_time_at_once_make_one_fact(store_url, tmp_path):
    """Writers stating one fact without an attribute at once, none having seen the others' (a user's message
    recorded by several workers): each wrote a fact of its own, the same fact kept two, three, four times."""
    run_writers(store_url, "loose", tmp_path / "go")
    memory = open_memory(store_url, "fact")
    current = sorted((f.text, f.mentions) for f in memory.current())
    assert current == sorted((LOOSE.format(i), WORKERS) for i in range(COUNT))
    assert len(memory.history()) == COUNT  # the duplicates folded in are gone, not kept as closed facts
    memory.close()


@pytest.mark.parametrize("when", ["while the target is being folded away", "once the target is folded away"])
def test_a_fold_into_a_fact_another_writer_folds_away_meanwhile_loses_no_mention(store_url, default_embedder, when):
    """Two writers fold at once: one folds the duplicate D into T while the other folds T itself into W. D's
    mentions and sources landed on T just before T was deleted (or found T gone), and were lost. Now a fold
    that finds its target folded away adds them to the fact the target was folded into: W holds all three."""
    from fullrecall.memory.facts import Fact, FactMemory
    from fullrecall.stores import open_store

    text = "The user likes jazz."
    made = [Fact(id=name, text=text, stated_at=100.0 + i, valid_from=100.0 + i, sources=[{"id": f"m-{name}"}])
            for i, name in enumerate(("d", "t", "w"))]
    one_store, other_store = open_store(store_url), open_store(store_url)
    try:
        one = FactMemory(one_store, user_id="u", embedder=default_embedder)
        other = FactMemory(other_store, user_id="u", embedder=default_embedder)
        assert one.restore(made) == 3 and len(other.current()) == 3 and len(one.current()) == 3  # both have read them
        if when == "while the target is being folded away":  # T closed, W grown, T not yet deleted: D folds into T
            real = other_store.delete_record

            def fold_d_then_delete(scope, namespace, record_id):
                if record_id == "t":
                    one._fold("d", "t")
                return real(scope, namespace, record_id)

            other_store.delete_record = fold_d_then_delete  # type: ignore[method-assign]
            other._fold("t", "w")
            other_store.delete_record = real  # type: ignore[method-assign]
        else:  # T folded into W and deleted; the one writer, not having read since, folds D into T
            other._fold("t", "w")
            one._fold("d", "t")
        for memory in (FactMemory(store_url, user_id="u", embedder=default_embedder), one, other):
            facts = memory.history()
            assert [(f.id, f.mentions, sorted(s["id"] for s in f.sources)) for f in facts] == [
                ("w", 3, ["m-d", "m-t", "m-w"])], when
            memory.close()
    finally:
        one_store.close()
        other_store.close()


@pytest.mark.parametrize("said", ["I live in Lisbon.", "I love jazz."])  # a fact with an attribute, one without
def test_one_turn_learned_twice_at_once_in_one_process_counts_one_mention(store_url, default_embedder, said):
    """A memory's warming catch-up learns a turn a dead process left while the application retries that turn: the
    same statement (same message) learned by two threads at once. Each found no fact yet and wrote its own (an
    attribute fact superseding the other, or a duplicate folded into it with a second mention); now one learns
    it and the other finds it kept from the same message: one fact, one mention.
    """
    import threading

    from fullrecall.memory.facts import FactMemory
    from fullrecall.stores import open_store

    store = open_store(store_url)
    memory = FactMemory(store, user_id="u", embedder=default_embedder)
    both = threading.Barrier(2)
    real = store.put_record

    def put_record(*args, **kwargs):  # each learner holds its first write until the other is there too (or 1 s)
        try:
            both.wait(timeout=1.0)
        except threading.BrokenBarrierError:
            pass
        return real(*args, **kwargs)

    store.put_record = put_record  # type: ignore[method-assign]
    turn, sources = [{"role": "user", "content": said}], [{"session_id": "s", "id": "m1"}]
    errors: list[BaseException] = []

    def learn() -> None:
        try:
            memory.learn(turn, sources, stated_at=100.0)
        except BaseException as exc:  # noqa: BLE001 - the test reads it
            errors.append(exc)

    try:
        threads = [threading.Thread(target=learn) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        store.put_record = real  # type: ignore[method-assign]
        assert not errors
        for reader in (memory, FactMemory(store_url, user_id="u", embedder=default_embedder)):
            assert [(f.mentions, f.sources) for f in reader.history()] == [(1, sources)]
            if reader is not memory:
                reader.close()
    finally:
        store.close()
