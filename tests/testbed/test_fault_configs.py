"""The config faults' reads and writes when the admin client's metadata lost a broker.

A fake admin client stands in for kafka-python's here: the real one loses a broker from its
metadata only when it refreshes while that broker is fenced (paused or restarting), which no
test can time. The fake raises what the real one raised in the fault matrix (run 9's d15:
``UnknownBrokerIdError: 1`` after every broker had been paused), then answers."""

from __future__ import annotations

import pytest
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import UnknownBrokerIdError

from testbed.faults import configs


class _FakeCluster:
    def __init__(self) -> None:
        self.updates = 0

    def request_update(self) -> None:
        self.updates += 1


class _FakeManager:
    def __init__(self) -> None:
        self.cluster = _FakeCluster()


class FakeAdmin:
    """Unknown broker for the first ``lost`` calls (until the metadata is asked for again)."""

    def __init__(self, lost: int) -> None:
        self.lost = lost
        self.calls = 0
        self._manager = _FakeManager()

    def _maybe_lost(self) -> None:
        self.calls += 1
        if self.calls <= self.lost:
            raise UnknownBrokerIdError(1)

    def describe_configs(self, resources, config_filter="all"):
        self._maybe_lost()
        return {"broker": {"1": {"num.io.threads": {"value": "8", "config_source": "DEFAULT_CONFIG"}}}}

    def alter_configs(self, resources, raise_on_unknown=False):
        self._maybe_lost()
        return {"broker": {"1": "OK"}}


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(configs.time, "sleep", lambda _s: None)


def test_a_broker_the_metadata_lost_is_looked_up_again() -> None:
    admin = FakeAdmin(lost=2)
    assert configs.broker_config(admin, 1, "num.io.threads") == "8"
    assert admin.calls == 3
    assert admin._manager.cluster.updates == 2  # fresh metadata asked for at each miss
    admin = FakeAdmin(lost=1)
    configs.alter(admin, [ConfigResource(ConfigResourceType.BROKER, "1", {"num.io.threads": "1"})])
    assert admin.calls == 2


def test_a_broker_that_stays_unknown_is_an_error_after_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(configs, "BROKER_LOOKUP_S", -1.0)  # spent at once
    admin = FakeAdmin(lost=10**6)
    with pytest.raises(UnknownBrokerIdError):
        configs.broker_config(admin, 1, "num.io.threads")
    assert admin.calls == 1
