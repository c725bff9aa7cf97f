"""``fullrecall bench window`` and ``bench store`` refuse a count below 1 and an unknown backend as bad options:
exit 2 and an ``error:`` line naming the option, never a traceback."""

from __future__ import annotations

import pytest

from fullrecall.cli.main import main


@pytest.mark.parametrize("argv, option", [
    (["window", "--messages", "0"], "--messages"),
    (["window", "--messages", "-4"], "--messages"),
    (["store", "--backends", "sqlite", "--layouts", "one", "--sizes", "1000", "--queries", "0"], "--queries"),
    (["store", "--backends", "sqlite", "--layouts", "one", "--sizes", "0", "--queries", "5"], "--sizes"),
    (["store", "--backends", "sqlite", "--layouts", "one", "--sizes", "1000,0", "--queries", "5"], "--sizes"),
    (["store", "--backends", "sqlite", "--layouts", "one", "--sizes", ",", "--queries", "5"], "--sizes"),
    (["store", "--archive", "--archive-writes", "0"], "--archive-writes"),
    (["store", "--archive", "--archive-batch", "0"], "--archive-batch"),
    (["store", "--archive", "--archive-sizes", "0"], "--archive-sizes"),
])
def test_a_count_below_one_is_refused_naming_the_option(argv, option, capsys):
    """--messages 0 and --queries 0 ended in an IndexError, --sizes 0 in a ZeroDivisionError."""
    with pytest.raises(SystemExit) as stopped:
        main(["bench", *argv])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and f"error: argument {option}: expected " in err and "at least 1" in err, err
    assert "Traceback" not in err


def test_an_unknown_backend_is_a_bad_option(capsys):
    """--backends mysql exited 1 with the bare message (a SystemExit string), where a bad option exits 2."""
    assert main(["bench", "store", "--backends", "mysql", "--layouts", "one", "--sizes", "1000", "--queries", "5"]) == 2
    assert capsys.readouterr().err == "error: unknown backend or layout: ['mysql']\n"


def test_a_count_is_read_as_an_integer_is_written():
    """The first check took digits alone: ``--sizes 1_000`` (as ``int()`` reads it, and the benches did before) was
    refused."""
    from fullrecall.bench import count, counts

    assert count("1_000") == 1000 and count(" 7 ") == 7
    assert counts("1_000, 100_000") == [1000, 100000]
