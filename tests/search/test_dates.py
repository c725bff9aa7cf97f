"""Relative dates resolved against the date a message was written (index time)."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fullrecall.search import SemanticSearch, index_text
from fullrecall.search.dates import WEEKDAYS, date_note, parse_date, resolve, resolve_dates

LOCOMO_DATE = "1:56 pm on 8 May, 2023"  # a Monday


@pytest.mark.parametrize(
    "text, expected",
    [
        (LOCOMO_DATE, date(2023, 5, 8)),
        ("2024-02-29", date(2024, 2, 29)),
        ("on May 8th, 2023 at noon", date(2023, 5, 8)),
        ("3 Sept 2021", date(2021, 9, 3)),
        ("31 February 2023", None),
        ("sometime in spring", None),
        (None, None),
    ],
)
def test_parse_date(text, expected):
    assert parse_date(text) == expected


@pytest.mark.parametrize(
    "phrase, expected",
    [
        ("yesterday", "7 May 2023"),
        ("tomorrow", "9 May 2023"),
        ("last Saturday", "6 May 2023"),
        ("this past Monday", "1 May 2023"),  # the Monday before, not the day itself
        ("next Monday", "15 May 2023"),
        ("next Friday", "12 May 2023"),
        ("last week", "the week of 1 May 2023"),
        ("last weekend", "the weekend of 6 May 2023"),
        ("last month", "April 2023"),
        ("next month", "June 2023"),
        ("last year", "2022"),
        ("3 days ago", "5 May 2023"),
        ("a couple of days ago", "6 May 2023"),
        ("two weeks ago", "the week of 24 April 2023"),
        ("five months ago", "December 2022"),
        ("a year ago", "2022"),
        ("in a while", None),
    ],
)
def test_resolve_against_the_written_date(phrase, expected):
    assert resolve(phrase, date(2023, 5, 8)) == expected


@given(st.dates(min_value=date(1900, 1, 1), max_value=date(2200, 1, 1)), st.sampled_from(WEEKDAYS))
def test_last_and_next_weekday_are_that_weekday_within_a_week(anchor, weekday):
    for direction, sign in (("last", -1), ("next", 1)):
        meant = parse_date(resolve(f"{direction} {weekday}", anchor))
        assert meant is not None and meant.weekday() == WEEKDAYS.index(weekday)
        assert 1 <= (meant - anchor).days * sign <= 7


@given(st.dates(min_value=date(1900, 1, 1), max_value=date(2200, 1, 1)), st.integers(1, 12))
def test_days_ago_is_that_many_days_before(anchor, n):
    assert parse_date(resolve(f"{n} days ago", anchor)) == anchor - timedelta(days=n)


def test_index_text_notes_each_phrase_once_after_the_text():
    text = "Last Saturday I ran, and yesterday too. Last Saturday was hot."
    indexed = index_text(text, speaker="Ann", date=LOCOMO_DATE)
    assert indexed == f"Ann ({LOCOMO_DATE}): {text} [Last Saturday: 6 May 2023; yesterday: 7 May 2023]"
    assert index_text("I ran today.", speaker="Ann", date=LOCOMO_DATE) == f"Ann ({LOCOMO_DATE}): I ran today."
    assert index_text("yesterday", date="no date here") == "(no date here): yesterday"
    assert date_note("yesterday", None) == "" and resolve_dates("yesterday", None) == []


@pytest.mark.parametrize(("text", "written", "other"), [
    ("see you tomorrow", "9999-12-31", "[yesterday: 30 December 9999]"),
    ("next month", "9999-12-05", "[yesterday: 4 December 9999]"),
    ("next week", "9999-12-28", "[yesterday: 27 December 9999]"),
    ("yesterday", "0001-01-01", "[tomorrow: 2 January 1]"),
    ("last week", "0001-01-03", "[tomorrow: 4 January 1]"),
    ("5 years ago", "0003-06-01", "[tomorrow: 2 June 3]"),
])
def test_a_phrase_meaning_a_day_past_the_calendar_is_left_unresolved(text, written, other, default_embedder):
    """A message dated at the calendar's ends is added, its phrase left as written (add raised OverflowError or
    ValueError), and the other phrases still resolved."""
    assert date_note(text, written) == ""
    phrase = other[1:other.index(":")]
    assert date_note(f"{text}, and {phrase}", written) == f" {other}"
    with SemanticSearch(default_embedder) as search:
        search.add([f"the launch is {text}"], metadata=[{"date": written}])
        assert search.search("launch", top_k=1)[0].text == f"the launch is {text}"


def test_a_question_naming_the_day_finds_the_relative_turn(default_embedder):
    other = ["The weather has been nice lately.", "I painted the fence.", "My sister called me.",
             "Work was busy this week.", "I read a novel about sailors.", "We cooked pasta for dinner."]
    texts = ["We went to the pottery workshop yesterday, so much fun!", *other]
    dates = ["9 July 2023"] + [f"{d} July 2023" for d in (12, 15, 18, 21, 24, 27)]
    with SemanticSearch(default_embedder) as search:
        search.add(texts, metadata=[{"speaker": "Mel", "date": d} for d in dates])
        hit = search.search("What did Mel do on 8 July 2023?", top_k=1)[0]
        assert hit.text == texts[0]  # verbatim, without the note
        assert hit.message.text.endswith("[yesterday: 8 July 2023]")
