"""The memory commands through the real entry point (``python -m fullrecall``): output, --json, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "summarizers"))
from summarizer_peers import Reply, ScriptedServer, completion  # noqa: E402

LOCOMO = Path("/work/shared/bench/locomo-dev.json")


def fr(*args: str, cwd: Path, stdin: str | None = None, ok: bool = True, path: str | None = None,
       env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m fullrecall ARGS`` (``path`` added to PYTHONPATH, ``env`` set); with ``ok`` it must exit 0."""
    env = {**os.environ, **(env or {})}
    if path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), path) if p)
    done = subprocess.run([sys.executable, "-m", "fullrecall", *args], capture_output=True, text=True, cwd=cwd,
                          input=stdin if stdin is not None else "", timeout=180, env=env)
    if ok:
        assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done


def out(*args: str, cwd: Path, stdin: str | None = None) -> dict:
    return json.loads(fr(*args, "--json", cwd=cwd, stdin=stdin).stdout)


def inproc(*args: str, cwd: Path, stdin: str = "", ok: bool = True) -> subprocess.CompletedProcess:
    """``fullrecall ARGS`` through :func:`fullrecall.cli.main.main` in this process, as :func:`fr` reports it.

    Each test runs its commands through the real entry point (:func:`fr`) at least once; repeats (an import
    run twice, a second search) and commands already proven there run here, without an interpreter's start.
    """
    import contextlib
    import io

    from fullrecall.cli.main import main

    here, stdin_was = os.getcwd(), sys.stdin
    os.chdir(cwd)
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(io.StringIO()) as printed, contextlib.redirect_stderr(io.StringIO()) as err:
            code = main(list(args))
    finally:
        os.chdir(here)
        sys.stdin = stdin_was
    if ok:
        assert code == 0, err.getvalue()
    return subprocess.CompletedProcess(list(args), code, printed.getvalue(), err.getvalue())


def again(*args: str, cwd: Path, stdin: str = "") -> dict:
    """``fullrecall ARGS --json`` in this process (see :func:`inproc`), its output parsed."""
    return json.loads(inproc(*args, "--json", cwd=cwd, stdin=stdin).stdout)


@pytest.fixture
def locomo_file(tmp_path: Path) -> Path:
    """A small LoCoMo file: two samples, their first two sessions, a photo turn kept."""
    samples = json.loads(LOCOMO.read_text()) if LOCOMO.exists() else None
    if samples is None:  # the shape the bench data has, when the data is not on this machine
        samples = [{"sample_id": f"conv-{n}", "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob", "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [{"speaker": "Ann" if i % 2 == 0 else "Bob", "dia_id": f"D1:{i + 1}", "text": f"turn {i}"}
                          for i in range(6)],
            "session_2_date_time": "3:00 pm on 9 May, 2023",
            "session_2": [{"speaker": "Bob", "dia_id": "D2:1", "text": "a photo", "img_url": ["x"],
                           "blip_caption": "a dog on a beach"}]}, "qa": []} for n in (1, 2)]
    small = []
    for s in samples[:2]:
        keep = ("speaker_a", "speaker_b", "session_1", "session_1_date_time", "session_2", "session_2_date_time")
        conv = {k: v for k, v in s["conversation"].items() if k in keep}
        conv["session_1"] = conv["session_1"][:12]
        small.append({"sample_id": s["sample_id"], "conversation": conv, "qa": []})
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(small))
    return path


def test_help_imports_nothing_heavy(tmp_path):
    code = ("import sys, io, contextlib\nfrom fullrecall.cli.main import main\n"
            "with contextlib.redirect_stdout(io.StringIO()) as o:\n"
            "    try: main(['--help'])\n    except SystemExit: pass\n"
            "heavy = {'numpy', 'onnxruntime', 'fastapi', 'uvicorn', 'httpx', 'strands', 'rich', 'tokenizers', 'mcp',"
            " 'torch', 'sqlite3', 'psycopg', 'redis', 'boto3'}\n"
            "print(sorted(heavy & set(sys.modules)))\nprint('chat' in o.getvalue() and 'import' in o.getvalue())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.stdout.split("\n")[:2] == ["[]", "True"], done.stderr


def test_locomo_import_is_idempotent_and_jsonl_round_trips_losslessly(tmp_path, locomo_file):
    a, b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    first = out("import", str(locomo_file), "--store", a, "--user", "ann", "--no-embed", cwd=tmp_path)
    turns = sum(len(v) for s in json.loads(locomo_file.read_text()) for k, v in s["conversation"].items()
                if k.startswith("session_") and not k.endswith("date_time"))
    assert first["format"] == "locomo" and first["conversations"] == 2 and first["written"] == first["messages"] == turns
    twice = again("import", str(locomo_file), "--store", a, "--user", "ann", "--no-embed", cwd=tmp_path)
    assert twice["written"] == 0 and twice["messages"] == turns
    assert out("stats", "--store", a, "--user", "ann", cwd=tmp_path)["message_count"] == turns

    exported = tmp_path / "a.jsonl"
    counts = out("export", str(exported), "--store", a, "--user", "ann", cwd=tmp_path)
    assert counts["messages"] == turns and counts["conversations"] == 2
    lines = exported.read_text().split("\n")
    assert json.loads(lines[0])["format"] == "fullrecall" and json.loads(lines[0])["version"] == 3
    imported = again("import", str(exported), "--store", b, "--no-embed", cwd=tmp_path)  # the owner from the file
    assert imported["format"] == "jsonl" and imported["written"] == turns
    assert again("import", str(exported), "--store", b, "--no-embed", cwd=tmp_path)["written"] == 0
    again("export", str(tmp_path / "b.jsonl"), "--store", b, "--user", "ann", cwd=tmp_path)
    back = (tmp_path / "b.jsonl").read_text().split("\n")
    assert [json.loads(x) for x in back[1:] if x] == [json.loads(x) for x in lines[1:] if x]  # every field, every message

    fr("export", str(tmp_path / "back.json"), "--format", "locomo", "--store", b, "--user", "ann", cwd=tmp_path)
    original = {s["sample_id"]: s["conversation"] for s in json.loads(locomo_file.read_text())}
    again_out = {s["sample_id"]: s["conversation"] for s in json.loads((tmp_path / "back.json").read_text())}
    for sid, conv in original.items():
        for key, value in conv.items():
            if key.startswith("session_") and not key.endswith("date_time"):
                assert again_out[sid][key] == value  # turns come back verbatim
                assert again_out[sid][f"{key}_date_time"] == conv[f"{key}_date_time"]


def test_openai_and_strands_formats(tmp_path):
    from strands.session.file_session_manager import FileSessionManager

    store = f"sqlite:///{tmp_path / 'm.db'}"
    transcript = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"},
                  {"role": "assistant", "content": "hi there"}, {"role": "user", "content": "my code is 4711"}]
    (tmp_path / "t.json").write_text(json.dumps(transcript))
    first = out("import", "t.json", "--store", store, "--no-embed", cwd=tmp_path)
    assert first == {"format": "openai", "conversations": 1, "messages": 4, "written": 4, "embedded": 0}
    assert again("import", "t.json", "--store", store, "--no-embed", cwd=tmp_path)["written"] == 0
    records = tmp_path / "records.jsonl"
    records.write_text("\n".join(json.dumps({"conversation_id": f"r{n}", "messages": transcript[n:]}) for n in (1, 2)))
    assert again("import", str(records), "--store", store, "--no-embed", cwd=tmp_path)["conversations"] == 2

    fr("export", "sessions", "--format", "strands", "--store", store, "--session", "t", cwd=tmp_path)
    manager = FileSessionManager(session_id="t", storage_dir=str(tmp_path / "sessions"))
    loaded = [m.message for m in manager.list_messages("t", "default")]
    assert [m["role"] for m in loaded] == ["user", "assistant", "user"] or len(loaded) == 4
    assert any(block.get("text") == "my code is 4711" for m in loaded for block in m["content"])

    other = f"sqlite:///{tmp_path / 'o.db'}"
    strands_in = again("import", "sessions", "--store", other, "--no-embed", cwd=tmp_path)
    assert strands_in["format"] == "strands" and strands_in["written"] == len(loaded)
    assert again("import", "sessions", "--store", other, "--no-embed", cwd=tmp_path)["written"] == 0
    exported = fr("export", "-", "--format", "openai", "--store", store, "--session", "t", cwd=tmp_path).stdout
    assert json.loads(exported) == {"conversation_id": "t", "messages": transcript}


def test_a_strands_export_of_tool_calls_loads_in_strands_and_imports_back(tmp_path):
    """An OpenAI tool result (role "tool") was exported to Strands with role "tool", which Converse has not: the
    folder could not be imported back (its shape read as OpenAI's) and Bedrock refuses the role.
    """
    from strands.session.file_session_manager import FileSessionManager

    store, other = f"sqlite:///{tmp_path / 'm.db'}", f"sqlite:///{tmp_path / 'o.db'}"
    call = {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
    transcript = [{"role": "user", "content": "weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                  {"role": "assistant", "content": "It is sunny."}]
    (tmp_path / "t.json").write_text(json.dumps(transcript))
    again("import", "t.json", "--store", store, "--no-embed", cwd=tmp_path)
    fr("export", "sessions", "--format", "strands", "--store", store, cwd=tmp_path)
    loaded = [m.message for m in FileSessionManager(session_id="t", storage_dir=str(tmp_path / "sessions"))
              .list_messages("t", "default")]
    assert [m["role"] for m in loaded] == ["user", "assistant", "user", "assistant"]
    assert loaded[2]["content"] == [{"toolResult": {"toolUseId": "call_1", "status": "success",
                                                    "content": [{"text": "sunny"}]}}]
    assert again("import", "sessions", "--store", other, "--no-embed", cwd=tmp_path)["written"] == 4
    back = json.loads(fr("export", "-", "--format", "openai", "--store", other, cwd=tmp_path).stdout)
    assert [m["role"] for m in back["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert back["messages"][2]["tool_call_id"] == "call_1" and back["messages"][2]["content"] == "sunny"


def test_an_import_of_a_file_without_messages_says_so(tmp_path):
    """An empty file (or an empty list) read as 'all were there already', and the list listed an empty conversation
    the store never held: a failed export piped into an import looked like a repeated one.
    """
    store = f"sqlite:///{tmp_path / 'm.db'}"
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "list.json").write_text("[]")
    done = fr("import", "empty.jsonl", "--store", store, "--no-embed", cwd=tmp_path)
    assert "holds no message" in done.stdout and "there already" not in done.stdout
    for name in ("list.json", "empty.jsonl"):
        printed = inproc("import", name, "--store", store, "--no-embed", cwd=tmp_path).stdout
        assert "holds no message" in printed and "there already" not in printed, printed
        assert again("import", name, "--store", store, "--no-embed", cwd=tmp_path)["conversations"] == 0
    assert again("stats", "--store", store, cwd=tmp_path).get("listed_conversations", 0) == 0
    (tmp_path / "t.json").write_text(json.dumps([{"role": "user", "content": "hello"}]))
    again("import", "t.json", "--store", store, "--no-embed", cwd=tmp_path)
    assert "all were there already" in inproc("import", "t.json", "--store", store, "--no-embed", cwd=tmp_path).stdout


def test_a_reading_command_on_a_store_file_that_does_not_exist_says_so(tmp_path):
    """A typo in --store (or a command run in the wrong folder) made a new empty database there and answered
    'no hits' or zero messages, as if the store were empty.
    """
    missing = f"sqlite:///{tmp_path / 'typo.db'}"
    done = fr("search", "hello", "--store", missing, cwd=tmp_path, ok=False)
    assert done.returncode == 1 and "typo.db" in done.stderr and "does not exist" in done.stderr, done.stderr
    for args in (("stats",), ("inspect", "c"), ("export", "out.jsonl"), ("forget", "--user", "ann", "--yes")):
        done = inproc(*args, "--store", missing, cwd=tmp_path, ok=False)
        assert done.returncode == 1 and "does not exist" in done.stderr, (args, done.stderr)
    assert not (tmp_path / "typo.db").exists() and not (tmp_path / "out.jsonl").exists()
    (tmp_path / "t.json").write_text(json.dumps([{"role": "user", "content": "hello"}]))
    again("import", "t.json", "--store", missing, "--no-embed", cwd=tmp_path)  # an import makes the store
    assert again("stats", "--store", missing, cwd=tmp_path)["message_count"] == 1
    assert inproc("stats", "--store", "sqlite:///:memory:", cwd=tmp_path).returncode == 0


def test_a_file_the_command_cannot_read_or_write_is_named_as_given(tmp_path):
    """An export into a folder that does not exist named the file it writes aside ('out.jsonl.partial'), and an
    import of a file that is no text (a database given by mistake) was "'utf-8' codec can't decode byte 0xff in
    position 1", naming no file."""
    store = f"sqlite:///{tmp_path / 'm.db'}"
    (tmp_path / "t.json").write_text(json.dumps([{"role": "user", "content": "hello"}]))
    again("import", "t.json", "--store", store, "--no-embed", cwd=tmp_path)
    done = fr("export", "no/out.jsonl", "--store", store, cwd=tmp_path, ok=False)
    assert done.returncode == 1 and done.stderr == "error: [Errno 2] No such file or directory: 'no/out.jsonl'\n"
    (tmp_path / "binary.db").write_bytes(b"[\xff\xfe" + bytes(range(256)))
    for fmt in ("auto", "jsonl", "openai", "locomo", "memory"):
        done = inproc("import", "binary.db", "--format", fmt, "--store", store, cwd=tmp_path, ok=False)
        assert done.returncode == 2, (fmt, done.stderr)
        assert done.stderr == "error: binary.db: not UTF-8 text (a byte 0xff)\n", (fmt, done.stderr)
    assert again("stats", "--store", store, cwd=tmp_path)["message_count"] == 1


def test_an_import_of_json_nested_past_any_parser_is_one_line_of_error(tmp_path):
    """A file nested a hundred thousand deep (a transcript or a line of one) ended the import in a RecursionError
    traceback; it is refused in one line, as any invalid JSON is (exit code 2), and nothing is written."""
    store = f"sqlite:///{tmp_path / 'm.db'}"
    deep = "[" * 100_000 + "]" * 100_000
    (tmp_path / "deep.json").write_text(json.dumps([{"role": "user", "content": "hi"}])[:-1] + ", " + deep + "]")
    (tmp_path / "deep.jsonl").write_text(json.dumps({"format": "fullrecall", "version": 3}) + "\n" + deep + "\n")
    memory = {"kind": "header", "format": "fullrecall.memory", "version": 2}
    (tmp_path / "memory.jsonl").write_text(json.dumps(memory) + "\n" + deep + "\n")
    for name, fmt in [("deep.json", "auto"), ("deep.json", "openai"), ("deep.json", "locomo"),
                      ("deep.jsonl", "jsonl"), ("memory.jsonl", "memory")]:
        done = inproc("import", name, "--format", fmt, "--store", store, cwd=tmp_path, ok=False)
        lines = done.stderr.splitlines()
        assert done.returncode == 2 and len(lines) == 1 and "nested too deep" in lines[0], (fmt, done)
    assert not (tmp_path / "m.db").exists()  # nothing written: not even an empty store


def test_stats_of_a_conversation_that_does_not_exist_says_so(tmp_path):
    """``stats --session nope`` printed zeros, where ``export`` and ``inspect`` say the conversation is not found."""
    store = f"sqlite:///{tmp_path / 'm.db'}"
    (tmp_path / "t.json").write_text(json.dumps([{"role": "user", "content": "hello"}]))
    again("import", "t.json", "--store", store, "--user", "ann", "--no-embed", cwd=tmp_path)
    assert again("stats", "--store", store, "--user", "ann", "--session", "t", cwd=tmp_path)["message_count"] == 1
    for who in (("--user", "ann"), ("--user", "bob")):
        done = inproc("stats", "--store", store, *who, "--session", "nope", cwd=tmp_path, ok=False)
        assert done.returncode == 1 and "conversation 'nope' not found" in done.stderr, done.stderr
    done = inproc("stats", "--store", store, "--user", "bob", "--session", "t", cwd=tmp_path, ok=False)
    assert done.returncode == 1 and "user 'bob'" in done.stderr  # another owner's conversation is not found either
    assert again("stats", "--store", store, "--user", "bob", cwd=tmp_path)["message_count"] == 0  # an owner: zeros


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path):
    """``fullrecall export - | head`` printed 'error: [Errno 32] Broken pipe' (and exit 1) once head had its lines."""
    store = f"sqlite:///{tmp_path / 'm.db'}"
    (tmp_path / "t.json").write_text(json.dumps([{"role": "user", "content": f"message {i} " + "x" * 200}
                                                 for i in range(2000)]))
    again("import", "t.json", "--store", store, "--no-embed", cwd=tmp_path)
    reader = subprocess.Popen([sys.executable, "-m", "fullrecall", "export", "-", "--store", store], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert reader.stdout is not None and reader.stderr is not None
    assert json.loads(reader.stdout.readline())["format"] == "fullrecall"
    reader.stdout.close()  # as head does once it has its lines
    err = reader.stderr.read().decode()
    assert reader.wait(timeout=120) == 141 and err == "", err


def test_everyone_with_a_user_or_agent_is_refused(tmp_path):
    """``search --everyone --user ann`` searched every user (and stats counted everyone's) while the command named
    one: what a script asking about ann got was everyone's.
    """
    store = f"sqlite:///{tmp_path / 'm.db'}"
    (tmp_path / "t.json").write_text(json.dumps([{"role": "user", "content": "hello"}]))
    again("import", "t.json", "--store", store, "--no-embed", cwd=tmp_path)
    for args in (("search", "hello", "--everyone", "--user", "ann"), ("stats", "--everyone", "--agent", "bot")):
        done = inproc(*args, "--store", store, cwd=tmp_path, ok=False)
        assert done.returncode == 2 and "--everyone" in done.stderr and done.stdout == "", done
    assert again("search", "hello", "--everyone", "--store", store, cwd=tmp_path)["hits"]


def test_inspect_refuses_a_negative_limit(tmp_path):
    """``inspect --limit -3`` showed no window message and said all of them were earlier ones."""
    store = f"sqlite:///{tmp_path / 'm.db'}"
    (tmp_path / "t.json").write_text(json.dumps([{"role": "user", "content": "hello"}]))
    again("import", "t.json", "--store", store, "--no-embed", cwd=tmp_path)
    done = inproc("inspect", "t", "--store", store, "--limit", "-3", cwd=tmp_path, ok=False)
    assert done.returncode == 2 and "--limit" in done.stderr and done.stdout == "", done
    assert "hello" in inproc("inspect", "t", "--store", store, "--limit", "1", cwd=tmp_path).stdout


def test_bad_input_is_named_and_nothing_is_written(tmp_path):
    store = f"sqlite:///{tmp_path / 'm.db'}"
    (tmp_path / "bad.json").write_text(json.dumps([{"role": "user", "content": "fine"}, {"content": "no role"}]))
    done = fr("import", "bad.json", "--store", store, "--no-embed", cwd=tmp_path, ok=False)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and "message 1" in done.stderr
    assert not (tmp_path / "m.db").exists()  # nothing written: not even an empty store
    header = json.dumps({"format": "fullrecall", "version": 99})
    (tmp_path / "new.jsonl").write_text(header + "\n")
    done = inproc("import", "new.jsonl", "--store", store, cwd=tmp_path, ok=False)
    assert done.returncode == 2 and "version 99" in done.stderr
    (tmp_path / "cut.jsonl").write_text(json.dumps({"format": "fullrecall", "version": 3}) + "\n")  # no end line
    done = inproc("import", "cut.jsonl", "--store", store, cwd=tmp_path, ok=False)
    assert done.returncode == 2 and "file 'cut.jsonl' is cut short" in done.stderr
    for scalar in ('"hello"', "42", "null"):  # JSON, but no transcript
        (tmp_path / "scalar.json").write_text(scalar)
        done = inproc("import", "scalar.json", "--store", store, cwd=tmp_path, ok=False)
        assert done.returncode == 2 and "expected a list of messages" in done.stderr, scalar
    assert not (tmp_path / "m.db").exists()
    (tmp_path / "t.json").write_text(json.dumps([{"role": "user", "content": "hello"}]))
    again("import", "t.json", "--store", store, "--no-embed", cwd=tmp_path)  # a store, without that conversation
    missing = inproc("inspect", "nope", "--store", store, cwd=tmp_path, ok=False)
    assert missing.returncode == 1 and "conversation 'nope' not found" in missing.stderr
    empty = fr("search", " ", "--store", store, cwd=tmp_path, ok=False)
    assert empty.returncode == 2 and "query is empty" in empty.stderr


def test_an_unreachable_store_is_one_line_of_error(tmp_path):
    for url in ("postgresql://nobody@127.0.0.1:1/none", "redis://127.0.0.1:1/0"):
        done = inproc("stats", "--store", url, cwd=tmp_path, ok=False)
        assert done.returncode == 1 and done.stderr.startswith("error: ") and done.stdout == "", done.stderr
        assert done.stderr.count("\n") == 1 and "127.0.0.1" in done.stderr, done.stderr


def test_chat_with_a_bad_base_url_is_refused_at_once(tmp_path):
    done = inproc("chat", "--model", "gpt-x", "--base-url", "localhost:8000/v1", "--store",
                  f"sqlite:///{tmp_path / 'm.db'}", cwd=tmp_path, stdin="hi\n", ok=False)
    assert done.returncode == 2 and done.stderr.startswith("error: base_url must be an http"), done.stderr
    assert done.stderr.count("\n") == 1  # no retries were logged: nothing was sent


def test_chat_scripted_recalls_and_summarizes_then_inspect_search_forget(tmp_path):
    store = f"sqlite:///{tmp_path / 'm.db'}"
    said = ["My locker code is 4711.", "I like hiking in the Alps.", "What is the weather like?", "Tell me a joke.",
            "What should I cook tonight?", "What is my locker code?"]
    done = fr("chat", "--model", "scripted", "--store", store, "--user", "ann", "--session", "s1", "--max-turns", "4",
              "--json", cwd=tmp_path, stdin="\n".join(said) + "\n")
    turns = [json.loads(x) for x in done.stdout.split("\n") if x]
    assert [t["user"] for t in turns] == said and all(t["answer"].startswith("(scripted") for t in turns)
    assert any(t["summarized"] for t in turns)
    last = turns[-1]["recalled"]
    assert any("4711" in r["text"] and r["score"] is not None for r in last)  # the code left the window, came back
    text = inproc("chat", "--model", "scripted", "--store", store, "--user", "ann", "--session", "s1", cwd=tmp_path,
                  stdin="Which code did I give you?\n/quit\n").stdout
    assert "assistant> (scripted" in text and "recalled" in text and "4711" in text

    report = out("inspect", "s1", "--store", store, "--user", "ann", cwd=tmp_path)
    assert report["messages"] == 14 and report["window"]["managed"] and report["window"]["archived"] > 0
    assert report["archive"]["span"][0] == 0 and len(report["window"]["items"]) == report["window"]["messages"]

    found = out("search", "locker code", "--store", store, "--user", "ann", "--radius", "1", "--top-k", "2",
                cwd=tmp_path)
    top = found["hits"][0]
    assert "4711" in json.dumps(top["message"]) and {"dense", "lexical", "fused"} <= set(top["scores"])
    assert top["range"]["start"] <= top["position"] <= top["range"]["end"] and top["range"]["messages"]
    assert again("search", "locker code", "--store", store, "--user", "bob", cwd=tmp_path)["hits"] == []

    refused = inproc("forget", "--user", "ann", "--store", store, cwd=tmp_path, stdin="n\n", ok=False)
    assert refused.returncode == 1 and "nothing forgotten" in refused.stderr
    gone = out("forget", "--user", "ann", "--store", store, cwd=tmp_path, stdin="y\n")
    assert gone["messages"] == 14 and "remaining" in gone  # all 14 were still there after the refusal
    assert again("stats", "--store", store, "--user", "ann", cwd=tmp_path)["message_count"] == 0


def test_chat_against_an_openai_compatible_server(tmp_path):
    server = ScriptedServer()
    try:
        server.script(completion("Noted: 4711."), completion("Sure."), completion("Sure."), completion("It is 4711."))
        said = ["My locker code is 4711.", "Let us talk about tea.", "Green or black?", "What is my locker code?"]
        done = fr("chat", "--provider", "openai", "--model", "gpt-test", "--base-url", server.base_url, "--api-key",
                  "k", "--store", f"sqlite:///{tmp_path / 'm.db'}", "--max-turns", "3", "--json", cwd=tmp_path,
                  stdin="\n".join(said) + "\n")
        answers = [json.loads(x)["answer"] for x in done.stdout.split("\n") if x]
        assert answers == ["Noted: 4711.", "Sure.", "Sure.", "It is 4711."]
        assert server.requests[0]["model"] == "gpt-test" and server.headers[0]["authorization"] == "Bearer k"
        assert server.requests[-1]["messages"][-1]["content"].endswith("What is my locker code?")
        assert "4711" in json.dumps(server.requests[-1]["messages"])
        server.script(Reply(status=401, body=b'{"error": {"message": "bad key"}}'))
        failing = inproc("chat", "--provider", "openai", "--model", "m", "--base-url", server.base_url, "--store",
                         f"sqlite:///{tmp_path / 'm.db'}", cwd=tmp_path, stdin="hello\n", ok=False)
        assert failing.returncode == 1 and failing.stderr.startswith("error: ") and "401" in failing.stderr
    finally:
        server.close()


def test_chat_with_bedrock(tmp_path, monkeypatch):
    from bedrock_peer import ConverseServer, answer, error

    server = ConverseServer()
    aws = {"AWS_ENDPOINT_URL_BEDROCK_RUNTIME": server.url, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY":
           "test", "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/dev/null",
           "AWS_SHARED_CREDENTIALS_FILE": "/dev/null"}
    model = "us.amazon.nova-lite-v1:0"
    try:
        server.script(answer("Noted: 4711."), answer("Sure."), answer("Sure."), answer("It is 4711."))
        said = ["My locker code is 4711.", "Let us talk about tea.", "Green or black?", "What is my locker code?"]
        done = fr("chat", "--provider", "bedrock", "--model", model, "--region", "eu-west-3", "--store",
                  f"sqlite:///{tmp_path / 'm.db'}", "--max-turns", "3", "--json", cwd=tmp_path,
                  stdin="\n".join(said) + "\n", path=str(Path(__file__).parent), env=aws)
        turns = [json.loads(x) for x in done.stdout.split("\n") if x]
        assert [t["answer"] for t in turns] == ["Noted: 4711.", "Sure.", "Sure.", "It is 4711."]
        assert any("4711" in r["text"] for r in turns[-1]["recalled"])  # the code left the window, came back
        first, last = server.requests[0], server.requests[-1]
        assert first["path"] == f"/model/{model}/converse"
        assert first["headers"]["authorization"].startswith("AWS4-HMAC-SHA256 Credential=test/")
        assert "/eu-west-3/bedrock/aws4_request" in first["headers"]["authorization"]
        assert first["body"]["messages"] == [{"role": "user", "content": [{"text": said[0]}]}]
        assert last["body"]["messages"][-1]["content"][0]["text"].endswith(said[-1])
        assert "4711" in json.dumps(last["body"])  # recalled: the first turn is no longer in the window

        server.script(error("ValidationException", "The provided model identifier is invalid."))
        for k, v in aws.items():
            monkeypatch.setenv(k, v)
        failing = inproc("chat", "--provider", "bedrock", "--model", "nope", "--region", "eu-west-3", "--store",
                         f"sqlite:///{tmp_path / 'm.db'}", cwd=tmp_path, stdin="hello\n", ok=False)
        assert failing.returncode == 1 and failing.stderr.startswith("error: ")
        assert "ValidationException" in failing.stderr and "model identifier is invalid" in failing.stderr
    finally:
        server.close()


def test_chat_with_a_strands_model(tmp_path):
    said = ["The boat is called Aurora.", "Nice weather.", "Any plans?", "What is the boat called?"]
    done = fr("chat", "--provider", "strands", "--model", "strands_peer:model", "--store",
              f"sqlite:///{tmp_path / 'm.db'}", "--max-turns", "3", "--json", cwd=tmp_path,
              stdin="\n".join(said) + "\n", path=str(Path(__file__).parent))
    turns = [json.loads(x) for x in done.stdout.split("\n") if x]
    assert [t["model"] for t in turns] == ["strands:EchoModel"] * 4
    assert turns[0]["answer"] == "strands heard: The boat is called Aurora."
    assert turns[-1]["answer"].endswith("What is the boat called?") and "Aurora" in turns[-1]["answer"]  # recalled
    wrong = fr("chat", "--provider", "strands", "--model", "no_colon", cwd=tmp_path, stdin="", ok=False)
    assert wrong.returncode == 2 and "package.module:name" in wrong.stderr


def test_chat_refuses_an_answer_budget_of_no_tokens(tmp_path):
    """--max-answer-tokens 0 (or -5) was sent to the model with the first message, after that message was stored:
    a provider refuses it, and the conversation kept a question with no answer. It is refused at once now."""
    store = f"sqlite:///{tmp_path / 'm.db'}"
    for budget in ("0", "-5"):
        done = inproc("chat", "--model", "scripted", "--max-answer-tokens", budget, "--store", store, cwd=tmp_path,
                      stdin="hi\n", ok=False)
        assert done.returncode == 2 and done.stderr == "error: --max-answer-tokens must be at least 1\n", done.stderr
    assert not (tmp_path / "m.db").exists()


def test_chat_refuses_a_system_prompt_no_request_may_carry_before_storing_anything(tmp_path):
    """A --system holding a lone surrogate (bytes of no UTF-8 in argv) was refused by the first request, after the
    user's line was stored: the conversation kept a question with no answer. It is refused at once now."""
    done = inproc("chat", "--model", "scripted", "--system", "be \udcff brief", "--store",
                  f"sqlite:///{tmp_path / 'm.db'}", cwd=tmp_path, stdin="hi\n", ok=False)
    assert done.returncode == 2 and "'system' is not valid Unicode" in done.stderr, done.stderr
    assert not (tmp_path / "m.db").exists()


def test_a_strands_model_option_that_names_no_model_is_one_line_of_error(tmp_path):
    """A --model naming no Strands model (a module, a misspelt name) ended the chat in a traceback; a module that
    does not exist was 'error: No module named ...' with exit code 1, not naming --model."""
    store = f"sqlite:///{tmp_path / 'm.db'}"
    for target, why in [("os:path", "not a Strands Model or Agent (a module)"),
                        ("os:getcwd", "not a Strands Model or Agent (a str)"),
                        ("os:no_such_model", "module 'os' has no 'no_such_model'"),
                        ("json:dumps", "calling 'dumps' failed (TypeError: dumps() missing 1 required positional "
                                       "argument: 'obj')"),  # a function that makes no model: it raised
                        ("no_such_package.models:model", "no module named 'no_such_package'")]:
        done = fr("chat", "--provider", "strands", "--model", target, "--store", store, cwd=tmp_path, stdin="hi\n",
                  ok=False) if target == "os:path" else inproc("chat", "--provider", "strands", "--model", target,
                                                               "--store", store, cwd=tmp_path, stdin="hi\n", ok=False)
        assert done.returncode == 2 and done.stderr == f"error: --model {target!r}: {why}\n", done.stderr
    assert not (tmp_path / "m.db").exists()  # refused before the store was opened


def test_keys_through_the_command(tmp_path):
    store = f"sqlite:///{tmp_path / 'k.db'}"
    made = out("keys", "create", "--tenant", "acme", "--users", "ann", "--store", store, cwd=tmp_path)
    assert made["tenant"] == "acme" and made["users"] == ["ann"]
    assert [k["id"] for k in again("keys", "list", "--store", store, cwd=tmp_path)] == [made["id"]]
    assert again("keys", "revoke", made["id"], "--store", store, cwd=tmp_path) == {"revoked": made["id"]}
    assert fr("keys", "revoke", "nope", "--store", store, cwd=tmp_path, ok=False).returncode == 1


def test_jsonl_round_trip_on_every_backend(tmp_path, store_url):
    import io

    from fullrecall.stores import open_store
    from fullrecall.stores.base import Scope
    from fullrecall.transfer import jsonl, openai

    source = open_store("sqlite:///:memory:")
    transcript = [{"role": "user", "content": f"message {i} ünïcode\u2028"} for i in range(5)]
    openai.import_openai(source, Scope(user_id="u", session_id="t"), io.StringIO(json.dumps(transcript)))
    source.put_state(Scope(user_id="u", session_id="t"), "summaries", {"items": [{"id": "s", "covers": [0, 1]}]})
    with open(tmp_path / "a.jsonl", "w", encoding="utf-8") as fp:
        jsonl.export_jsonl(source, Scope(user_id="u"), fp)
    assert again("import", "a.jsonl", "--store", store_url, "--no-embed", cwd=tmp_path)["written"] == 5
    assert again("import", "a.jsonl", "--store", store_url, "--no-embed", cwd=tmp_path)["written"] == 0
    inproc("export", "b.jsonl", "--store", store_url, "--user", "u", cwd=tmp_path)
    a, b = ((tmp_path / n).read_text(encoding="utf-8").split("\n")[1:] for n in ("a.jsonl", "b.jsonl"))
    assert [json.loads(x) for x in a if x] == [json.loads(x) for x in b if x]


def test_forget_one_conversation_unlists_it_for_every_agent(tmp_path, store_url):
    """``forget --session S`` without ``--agent`` forgets every agent's S, and its place in their conversation lists."""
    (tmp_path / "s.json").write_text(json.dumps([{"role": "user", "content": "my pin is 0042"},
                                                 {"role": "assistant", "content": "noted"}]))
    again("import", "s.json", "--store", store_url, "--user", "ann", "--agent", "bot", "--no-embed", cwd=tmp_path)
    gone = again("forget", "--user", "ann", "--session", "s", "--yes", "--store", store_url, cwd=tmp_path)
    assert gone["messages"] == 2
    left = again("stats", "--store", store_url, "--user", "ann", "--agent", "bot", cwd=tmp_path)
    assert left["message_count"] == 0 and left["record_count"] == 0 and left["listed_conversations"] == 0


def test_forget_one_conversation_leaves_no_session_name_in_long_term_memory(tmp_path, store_url, default_embedder):
    """``forget --session S`` took S's messages but left S in long-term memory's session list (and its change
    log): every agent's list, a memory holding the list already and a new one no longer name it."""
    import asyncio
    from dataclasses import replace

    from fullrecall import PersistentMemory
    from fullrecall.stores import open_store

    secret = "s-divorce-lawyer"
    store = open_store(store_url)
    try:
        mems = {(agent, s): PersistentMemory("ann", agent, s, store=store, embedder=default_embedder)
                for agent in ("bot", "aide") for s in (secret, "other")}
        for (agent, s), mem in mems.items():
            asyncio.run(mem.record([{"role": "user", "content": f"note for {agent} in {s}"}]))
        live = mems[("bot", "other")]
        assert live.sessions() == [secret, "other"]  # cached by this memory
        gone = again("forget", "--user", "ann", "--session", secret, "--yes", "--store", store_url, cwd=tmp_path)
        assert gone["messages"] == 2
        for agent in ("bot", "aide"):
            fresh = PersistentMemory("ann", agent, store=store, embedder=default_embedder)
            assert fresh.sessions() == ["other"]
            assert [m.data["content"] for m in fresh.messages()] == [f"note for {agent} in other"]
            kept = [m for s in ("_log.sessions", "other") for m in store.range(replace(fresh.owner, session_id=s), 0,
                                                                                 10**9)]
            assert kept and secret not in json.dumps([[m.text, m.data] for m in kept])
        assert live.sessions() == ["other"] and live.stats()["session_count"] == 1
        listed = again("stats", "--store", store_url, "--user", "ann", "--agent", "bot", cwd=tmp_path)
        assert listed["listed_conversations"] == 1
        asyncio.run(mems[("bot", secret)].record([{"role": "user", "content": "a new start"}]))  # listed again
        assert live.sessions() == ["other", secret]
    finally:
        store.close()


def test_export_takes_every_conversation_of_the_owner_listed_or_not(tmp_path, store_url):
    """A conversation written through the library alone (a ConversationMemory's) was left out of an owner's export."""
    from fullrecall.stores import Scope, StoredMessage, open_store

    (tmp_path / "t.json").write_text(json.dumps([{"role": "user", "content": "imported"}]))
    again("import", "t.json", "--store", store_url, "--user", "ann", "--no-embed", cwd=tmp_path)
    store = open_store(store_url)
    try:
        said = StoredMessage(id="x", role="user", text="library", data={"role": "user", "content": "library"})
        store.append(Scope(user_id="ann", session_id="lib"), [said])
        store.append(Scope(user_id="bob", session_id="lib"), [said])  # another owner's
        store.put_state(Scope(user_id="ann", session_id="state-only"), "window", {"n": 1})
    finally:
        store.close()
    done = again("export", "all.jsonl", "--store", store_url, "--user", "ann", cwd=tmp_path)
    assert (done["conversations"], done["messages"], done["unlisted_conversations"]) == (2, 2, 1)
    lines = [json.loads(x) for x in (tmp_path / "all.jsonl").read_text(encoding="utf-8").split("\n")[1:] if x]
    assert sorted(x["conversation_id"] for x in lines if x["type"] == "message") == ["lib", "t"]


def test_strands_export_never_writes_outside_its_folder(tmp_path):
    """A conversation id is any string; one with '../' must not make the strands export write elsewhere."""
    store = f"sqlite:///{tmp_path / 'm.db'}"
    (tmp_path / "t.json").write_text(json.dumps([{"role": "user", "content": "hello"}]))
    for session in ("fine", "x/../../../escaped"):
        again("import", "t.json", "--store", store, "--session", session, "--no-embed", cwd=tmp_path)
    (tmp_path / "out" / "sessions").mkdir(parents=True)
    done = fr("export", "out/sessions", "--format", "strands", "--store", store, cwd=tmp_path, ok=False)
    assert done.returncode == 2 and "conversation 'x/../../../escaped' cannot name a Strands session folder" in done.stderr
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "out" / "escaped").exists()
    assert list((tmp_path / "out" / "sessions").iterdir()) == []  # refused before anything was written
    assert again("export", "out/sessions", "--format", "strands", "--store", store, "--session", "fine",
                 cwd=tmp_path)["messages"] == 1


def test_an_empty_session_option_is_refused_not_read_as_every_conversation(tmp_path):
    """``forget --session "$S"`` with S empty forgot every conversation of the user (an empty session is "all")."""
    store = f"sqlite:///{tmp_path / 'm.db'}"
    (tmp_path / "keep.json").write_text(json.dumps([{"role": "user", "content": "keep me"}]))
    again("import", "keep.json", "--store", store, "--user", "ann", "--no-embed", cwd=tmp_path)
    done = fr("forget", "--user", "ann", "--session", "", "--yes", "--store", store, cwd=tmp_path, ok=False)
    assert done.returncode == 2 and "--session is empty" in done.stderr
    for command in (("stats",), ("export", "-"), ("search", "keep")):
        refused = inproc(*command, "--session", "", "--store", store, "--user", "ann", cwd=tmp_path, ok=False)
        assert refused.returncode == 2 and "--session is empty" in refused.stderr
    assert again("stats", "--store", store, "--user", "ann", cwd=tmp_path)["message_count"] == 1
    # inspect takes the conversation as its argument: an empty one named an option it has not ("--session")
    refused = inproc("inspect", "", "--store", store, "--user", "ann", cwd=tmp_path, ok=False)
    assert refused.returncode == 2 and refused.stderr == "error: inspect: the conversation id is empty\n"


def test_keys_create_with_an_empty_limit_is_refused_not_made_for_anyone(tmp_path):
    """``keys create --users "$U"`` with U empty made a key for every user of the tenant."""
    store = f"sqlite:///{tmp_path / 'm.db'}"
    for option in ("--users", "--agents"):
        done = fr("keys", "create", "--tenant", "acme", option, "", "--store", store, cwd=tmp_path, ok=False)
        assert done.returncode == 2 and "limits the key to no one" in done.stderr
    assert again("keys", "list", "--store", store, cwd=tmp_path) == []


def test_inspect_finds_the_first_and_last_messages_across_gaps(tmp_path):
    """``inspect`` took position 0 for the first message (gone once deleted: no first position, no first date)."""
    from fullrecall.stores import Scope, open_store

    store = f"sqlite:///{tmp_path / 'm.db'}"
    (tmp_path / "g.json").write_text(json.dumps([{"role": "user", "content": f"turn {i}", "id": f"m{i}"}
                                                for i in range(6)]))
    again("import", "g.json", "--store", store, "--no-embed", cwd=tmp_path)
    opened = open_store(store)
    opened.delete(Scope(session_id="g"), ["m0", "m1", "m5"])
    opened.close()
    report = out("inspect", "g", "--store", store, cwd=tmp_path)
    assert report["messages"] == 3 and report["positions"] == [2, 4]
    assert report["first_at"] is not None and report["last_message"]["id"] == "m4"


def test_chat_and_inspect_keep_to_their_tenant(tmp_path):
    """``chat --tenant`` wrote the conversation to the default tenant, and ``inspect --tenant`` showed the window
    and summaries of the default tenant's conversation of that name.
    """
    store = f"sqlite:///{tmp_path / 'm.db'}"
    turns = fr("chat", "--model", "scripted", "--store", store, "--tenant", "acme", "--session", "s", "--json",
               cwd=tmp_path, stdin="my acme code is 42\n").stdout
    assert json.loads(turns.split("\n")[0])["window"] == 2
    assert again("stats", "--store", store, "--tenant", "acme", cwd=tmp_path)["message_count"] == 2
    assert again("stats", "--store", store, cwd=tmp_path)["message_count"] == 0
    inproc("chat", "--model", "scripted", "--store", store, "--session", "s", cwd=tmp_path, stdin="default's own\n")
    report = again("inspect", "s", "--store", store, "--tenant", "acme", cwd=tmp_path)
    assert report["tenant"] == "acme" and report["messages"] == 2
    assert "acme code" in json.dumps(report["window"]["items"]) and "default's own" not in json.dumps(report)


def test_import_reads_files_that_start_with_a_byte_order_mark(tmp_path):
    """Windows tools often write UTF-8 with a BOM: every such file was "not valid JSON (Unexpected UTF-8 BOM)"."""
    store = f"sqlite:///{tmp_path / 'm.db'}"
    bom = "\ufeff"
    (tmp_path / "t.json").write_text(bom + json.dumps([{"role": "user", "content": "héllo"}]), encoding="utf-8")
    assert again("import", "t.json", "--store", store, "--no-embed", cwd=tmp_path)["written"] == 1
    inproc("export", "t.jsonl", "--store", store, "--session", "t", cwd=tmp_path)
    (tmp_path / "b.jsonl").write_text(bom + (tmp_path / "t.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    done = again("import", "b.jsonl", "--store", store, "--session", "copy", "--no-embed", cwd=tmp_path)
    assert done["format"] == "jsonl" and done["written"] == 1


def test_a_long_term_memorys_export_imports_into_another_owners_memory(tmp_path, default_embedder):
    """A file of ``PersistentMemory.export_jsonl`` (its header names the format ``fullrecall.memory``) was taken
    for an OpenAI transcript and refused ("'messages' must be a list"); it is now read into a memory."""
    import asyncio

    from fullrecall import PersistentMemory

    source = PersistentMemory(user_id="ann", agent_id="bot", session_id="s1", store=f"sqlite:///{tmp_path}/a.db",
                              embedder=default_embedder)
    asyncio.run(source.record([{"role": "user", "content": "My city is Lyon."},
                               {"role": "assistant", "content": "Noted, Lyon."}]))
    source.export_jsonl(tmp_path / "ann.jsonl")
    source.close()
    store = f"sqlite:///{tmp_path}/b.db"
    done = json.loads(fr("import", "ann.jsonl", "--store", store, "--user", "bea", "--json", cwd=tmp_path).stdout)
    assert done == {"format": "memory", "messages": 2, "written": 2, "facts": 1, "facts_written": 1}
    assert again("import", "ann.jsonl", "--store", store, "--user", "bea", cwd=tmp_path)["written"] == 0
    bea = PersistentMemory(user_id="bea", store=store, embedder=default_embedder)
    assert [m.data["content"] for m in bea.messages()] == ["My city is Lyon.", "Noted, Lyon."]
    assert [f.value for f in bea.facts.current()] == ["Lyon"]
    bea.close()
    refused = inproc("import", "ann.jsonl", "--store", store, "--no-embed", cwd=tmp_path, ok=False)
    assert refused.returncode == 2 and "--no-embed" in refused.stderr


def test_forget_counts_what_the_user_stored_by_its_name(tmp_path, store_url, default_embedder):
    """``forget`` counted the archive's summaries, facts and patterns as "records" (its "summaries" said 0), and
    long-term memory's change logs as messages and sessions. Now each kind is named, on every backend, the same in
    the CLI's report, ``PersistentMemory.clear()`` and the store's ``forget``."""
    import asyncio

    from fullrecall import PersistentMemory, SyncConversationMemory
    from fullrecall.memory.procedural import ProceduralMemory
    from fullrecall.stores import open_store

    def fill(store) -> None:
        chat = SyncConversationMemory(store, "chat", user_id="ann", summarizer=lambda m, p: "Earlier: a chat.",
                                      max_history_turns=2, preserve_recent_messages=2, embedding_model=default_embedder)
        for i in range(5):
            chat.add([{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}])
        assert len(chat.manager.archive.summaries()) == 3
        memory = PersistentMemory("ann", "", "notes", store=store, embedder=default_embedder)
        asyncio.run(memory.record([{"role": "user", "content": "I live in Oslo."}]))  # a fact learned from it
        ProceduralMemory(store, user_id="ann", embedder=default_embedder).store_pattern("book a flight", ["search"],
                                                                                        0.9, 100.0)

    store = open_store(store_url)
    try:
        fill(store)
        done = again("forget", "--user", "ann", "--yes", "--store", store_url, cwd=tmp_path)
        kinds = {k: done[k] for k in ("messages", "summaries", "facts", "patterns", "sessions")}
        assert kinds == {"messages": 11, "summaries": 3, "facts": 1, "patterns": 1, "sessions": 2}
        assert done["records"] >= 1  # the session list and long-term memory's change logs: bookkeeping
        text = inproc("forget", "--user", "ann", "--yes", "--store", store_url, cwd=tmp_path).stdout
        assert "0 summaries" in text and "0 facts" in text and "0 patterns" in text
        fill(store)
        cleared = PersistentMemory("ann", "", store=store, embedder=default_embedder).clear()
        assert {k: cleared[k] for k in kinds} == kinds and cleared["records"] == done["records"]
    finally:
        store.close()


def _ann_remembers(store_url: str, embedder, pattern: bool = False) -> None:
    """User ann's memory: a conversation of 2 messages, a long-term session with a stated fact (and its change
    logs), a remembered fact, and with ``pattern`` a procedure."""
    import asyncio

    from fullrecall import PersistentMemory, SyncConversationMemory
    from fullrecall.memory.procedural import ProceduralMemory
    from fullrecall.stores import open_store

    store = open_store(store_url)
    try:
        SyncConversationMemory(store, "chat", user_id="ann", embedding_model=embedder).add(
            [{"role": "user", "content": "My locker code is 4417."}, {"role": "assistant", "content": "Noted."}])
        memory = PersistentMemory("ann", "", "notes", store=store, embedder=embedder)
        asyncio.run(memory.record([{"role": "user", "content": "I live in Oslo."}]))  # a fact, and change logs
        memory.remember("My dog is Rex")
        if pattern:
            ProceduralMemory(store, user_id="ann", embedder=embedder).store_pattern("book a flight", ["search"],
                                                                                    0.9, 100.0)
    finally:
        store.close()


def test_forget_asks_about_what_it_then_reports_forgotten(tmp_path, store_url, default_embedder):
    """The question counted long-term memory's change logs as stored messages ("Forget ...: 6 stored messages" of a
    user with 2), and the answer then said "forgot ...: 2 messages": the user confirmed one thing and read another."""
    _ann_remembers(store_url, default_embedder, pattern=True)
    asked = inproc("forget", "--user", "ann", "--store", store_url, cwd=tmp_path, stdin="n\n", ok=False).stderr
    done = again("forget", "--user", "ann", "--yes", "--store", store_url, cwd=tmp_path)
    records = sum(done[k] for k in ("summaries", "facts", "patterns", "records"))
    assert done["messages"] == 3 and done["facts"] == 2 and done["patterns"] == 1
    assert f": {done['messages']} messages, {records} long-term records (" in asked, (asked, done)


@pytest.mark.parametrize("session", ["s", "notes"])
def test_forget_of_one_conversation_asks_about_and_reports_the_list_entries_it_deletes(tmp_path, store_url,
                                                                                       default_embedder, session):
    """``forget --session`` also deleted the owner's record listing the conversation (the conversation list's, or
    long-term memory's session list's), counted neither in the question nor in the report: the owner's
    ``record_count`` dropped by one more than the user was told."""
    _ann_remembers(store_url, default_embedder)  # "notes": on long-term memory's session list
    (tmp_path / "s.json").write_text(json.dumps([{"role": "user", "content": "my pin is 0042"}]))
    again("import", "s.json", "--store", store_url, "--user", "ann", "--no-embed", cwd=tmp_path)  # the conversation list
    before = again("stats", "--user", "ann", "--store", store_url, cwd=tmp_path)["record_count"]
    asked = inproc("forget", "--user", "ann", "--session", session, "--store", store_url, cwd=tmp_path, stdin="n\n",
                   ok=False).stderr
    done = again("forget", "--user", "ann", "--session", session, "--yes", "--store", store_url, cwd=tmp_path)
    after = again("stats", "--user", "ann", "--store", store_url, cwd=tmp_path)["record_count"]
    records = sum(done[k] for k in ("summaries", "facts", "patterns", "records"))
    assert done["records"] >= 1 and before - after == records, (before, after, done)
    assert f": {done['messages']} messages, {records} long-term records (" in asked, (asked, done)


def test_stats_counts_what_forget_then_reports_forgotten(tmp_path, store_url, default_embedder):
    """``stats`` counted long-term memory's change logs as messages and sessions ("message_count": 6 of a user with
    2 messages), where ``forget`` counts them among long-term records: the two commands disagreed about one user."""
    _ann_remembers(store_url, default_embedder)
    held = again("stats", "--user", "ann", "--store", store_url, cwd=tmp_path)
    everyone = again("stats", "--everyone", "--store", store_url, cwd=tmp_path)
    done = again("forget", "--user", "ann", "--yes", "--store", store_url, cwd=tmp_path)
    records = sum(done[k] for k in ("summaries", "facts", "patterns", "records"))
    assert (held["message_count"], held["session_count"]) == (done["messages"], done["sessions"]) == (3, 2), held
    assert held["record_count"] == records, (held, done)
    assert (everyone["message_count"], everyone["session_count"]) == (3, 2), everyone


def test_forget_of_a_conversation_that_does_not_exist_says_so(tmp_path, store_url):
    """``forget --session nope`` succeeded with all-zero counts, where ``stats``, ``inspect`` and ``export`` say the
    conversation is not found: a typo in the id looked like a conversation forgotten."""
    (tmp_path / "s.json").write_text(json.dumps([{"role": "user", "content": "my pin is 0042"}]))
    again("import", "s.json", "--store", store_url, "--user", "ann", "--agent", "bot", "--no-embed", cwd=tmp_path)
    before = again("stats", "--store", store_url, "--user", "ann", "--agent", "bot", cwd=tmp_path)
    for args in (("--session", "nope", "--yes"), ("--session", "nope"), ("--session", "s", "--agent", "other", "--yes"),
                 ("--session", "s", "--user", "bob", "--yes")):
        who = ("--user", "ann") if "--user" not in args else ()
        done = inproc("forget", *who, *args, "--store", store_url, cwd=tmp_path, stdin="y\n", ok=False)
        assert done.returncode == 1 and "not found" in done.stderr and done.stdout == "", (args, done)
        assert "Forget" not in done.stderr, done.stderr  # refused before the question
    done = fr("forget", "--user", "ann", "--session", "nope", "--yes", "--store", store_url, cwd=tmp_path, ok=False)
    assert done.returncode == 1 and "conversation 'nope' not found" in done.stderr and "any agent" in done.stderr
    assert again("stats", "--store", store_url, "--user", "ann", "--agent", "bot", cwd=tmp_path) == before
    assert again("forget", "--user", "ann", "--session", "s", "--yes", "--store", store_url, cwd=tmp_path)["messages"] == 1


def test_a_refused_import_leaves_no_store_file_behind(tmp_path):
    """An import refused before it wrote anything (a file that does not exist or is no transcript) still made an
    empty SQLite store file, which reading commands then took for a store: the refused command changed the folder."""
    (tmp_path / "bad.json").write_text(json.dumps([{"role": "user", "content": "fine"}, {"content": "no role"}]))
    (tmp_path / "scalar.json").write_text("42")
    (tmp_path / "new.jsonl").write_text(json.dumps({"format": "fullrecall", "version": 99}) + "\n")
    (tmp_path / "binary.db").write_bytes(b"[\xff\xfe")
    memory = {"kind": "header", "format": "fullrecall.memory", "version": 99}
    (tmp_path / "memory.jsonl").write_text(json.dumps(memory) + "\n")
    store = f"sqlite:///{tmp_path / 'm.db'}"
    done = fr("import", "bad.json", "--store", store, "--no-embed", cwd=tmp_path, ok=False)
    assert done.returncode == 2 and "message 1" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("m.db")) == []
    for args in (("bad.json",), ("scalar.json",), ("new.jsonl",), ("binary.db", "--format", "openai"),
                 ("missing.json", "--format", "openai"), ("missing.jsonl", "--format", "jsonl"), ("memory.jsonl",)):
        done = inproc("import", *args, "--store", store, *(() if args[0] == "memory.jsonl" else ("--no-embed",)),
                      cwd=tmp_path, ok=False)
        assert done.returncode in (1, 2) and done.stderr.startswith("error: "), (args, done)
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("m.db")) == [], args
    (tmp_path / "t.json").write_text(json.dumps([{"role": "user", "content": "hello"}]))
    again("import", "t.json", "--store", store, "--no-embed", cwd=tmp_path)
    assert inproc("import", "bad.json", "--store", store, "--no-embed", cwd=tmp_path, ok=False).returncode == 2
    assert again("stats", "--store", store, cwd=tmp_path)["message_count"] == 1  # a store it did not make stays


def test_a_refused_tenant_user_or_session_leaves_no_store_behind(tmp_path):
    """``import --tenant <300 bytes>`` (and ``--format memory``, ``chat``, ``keys create``) refused the tenant once
    the SQLite file was made, and left it: the options are checked before the store is opened now.
    """
    store = f"sqlite:///{tmp_path / 'm.db'}"
    (tmp_path / "t.json").write_text(json.dumps([{"role": "user", "content": "hello"}]))
    memory = {"kind": "header", "format": "fullrecall.memory", "version": 2}
    (tmp_path / "memory.jsonl").write_text(json.dumps(memory) + "\n")
    long = "x" * 300
    runs = [("import", "t.json", "--no-embed", "--tenant", long), ("import", "t.json", "--no-embed", "--user", long),
            ("import", "memory.jsonl", "--format", "memory", "--tenant", long),
            ("import", "memory.jsonl", "--format", "memory", "--agent", long),
            ("chat", "--model", "scripted", "--tenant", long), ("chat", "--model", "scripted", "--session", " \u200b"),
            ("keys", "create", "--tenant", "__keys__"), ("keys", "create", "--tenant", "")]
    for i, args in enumerate(runs):
        done = (fr if i == 0 else inproc)(*args, "--store", store, cwd=tmp_path, stdin="hi\n", ok=False)
        assert done.returncode == 2 and done.stderr.startswith("error: ") and done.stdout == "", (args, done)
        assert not (tmp_path / "m.db").exists(), args


def test_a_reserved_or_blank_tenant_is_refused_by_every_memory_command(tmp_path):
    """Tenants starting with ``__`` are the service's own (its API keys are records of ``__keys__``): ``keys create``
    refused one, but the memory commands took it, and ``forget --tenant __keys__ --user '' --yes`` erased every
    tenant's keys. They are refused now, as a blank tenant is, and the keys stay."""
    store = f"sqlite:///{tmp_path / 'k.db'}"
    made = out("keys", "create", "--tenant", "acme", "--store", store, cwd=tmp_path)
    (tmp_path / "t.json").write_text(json.dumps([{"role": "user", "content": "hello"}]))
    runs = [("forget", "--tenant", "__keys__", "--user", "", "--yes"), ("stats", "--tenant", "__keys__"),
            ("import", "t.json", "--no-embed", "--tenant", "__keys__"), ("search", "hello", "--tenant", "__x"),
            ("export", "-", "--tenant", "__keys__"), ("stats", "--tenant", " \u200b")]
    for i, args in enumerate(runs):
        done = (fr if i == 0 else inproc)(*args, "--store", store, cwd=tmp_path, ok=False)
        assert done.returncode == 2 and done.stderr.startswith("error: --tenant ") and done.stdout == "", (args, done)
    assert [k["id"] for k in again("keys", "list", "--store", store, cwd=tmp_path)] == [made["id"]]


def test_an_import_naming_a_blank_or_reserved_conversation_is_refused(tmp_path):
    """A JSONL line of conversation ``" "`` or ``_log.facts`` (long-term memory's change log) was written: the
    library names no conversation so (``ConversationMemory`` refuses both); the import now refuses the file, naming
    the line, and writes nothing."""
    store = f"sqlite:///{tmp_path / 'm.db'}"
    header = json.dumps({"format": "fullrecall", "version": 2})
    for conv, words in ((" \u200b", "is blank"), ("_log.facts", "is reserved")):
        line = json.dumps({"conversation_id": conv, "id": "m0", "message": {"role": "user", "content": "hi"}})
        (tmp_path / "t.jsonl").write_text(header + "\n" + line + "\n")
        done = inproc("import", "t.jsonl", "--store", store, "--no-embed", cwd=tmp_path, ok=False)
        assert done.returncode == 2 and "line 2: 'conversation_id'" in done.stderr and words in done.stderr, done
        assert not (tmp_path / "m.db").exists()


def test_a_blank_user_or_agent_is_refused_in_the_librarys_words_and_leaves_no_store(tmp_path):
    """``--user " "`` or ``--agent`` of a zero-width space named an owner nobody can see or type: refused, as the
    library and the service refuse it, before the store is made."""
    store = f"sqlite:///{tmp_path / 'm.db'}"
    (tmp_path / "t.json").write_text(json.dumps([{"role": "user", "content": "hello"}]))
    (tmp_path / "memory.jsonl").write_text(json.dumps({"kind": "header", "format": "fullrecall.memory",
                                                       "version": 2}) + "\n")
    for option, field, value in (("--user", "user_id", " "), ("--agent", "agent_id", "\u200b")):
        said = (f"error: '{field}' {value!r} is blank (whitespace or invisible characters only): name an owner, or "
                "leave it out for none")
        for args in (("import", "t.json", "--no-embed"), ("import", "memory.jsonl", "--format", "memory"),
                     ("chat", "--model", "scripted")):
            done = inproc(*args, option, value, "--store", store, cwd=tmp_path, stdin="hi\n", ok=False)
            assert done.returncode == 2 and done.stderr.strip() == said and done.stdout == "", (args, done)
            assert not (tmp_path / "m.db").exists(), args


@pytest.mark.parametrize("url", [
    "postgresql://bob:s3cret%ZZpw@127.0.0.1:1/db",  # a percent-escape libpq cannot read: its error quoted the password
    "postgress://bob:s3cretPWx@127.0.0.1:5432/db",  # a misspelled scheme: the error quoted the whole URL
    "redis://bob:s3cretPWx@127.0.0.1:1/0",
    "postgresql://bob@127.0.0.1:1/db?password=s3cretPWx&sslmode=bogus",
])
def test_a_store_url_password_is_never_shown_in_an_error(tmp_path, url):
    """Whatever is wrong with a store URL (or its server), the error is one line without its password."""
    done = fr("stats", "--store", url, cwd=tmp_path, ok=False) if url.startswith("postgresql://bob:") else \
        inproc("stats", "--store", url, cwd=tmp_path, ok=False)
    assert done.returncode != 0 and done.stderr.startswith("error: "), done.stderr
    assert "s3cret" not in done.stderr + done.stdout, done.stderr
