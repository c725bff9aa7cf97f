"""The searchable delays kept per tenant are bounded: a tenant idle for a while is forgotten, and at most so many
tenants are kept (each tenant's list grew for good, one more for every tenant the process ever served).
"""

from __future__ import annotations

import httpx
import pytest

from fullrecall.service.delays import Delays


@pytest.mark.parametrize("backend", ["sqlite"])
def test_delays_of_idle_tenants_are_dropped_and_their_number_is_bounded(live):
    base, service = live
    now = [0.0]  # the delays' clock, moved by the test: an hour passes at once
    service.indexer.delays = Delays(idle_seconds=3600, max_tenants=2, clock=lambda: now[0])
    keys = {t: service.keys.create(t)[0] for t in ("t1", "t2", "t3")}

    def samples(tenant: str) -> int:
        r = httpx.get(f"{base}/v1/stats", headers={"Authorization": f"Bearer {keys[tenant]}"}, timeout=30)
        assert r.status_code == 200, r.text
        return r.json()["searchable_delay"]["samples"]

    for tenant, key in keys.items():
        r = httpx.post(f"{base}/v1/conversations/c/messages", headers={"Authorization": f"Bearer {key}"},
                       json={"messages": [{"role": "user", "content": f"hello from {tenant}"}]}, timeout=30)
        assert r.status_code == 201, r.text
        assert service.indexer.flush(30)
        now[0] += 1
    assert [samples(t) for t in keys] == [0, 1, 1]  # two tenants kept: the one idle longest went
    assert service.indexer.delays.tenants() == 2 and len(service.indexer.delays.of()) == 3  # the process's: all
    now[0] += 3600
    assert [samples(t) for t in keys] == [0, 0, 0] and service.indexer.delays.tenants() == 0


def test_a_tenants_delays_are_its_own_last_ones():
    now = [0.0]
    delays = Delays(idle_seconds=60, clock=lambda: now[0])
    for i in range(5000):
        delays.add("busy", i)
        now[0] += 0.001
    delays.add("quiet", 7.0)
    assert delays.of("quiet") == [7.0] and delays.of("busy") == list(range(4000, 5000))
    now[0] += 59
    delays.add("busy", 1.0)
    now[0] += 2  # quiet idle for 61 s, busy for 2
    assert delays.of("quiet") == [] and delays.of("busy")[-1] == 1.0 and delays.tenants() == 1
