"""A record book's expiry: whatever the order of writes, replacements, deletions and the clock's moves, the
live records are exactly those whose ``expires_at`` is still ahead (the soonest expiry is kept as records
change, not found by a scan each time: this checks that bookkeeping against a plain model).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fullrecall.memory._records import EXPIRES_AT, RecordBook, owner_scope
from fullrecall.stores import open_store
from fullrecall.stores.base import Record

_IDS = ["a", "b", "c", "d"]
_STEPS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.sampled_from(_IDS), st.one_of(st.none(), st.integers(0, 20))),
    st.tuples(st.just("delete"), st.sampled_from(_IDS), st.none()),
    st.tuples(st.just("tick"), st.integers(1, 8), st.none()),
), max_size=30)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@settings(max_examples=150, deadline=None)
@given(steps=_STEPS)
def test_live_records_are_those_not_yet_expired(steps: list[tuple[str, object, int | None]]) -> None:
    clock = _Clock()
    store = open_store("sqlite:///:memory:")
    book = RecordBook(store, owner_scope("default", "u", "a"), "notes", clock=clock)
    model: dict[str, float | None] = {}  # id -> expiry (None: never)
    try:
        for op, arg, expires in steps:
            if op == "put":
                data = {} if expires is None else {EXPIRES_AT: clock.now + expires}
                book.put(Record(id=str(arg), namespace="notes", text=f"note {arg}", data=data, created_at=clock.now))
                model[str(arg)] = data.get(EXPIRES_AT)
            elif op == "delete":
                book.delete(str(arg))
                model.pop(str(arg), None)
            else:
                clock.now += float(arg)  # type: ignore[arg-type]
            model = {i: at for i, at in model.items() if at is None or at > clock.now}
            assert sorted(r.id for r in book.all()) == sorted(model)
    finally:
        store.close()
