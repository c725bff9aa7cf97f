"""Regenerate docs/inspector.png: the inspector at /ui over a seeded SQLite store, shot by headless Chromium.

    python scripts/inspector_screenshot.py [--out docs/inspector.png]
    python scripts/inspector_screenshot.py --time 100000   # how fast the page is on a conversation that long

Needs ``fullrecall[service]``, ``selenium`` and Debian's ``chromium`` and ``chromium-driver``
(``scripts/setup.sh`` installs them). The browser tests (tests/ui) use the same seed, server and browser.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
TOPICS = [
    ("Can you find flights to Lisbon for the second week of May?",
     "Direct flights leave Tuesday at 07:40 and Thursday at 13:15; the Tuesday one is cheaper."),
    ("Book the Tuesday one, window seat please.", "Booked: TP 1351 on Tuesday, seat 14A. The confirmation is LX7QPD."),
    ("What neighbourhood should we stay in?",
     "Alfama for the old streets and fado, Príncipe Real for quiet gardens, Cais do Sodré for nightlife."),
    ("Alfama sounds right. Something with a terrace.", "Casa do Largo has a roof terrace over the river; 3 nights held."),
    ("How do I get from the airport to Alfama?", "The red metro line to Alameda, then the green line to Baixa-Chiado."),
    ("Any restaurants you'd recommend near the hotel?",
     "Taberna da Rua das Flores for petiscos, and Zé da Mouraria for a big lunch (cash only)."),
    ("My sister is vegetarian, does that work?", "Both have vegetarian plates; Ao 26 is fully vegan and very good."),
    ("Plan a day trip out of the city.",
     "Sintra by train from Rossio (40 min): Pena Palace early, then Quinta da Regaleira before the crowds."),
    ("What's the weather like then?", "Around 22 °C by day, 14 °C at night, rain is unlikely in mid-May."),
    ("Remind me to get euros before leaving.", "Noted: get euros before the flight on Tuesday."),
]
LOCKER, LOCKER_TURN = 17, ("My gym locker code is 4471, remind me when I'm back.", "I will remember: locker code 4471.")


def seed(service: Any, tenant: str = "acme", user: str = "ann", turns: int = 120) -> dict[str, Any]:
    """A tenant's key and a user's conversations (a long trip plan the service summarizes as it grows, a short one),
    facts and patterns.
    """
    from fullrecall.stores import Scope

    key, _ = service.keys.create(tenant, name="inspector")
    conv = service.conversations
    trip = Scope(tenant=tenant, user_id=user, session_id="trip-to-lisbon")
    for start in range(0, turns, 10):  # ten turns a request; the service summarizes the window as it grows
        batch = []
        for i in range(start, min(turns, start + 10)):
            asked, answered = TOPICS[i % len(TOPICS)] if i != LOCKER else LOCKER_TURN
            day = f" (day {i // len(TOPICS) + 1})"
            batch += [{"role": "user", "content": asked + day, "id": f"u{i}"},
                      {"role": "assistant", "content": answered + day, "id": f"a{i}"}]
        conv.append(trip, batch)
    conv.append(Scope(tenant=tenant, user_id=user, session_id="printer-support"), [
        {"role": "user", "content": "The office printer shows error E-204.", "id": "p0"},
        {"role": "assistant", "content": "E-204 is a paper jam in tray 2: open the side door and pull gently.", "id": "p1"}])
    seed_long_term(service, tenant, user)
    service.indexer.flush()
    return {"key": key, "tenant": tenant, "user": user, "conversation": "trip-to-lisbon", "messages": 2 * turns}


def seed_long_term(service: Any, tenant: str, user: str) -> None:
    """The user's facts (one superseded by a newer value) and two procedural patterns."""
    from fullrecall.memory import FactMemory, ProceduralMemory

    embedder = service.indexer.embedder
    facts = FactMemory(service.store, user_id=user, tenant=tenant, embedder=embedder)
    day = 86400.0
    now = time.time()
    facts.remember("My city is Porto", valid_from=now - 400 * day)
    facts.remember("My city is Lisbon", valid_from=now - 30 * day)  # supersedes Porto
    facts.remember("My sister is vegetarian", valid_from=now - 2 * day)
    facts.remember("My favourite airline is TAP", valid_from=now - day)
    patterns = ProceduralMemory(service.store, user_id=user, tenant=tenant, embedder=embedder)
    patterns.store_pattern("book a flight", ["search_flights", "compare_fares", "hold_seat", "pay"], 0.92, 1840,
                           query_type="travel")
    patterns.store_pattern("find a restaurant for a vegetarian", ["search_places", "read_reviews", "reserve_table"],
                           0.81, 950, query_type="food")


@contextlib.contextmanager
def serving(store_url: str, embedder: Any = None, **settings: Any) -> Iterator[tuple[str, Any]]:
    """``fullrecall serve`` under uvicorn on a free loopback port: its base URL and its Service."""
    import uvicorn

    from fullrecall.service.app import create_app
    from fullrecall.service.config import Settings
    from fullrecall.stores._servers import free_port

    app = create_app(Settings(store=store_url, rate_limit=0, **settings), embedder=embedder)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the service did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", app.state.service
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def chromium(width: int = 1280, height: int = 1500) -> Any:
    """Headless Debian Chromium driven by Selenium through Debian's chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def open_inspector(driver: Any, base: str, key: str) -> None:
    """Load /ui and give it the key, as a person would."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{base}/ui/")
    wait = WebDriverWait(driver, 20)
    field = wait.until(ec.visibility_of_element_located((By.ID, "key")))
    field.send_keys(key)
    driver.find_element(By.ID, "key-open").click()
    wait.until(ec.invisibility_of_element_located((By.ID, "key-dialog")))


def seed_long(service: Any, messages: int, tenant: str = "acme", user: str = "ann") -> dict[str, Any]:
    """One conversation of ``messages`` messages, written in batches (not embedded: keyword search finds them), with
    ten summaries of a tenth each (as a summarizing manager records them; serve it with ``manager="sliding"``).
    """
    from fullrecall.stores import Scope

    key, _ = service.keys.create(tenant, name="inspector")
    scope = Scope(tenant=tenant, user_id=user, session_id="long")
    conv = service.conversations
    batch = 2000
    for start in range(0, messages, batch):
        chunk = [{"role": "user" if i % 2 == 0 else "assistant", "id": f"m{i}",
                  "content": f"message {i}: " + TOPICS[i % len(TOPICS)][i % 2]} for i in range(start, min(messages, start + batch))]
        if start + batch < messages:
            service.store.append(scope, conv.prepare(scope, chunk))
        else:
            conv.append(scope, chunk)  # the last batch through the service: the conversation is registered
    service.store.put_state(scope, "summaries", {"items": [
        {"id": f"s{n}", "text": f"summary {n}", "covers": [(n - 1) * messages // 10, n * messages // 10 - 1],
         "created_at": time.time(),
         "folds": None} for n in range(1, 10)]})
    return {"key": key, "conversation": "long", "messages": messages}


def timed(messages: int) -> None:
    """Seconds from a click to what it shows, in Chromium, on a conversation of ``messages`` messages."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with tempfile.TemporaryDirectory() as tmp, serving(f"sqlite:///{tmp}/memory.db", manager="sliding"
                                                       ) as (base, service):
        started = time.perf_counter()
        data = seed_long(service, messages)
        print(f"seeded {messages:,} messages in {time.perf_counter() - started:.1f} s")
        driver = chromium()
        try:
            def until(what: str, action: Any, done: Any) -> None:
                started = time.perf_counter()
                action()
                WebDriverWait(driver, 120, poll_frequency=0.01).until(done)
                print(f"{what}: {1000 * (time.perf_counter() - started):.0f} ms")

            def info(d: Any) -> str:
                return d.find_element(By.ID, "page-info").text

            last = (messages - 1) // 100 * 100
            until("load the page with a key", lambda: open_inspector(driver, base, data["key"]),
                  lambda d: d.find_elements(By.CSS_SELECTOR, "[data-conversation='long']"))
            until("open the conversation (window, summaries, chart, newest page)",
                  lambda: driver.find_element(By.CSS_SELECTOR, "[data-conversation='long']").click(),
                  lambda d: info(d).startswith(f"positions {last}") and d.find_elements(By.CSS_SELECTOR, "#chart polyline"))
            until("page to older messages", lambda: driver.find_element(By.ID, "prev").click(),
                  lambda d: info(d).startswith(f"positions {last - 100}"))
            until("jump to the oldest page", lambda: driver.find_element(By.ID, "first").click(),
                  lambda d: info(d).startswith("positions 0–99"))
            until("expand a summary of 10,000 messages (its first 200)",
                  lambda: driver.find_element(By.CSS_SELECTOR, "#summaries details summary").click(),
                  lambda d: len(d.find_elements(By.CSS_SELECTOR, "#summaries details[open] .expanded li")) == 200)
            until("show 200 more of it", lambda: driver.find_element(By.CSS_SELECTOR, "#summaries details[open] .more").click(),
                  lambda d: len(d.find_elements(By.CSS_SELECTOR, "#summaries details[open] .expanded li")) == 400)
        finally:
            driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "docs" / "inspector.png"))
    parser.add_argument("--time", type=int, metavar="MESSAGES", help="time the page on a conversation this long")
    args = parser.parse_args()
    if args.time:
        return timed(args.time)
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    with tempfile.TemporaryDirectory() as tmp, serving(f"sqlite:///{tmp}/memory.db") as (base, service):
        data = seed(service)
        driver = chromium()
        try:
            wait = WebDriverWait(driver, 30)
            open_inspector(driver, base, data["key"])
            wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, f"[data-conversation='{data['conversation']}']"))
                       ).click()
            wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#summaries details")))
            driver.find_element(By.ID, "query").send_keys("what was my locker code")
            driver.find_element(By.CSS_SELECTOR, "#search-form button").click()
            wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#hits button.show"))).click()
            wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#timeline li.hit")))
            driver.execute_script("window.scrollTo(0, 0)")
            time.sleep(0.3)
            driver.save_screenshot(args.out)
        finally:
            driver.quit()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
