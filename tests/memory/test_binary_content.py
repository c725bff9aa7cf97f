"""Bytes in a message (an image a tool returned, as Strands gives it) are stored and come back as bytes."""

from __future__ import annotations

from fullrecall import SyncConversationMemory
from fullrecall.stores import Scope, StoredMessage, open_store

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


def _tool_loop(i: int) -> list[dict]:
    return [
        {"role": "user", "content": [{"text": f"Take screenshot {i} of the dashboard."}]},
        {"role": "assistant", "content": [{"toolUse": {"toolUseId": f"t{i}", "name": "screenshot", "input": {}}}]},
        {"role": "user", "content": [{"toolResult": {"toolUseId": f"t{i}", "status": "success", "content": [
            {"text": f"screenshot {i}"}, {"image": {"format": "png", "source": {"bytes": PNG}}}]}}]},
        {"role": "assistant", "content": [{"text": f"Screenshot {i} shows the dashboard."}]},
    ]


def test_image_bytes_are_archived_and_come_back_verbatim(store_url):
    store = open_store(store_url)
    memory = SyncConversationMemory(store, "shots", user_id="ann", summarizer=lambda m, p: "summary",
                                max_history_turns=2, preserve_recent_messages=2)
    sent = []
    for i in range(4):
        for message in _tool_loop(i):
            memory.add(message)
            sent.append(message)
    logged = [m.data for m in memory.manager.archive.get(0, 100) if m.kind == "message"]
    assert logged[: len(sent)] == sent[: len(logged)] and len(logged) >= len(sent) - len(memory.messages)
    image = logged[2]["content"][0]["toolResult"]["content"][1]["image"]["source"]["bytes"]
    assert isinstance(image, bytes) and image == PNG
    assert "screenshot 0" in " ".join(m.text for m in memory.recall("screenshot 0 of the dashboard").messages)
    scope = Scope(user_id="ann", session_id="raw")
    store.append(scope, [StoredMessage(id="b", role="user", text="raw bytes", data={"blob": PNG, "n": [b"", b"x"]})])
    assert store.get(scope, ["b"])[0].data == {"blob": PNG, "n": [b"", b"x"]}
    store.close()
