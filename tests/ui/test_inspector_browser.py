"""The inspector at /ui in headless Chromium against a real server: what a person clicks, what they see."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("fastapi")

from fullrecall.memory import FactMemory  # noqa: E402
from fullrecall.stores import Scope  # noqa: E402


def _by():
    from selenium.webdriver.common.by import By

    return By


def wait(driver: Any, condition: Any, seconds: float = 20) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, seconds).until(condition)


def text(driver: Any, element_id: str) -> str:
    return driver.find_element(_by().ID, element_id).text


def click(driver: Any, css: str) -> None:
    from selenium.webdriver.support import expected_conditions as ec

    wait(driver, ec.element_to_be_clickable((_by().CSS_SELECTOR, css))).click()


def rows(driver: Any, css: str) -> list[Any]:
    return driver.find_elements(_by().CSS_SELECTOR, css)


def test_a_person_inspects_searches_pages_and_forgets(shot, browser, served, artifacts):
    base, service, data = served
    By = _by()
    shot.open_inspector(browser, base, data["key"])
    wait(browser, lambda d: "tenant acme" in text(d, "who"))
    assert [o.text for o in rows(browser, "#user option")] == ["ann"]
    click(browser, "[data-conversation='trip-to-lisbon']")
    wait(browser, lambda d: text(d, "page-info") == "positions 200–239 of 240")  # opens on the newest page
    trip = Scope(tenant="acme", user_id="ann", session_id="trip-to-lisbon")
    window = service.conversations.window(trip)  # a summary of what left it, then the newest messages
    shown = rows(browser, "#window li")
    assert [r.get_attribute("data-position") for r in shown] == [
        None if m["position"] is None else str(m["position"]) for m in window]
    assert window[0]["kind"] == "summary" and "summary" in shown[0].get_attribute("class")
    assert shown[-1].get_attribute("data-position") == "239"
    wait(browser, lambda d: "in the window" in text(d, "stats"))
    stats = text(browser, "stats").split("\n")  # the card agrees with the Active window panel
    assert stats[stats.index("in the window") - 1] == str(len(window)), stats
    assert text(browser, "window-count") == f"{len(window)} messages"
    assert len(rows(browser, "#chart polyline")) == 3
    browser.save_screenshot(str(artifacts / "1-conversation.png"))

    # the timeline, a page at a time
    click(browser, "#prev")
    wait(browser, lambda d: text(d, "page-info") == "positions 100–199 of 240")
    assert [r.get_attribute("data-position") for r in rows(browser, "#timeline li")] == [str(p) for p in range(100, 200)]
    click(browser, "#first")
    wait(browser, lambda d: text(d, "page-info") == "positions 0–99 of 240")
    assert not browser.find_element(By.ID, "prev").is_enabled()
    stored = service.store.range(Scope(tenant="acme", user_id="ann", session_id="trip-to-lisbon"), 0, 99)
    assert [r.find_element(By.CLASS_NAME, "text").text for r in rows(browser, "#timeline li")] == [
        m.data["content"] for m in stored]
    browser.save_screenshot(str(artifacts / "2-timeline.png"))

    # a summary expands to the exact archived messages it covers
    made = service.conversations.summaries(trip)  # made by the service's summarizing manager as the seed grew
    summaries = rows(browser, "#summaries details")
    assert len(made) > 1 and len(summaries) == len(made)
    start, end = made[1]["covers"]
    summaries[1].find_element(By.TAG_NAME, "summary").click()
    wait(browser, lambda d: len(rows(d, "#summaries details[open] .expanded li")) == end - start + 1)
    expanded = rows(browser, "#summaries details[open] .expanded li")
    assert [r.get_attribute("data-position") for r in expanded] == [str(p) for p in range(start, end + 1)]
    assert [r.find_element(By.CLASS_NAME, "text").text for r in expanded] == [
        m["message"]["content"] for m in service.conversations.summary_messages(trip, made[1]["id"])]
    browser.save_screenshot(str(artifacts / "3-summary.png"))

    # search: scores for each recalled message, its range highlighted in the timeline
    browser.find_element(By.ID, "query").send_keys("what was my locker code")
    click(browser, "#search-form button")
    wait(browser, lambda d: rows(d, "#hits li"))
    top = rows(browser, "#hits li")[0]
    assert "4471" in top.text
    position = int(top.get_attribute("data-position"))
    for kind in ("dense", "lexical", "fused"):
        float(top.find_element(By.CLASS_NAME, kind).text)  # a number, not a dash
    assert top.find_element(By.CLASS_NAME, "rerank").text == "—"  # no reranker configured
    top.find_element(By.CSS_SELECTOR, "button.show").click()
    wait(browser, lambda d: [r.get_attribute("data-position") for r in rows(d, "#timeline li.hit")] == [str(position)])
    assert [r.get_attribute("data-position") for r in rows(browser, "#timeline li.in-range")] == [
        str(position - 1), str(position), str(position + 1)]  # radius 1
    browser.save_screenshot(str(artifacts / "4-search.png"))

    # the key stays for the tab: a reload does not ask again
    browser.refresh()
    wait(browser, lambda d: rows(d, "[data-conversation='printer-support']"))
    assert not browser.find_element(By.ID, "key-dialog").is_displayed()

    # long-term facts with their validity intervals: the superseded one greyed, hidden without history
    wait(browser, lambda d: len(rows(d, "#facts tr[data-fact]")) == 4)
    facts = {r.get_attribute("data-fact"): r for r in rows(browser, "#facts tr[data-fact]")}
    texts = {r.find_element(By.TAG_NAME, "td").text: r.get_attribute("class") for r in facts.values()}
    assert texts == {"My city is Porto": "superseded", "My city is Lisbon": "current",
                     "My sister is vegetarian": "current", "My favourite airline is TAP": "current"}
    porto = next(r for r in facts.values() if "Porto" in r.text)
    assert "now" not in porto.text and "now" in next(r for r in facts.values() if "Lisbon" in r.text).text
    click(browser, "#fact-history")
    wait(browser, lambda d: len(rows(d, "#facts tr[data-fact]")) == 3 and "Porto" not in text(d, "facts"))
    click(browser, "#fact-history")
    wait(browser, lambda d: len(rows(d, "#facts tr[data-fact]")) == 4)
    # forget a fact, with confirmation
    fact_memory = FactMemory(service.store, user_id="ann", tenant="acme", embedder=service.indexer.embedder)
    tap = next(f for f in fact_memory.history() if "TAP" in f.text)
    click(browser, f"tr[data-fact='{tap.id}'] button.forget-fact")
    wait(browser, lambda d: d.find_element(By.ID, "confirm").is_displayed())
    assert "TAP" in text(browser, "confirm-text")
    click(browser, "#confirm-yes")
    wait(browser, lambda d: len(rows(d, "#facts tr[data-fact]")) == 3)
    assert "TAP" not in text(browser, "facts") and not any("TAP" in f.text for f in fact_memory.history())
    # procedural patterns with their steps and scores; a task finds the similar one
    patterns = rows(browser, "#patterns .pattern")
    assert [p.find_element(By.TAG_NAME, "b").text for p in patterns] == ["book a flight",
                                                                         "find a restaurant for a vegetarian"]
    assert [li.text for li in patterns[0].find_elements(By.CSS_SELECTOR, ".steps li")] == [
        "search_flights", "compare_fares", "hold_seat", "pay"]
    assert patterns[0].find_element(By.CLASS_NAME, "success").text == "0.920"
    browser.find_element(By.ID, "pattern-query").send_keys("booking a plane ticket")
    click(browser, "#pattern-form button")
    wait(browser, lambda d: rows(d, "#patterns .similarity"))
    assert [p.text for p in rows(browser, "#patterns .pattern > b")] == ["book a flight"]
    browser.save_screenshot(str(artifacts / "5-long-term.png"))

    # forget a conversation, with confirmation (cancel first: nothing goes)
    printer = Scope(tenant="acme", user_id="ann", session_id="printer-support")
    click(browser, "[data-conversation='printer-support']")
    click(browser, "#forget-conversation")
    wait(browser, lambda d: d.find_element(By.ID, "confirm").is_displayed())
    assert "printer-support" in text(browser, "confirm-text")
    click(browser, "#confirm-no")
    assert service.store.count(printer) == 2
    click(browser, "#forget-conversation")
    click(browser, "#confirm-yes")
    wait(browser, lambda d: "Forgot printer-support" in text(d, "pick"))
    wait(browser, lambda d: not rows(d, "[data-conversation='printer-support']"))
    assert service.store.count(printer) == 0
    assert rows(browser, "[data-conversation='trip-to-lisbon']")
    browser.save_screenshot(str(artifacts / "6-forgotten.png"))


def test_another_tenants_key_sees_none_of_it(shot, browser, served, artifacts):
    base, service, data = served
    other, _ = service.keys.create("globex")
    browser.get(f"{base}/ui/")
    browser.execute_script("sessionStorage.clear()")
    shot.open_inspector(browser, base, other)
    wait(browser, lambda d: "tenant globex" in text(d, "who"))
    wait(browser, lambda d: d.find_element(_by().ID, "no-conversations").is_displayed())
    assert not rows(browser, "[data-conversation]") and not rows(browser, "#user option")
    wait(browser, lambda d: text(d, "facts") == "No facts for this user." and text(d, "patterns") == "No patterns for this user.")
    assert "lisbon" not in browser.page_source.lower() and "4471" not in browser.page_source
    browser.save_screenshot(str(artifacts / "7-other-tenant.png"))
    # and a wrong key is refused and asked again
    click(browser, "#change-key")
    browser.find_element(_by().ID, "key").send_keys("fr_nope_nope")
    click(browser, "#key-open")
    wait(browser, lambda d: "not accepted" in text(d, "key-error"))


def test_a_key_limited_to_a_user_sees_that_user_only(shot, browser, served, artifacts):
    from selenium.webdriver.support.ui import Select

    base, service, data = served
    service.conversations.append(Scope(tenant="acme", user_id="bob", session_id="bobs-notes"),
                                 [{"role": "user", "content": "bob's own note"}])

    def open_with(key: str) -> None:
        browser.get(f"{base}/ui/")
        browser.execute_script("sessionStorage.clear()")
        shot.open_inspector(browser, base, key)
        wait(browser, lambda d: rows(d, "[data-conversation='trip-to-lisbon']"))

    open_with(service.keys.create("acme", users=["ann"])[0])
    assert [o.text for o in rows(browser, "#user option")] == ["ann"]
    assert "bob" not in browser.page_source
    open_with(data["key"])
    assert [o.text for o in rows(browser, "#user option")] == ["ann", "bob"]
    Select(browser.find_element(_by().ID, "user")).select_by_visible_text("bob")
    wait(browser, lambda d: [b.text for b in rows(d, "[data-conversation]")] == ["bobs-notes\n1"])


def test_a_cut_listing_says_so(shot, browser, served, artifacts, monkeypatch):
    """The page ignored ``truncated``: a tenant with more conversations than the listing holds looked complete."""
    from fullrecall.service import inspector

    base, service, data = served
    whole = inspector.MAX_LISTED
    service.conversations.append(Scope(tenant="acme", user_id="ann", session_id="a-first"),
                                 [{"role": "user", "content": "first in order"}])

    def open_with(limit: int) -> None:
        monkeypatch.setattr(inspector, "MAX_LISTED", limit)
        browser.get(f"{base}/ui/")
        browser.execute_script("sessionStorage.clear()")
        shot.open_inspector(browser, base, data["key"])
        wait(browser, lambda d: rows(d, "[data-conversation]"))

    open_with(1)
    wait(browser, lambda d: d.find_element(_by().ID, "truncated").is_displayed())
    assert text(browser, "truncated") == "Only the first 1 conversations are listed (by user, agent and id)."
    assert [b.get_attribute("data-conversation") for b in rows(browser, "[data-conversation]")] == ["a-first"]
    browser.save_screenshot(str(artifacts / "10-truncated.png"))
    open_with(whole)
    assert "trip-to-lisbon" in [b.get_attribute("data-conversation") for b in rows(browser, "[data-conversation]")]
    assert not browser.find_element(_by().ID, "truncated").is_displayed()


HOSTILE = "<img src=x onerror=\"window.pwned=1\"></script><script>window.pwned=2</script>"
RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: what follows it shows reversed, to the end of its paragraph


def _left(driver: Any, element_id: str, needle: str) -> float:
    """Where ``needle`` (found in one text node of the element) begins on screen, from the left, the element's text
    kept on one line (so the order of words on screen is the order from left to right).
    """
    return driver.execute_script("""
        const root = document.getElementById(arguments[0]);
        root.style.whiteSpace = "nowrap";
        const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          const i = node.data.indexOf(arguments[1]);
          if (i >= 0) {
            const range = document.createRange();
            range.setStart(node, i);
            range.setEnd(node, i + arguments[1].length);
            return range.getBoundingClientRect().left;
          }
        }
        return null;""", element_id, needle)


def test_stored_markup_and_direction_overrides_render_as_text(shot, browser, served, artifacts):
    """Messages, ids, facts and patterns holding markup show as the text they are, and nothing of them runs; a
    right-to-left override in a conversation id or a fact reversed the rest of the sentence that named it (the
    question before forgetting it read "Forget conversation "abc" (...) ?enod nu eb tonnac sihT"), so the dialog
    misstated what would be forgotten. Each stored string is isolated from the words around it.
    """
    from fullrecall.memory import FactMemory, ProceduralMemory

    base, service, _ = served
    tenant, user, conversation = "mischief", f"<b>{HOSTILE}</b>", f"chat {HOSTILE} {RLO}gnp.exe"
    texts = [HOSTILE, "[see this](javascript:window.pwned=3)", f"{RLO}reversed, and only this"]
    service.conversations.append(Scope(tenant=tenant, user_id=user, session_id=conversation),
                                 [{"role": "user", "content": t} for t in texts])
    embedder = service.indexer.embedder
    fact = FactMemory(service.store, user_id=user, tenant=tenant, embedder=embedder).remember(
        f"My motto is {RLO}{HOSTILE}")
    ProceduralMemory(service.store, user_id=user, tenant=tenant, embedder=embedder).store_pattern(
        f"run {HOSTILE}", [HOSTILE, "javascript:window.pwned=4"], 0.9, 10)
    browser.get(f"{base}/ui/")
    browser.execute_script("sessionStorage.clear()")
    shot.open_inspector(browser, base, service.keys.create(tenant)[0])
    wait(browser, lambda d: rows(d, "[data-conversation]"))
    assert [o.text for o in rows(browser, "#user option")] == [user]
    button = rows(browser, "[data-conversation]")[0]
    assert button.get_attribute("data-conversation") == conversation
    button.click()
    wait(browser, lambda d: len(rows(d, "#timeline li")) == 3)
    wait(browser, lambda d: rows(d, "#facts tr[data-fact]") and rows(d, "#patterns .pattern"))
    shown = [r.find_element(_by().CLASS_NAME, "text").get_attribute("textContent") for r in rows(browser, "#timeline li")]
    assert shown == texts
    assert browser.find_element(_by().ID, "conversation-title").get_attribute("textContent") == conversation
    assert HOSTILE in browser.find_element(_by().ID, "facts").get_attribute("textContent")
    assert HOSTILE in browser.find_element(_by().ID, "patterns").get_attribute("textContent")
    # nothing of it became an element: no image, no link, no script but the page's own
    assert browser.execute_script("return [window.pwned, document.querySelectorAll('img, a').length, "
                                  "document.scripts.length]") == [None, 0, 1]
    browser.save_screenshot(str(artifacts / "8-markup.png"))

    # the question before forgetting names the conversation, and reads in order after it
    click(browser, "#forget-conversation")
    wait(browser, lambda d: d.find_element(_by().ID, "confirm").is_displayed())
    assert _left(browser, "confirm-text", "Forget") < _left(browser, "confirm-text", "messages") < _left(
        browser, "confirm-text", "undone")
    browser.save_screenshot(str(artifacts / "9-confirm.png"))
    click(browser, "#confirm-no")
    click(browser, f"tr[data-fact='{fact.id}'] button.forget-fact")
    wait(browser, lambda d: d.find_element(_by().ID, "confirm").is_displayed())
    assert _left(browser, "confirm-text", "Forget") < _left(browser, "confirm-text", "for good")
    click(browser, "#confirm-yes")
    wait(browser, lambda d: not rows(d, "#facts tr[data-fact]"))
    click(browser, "#forget-conversation")
    click(browser, "#confirm-yes")
    wait(browser, lambda d: "Forgot" in text(d, "pick"))
    assert _left(browser, "pick", "Forgot") < _left(browser, "pick", "messages") < _left(browser, "pick", "vectors")
    assert browser.execute_script("return window.pwned") is None


def test_tool_calls_show_with_their_arguments_and_images_as_a_placeholder(shot, browser, served, artifacts):
    """An OpenAI assistant message's ``tool_calls`` were missing from the archive (shown with its text) or named
    without their arguments (without text); an image's base64 was printed as text.
    """
    import base64
    import json

    base, service, _ = served
    picture = base64.b64encode(bytes(range(256)) * 40).decode()
    call = {"id": "c1", "type": "function",
            "function": {"name": "bank_transfer", "arguments": json.dumps({"to": "IBAN-DE-42", "amount": 500})}}
    bare = {"id": "c2", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"q": "IBAN-FR-7"})}}
    said = [
        {"role": "user", "content": "transfer 500 EUR to Bob"},
        {"role": "assistant", "content": "Sure, doing it now.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "assistant", "content": None, "tool_calls": [bare]},
        {"role": "tool", "tool_call_id": "c2", "content": "found"},
        {"role": "user", "content": [{"type": "text", "text": "my photo"},
                                     {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{picture}"}}]},
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": picture}}]},
    ]
    service.conversations.append(Scope(tenant="odd", user_id="olga", session_id="tools"), said)
    service.conversations.append(Scope(tenant="odd", user_id="olga", session_id="converse"), [
        {"role": "user", "content": [{"text": "see"}, {"image": {"format": "png", "source": {"bytes": picture}}}]}])
    browser.get(f"{base}/ui/")
    browser.execute_script("sessionStorage.clear()")
    shot.open_inspector(browser, base, service.keys.create("odd")[0])

    def shown(conversation: str, count: int) -> list[str]:
        click(browser, f"[data-conversation='{conversation}']")
        wait(browser, lambda d: len(rows(d, "#timeline li")) == count
             and rows(d, "#timeline li")[0].get_attribute("data-id") is not None)
        return [r.find_element(_by().CLASS_NAME, "text").get_attribute("textContent")
                for r in rows(browser, "#timeline li")]

    tools = shown("tools", len(said))
    assert tools[1] == 'Sure, doing it now.\n[tool call bank_transfer] {"to": "IBAN-DE-42", "amount": 500}'
    assert tools[3] == '[tool call lookup] {"q": "IBAN-FR-7"}'
    assert tools[5:] == ["my photo\n[image]", "[image]"]
    assert shown("converse", 1) == ["see\n[image]"]
    assert picture[:40] not in browser.page_source
    browser.save_screenshot(str(artifacts / "11-tools-and-images.png"))


def test_a_stored_isolate_control_cannot_close_an_owners_isolation(shot, browser, served, artifacts):
    """An owner's label (an ``<option>``: text only, no ``<bdi>``) wraps each id in U+2068 ... U+2069; a user id
    holding U+2069 then U+202E closed the isolation early, and the override reversed the words after it.
    """
    import json
    import re

    base, service, _ = served
    user = "mallory\u2069\u202e\u2066x"
    service.conversations.append(Scope(tenant="bidi", user_id=user, agent_id="support-bot", session_id="c"),
                                 [{"role": "user", "content": "hi"}])
    browser.get(f"{base}/ui/")
    browser.execute_script("sessionStorage.clear()")
    shot.open_inspector(browser, base, service.keys.create("bidi")[0])
    wait(browser, lambda d: rows(d, "[data-conversation='c']"))
    label = rows(browser, "#user option")[0].get_attribute("textContent")
    # each id isolated whole: nothing inside the wrapper opens or closes an isolation
    wrapped = re.fullmatch("\u2068([^\u2066-\u2069]*)\u2069 · agent \u2068([^\u2066-\u2069]*)\u2069", label)
    assert wrapped is not None, ascii(label)
    assert wrapped[1].startswith("mallory") and "\u202e" in wrapped[1] and wrapped[2] == "support-bot"
    assert json.loads(rows(browser, "#user option")[0].get_attribute("value")) == [user, "support-bot"]  # as stored


def test_a_fact_dated_in_the_future_shows_as_not_yet_current(shot, browser, served, artifacts):
    """A fact whose ``valid_from`` is still to come was greyed and struck through as a superseded one, and read
    "until now".
    """
    import time

    base, service, _ = served
    service.conversations.append(Scope(tenant="future", user_id="hana", session_id="c"),
                                 [{"role": "user", "content": "hi"}])
    facts = FactMemory(service.store, user_id="hana", tenant="future", embedder=service.indexer.embedder)
    tomorrow = time.time() + 86400
    lyon = facts.remember("My city is Lyon")
    paris = facts.remember("My city is Paris", valid_from=tomorrow)
    browser.get(f"{base}/ui/")
    browser.execute_script("sessionStorage.clear()")
    shot.open_inspector(browser, base, service.keys.create("future")[0])
    wait(browser, lambda d: len(rows(d, "#facts tr[data-fact]")) == 2)

    def cells(fact) -> tuple[str, list[str], str]:
        row = browser.find_element(_by().CSS_SELECTOR, f"tr[data-fact='{fact.id}']")
        tds = row.find_elements(_by().TAG_NAME, "td")
        return row.get_attribute("class"), [td.text for td in tds[2:4]], tds[0].value_of_css_property("text-decoration")

    day = time.strftime("%Y-%m-%d", time.gmtime(tomorrow))
    kind, (since, until), line = cells(paris)
    assert kind == "upcoming" and "line-through" not in line
    assert since.startswith(f"from {day}") and "not yet current" in since and until == "—"
    kind, (since, until), line = cells(lyon)
    assert kind == "current" and until.startswith(day) and "line-through" not in line  # current until tomorrow
    browser.save_screenshot(str(artifacts / "12-future-fact.png"))
