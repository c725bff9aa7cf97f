"""The command line: the demo proves its point, and the window bench runs."""

import json

from fullrecall.cli.main import main


def test_demo_keeps_the_number_out_of_the_summary_and_recalls_it(capsys):
    assert main(["demo", "--seed", "11"]) == 0
    out = capsys.readouterr().out
    assert "in the summary: no ✅" in out and "retrievable: ✅ YES" in out
    assert "---Previous Context---" in out and "Current question: What was our shared reference number?" in out


def test_embedding_test_only(capsys):
    assert main(["demo", "--embedding-test-only"]) == 0
    assert "dimension: 384" in capsys.readouterr().out


def test_bench_window_reports_every_manager(capsys):
    assert main(["bench", "window", "--messages", "200", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["messages"] == 200 and result["import_s"] < 1
    sliding = result["managers"]["sliding_window(40)"]
    assert sliding["final_window"] <= 40 and sliding["removed"] + sliding["final_window"] == 200


def test_python_dash_m_is_the_fullrecall_command():
    import subprocess
    import sys

    for argv in (["--help"], ["bench", "--help"]):
        module = subprocess.run([sys.executable, "-m", "fullrecall", *argv], capture_output=True, text=True, timeout=60)
        assert module.returncode == 0 and "usage: fullrecall" in module.stdout, module.stderr
    wrong = subprocess.run([sys.executable, "-m", "fullrecall", "no-such-command"], capture_output=True, text=True,
                           timeout=60)
    assert wrong.returncode == 2 and "invalid choice" in wrong.stderr
