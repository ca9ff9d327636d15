"""linkwatch's own groups and topics are left out by default, by one shared pattern
(:data:`linkwatch.records.OWN_NAMES`): the lag collector's groups (the probe's commit groups were
reported STOP beside the probe), the rack check's topics (the probe's topic has one replica per
partition on purpose)."""

from __future__ import annotations

import pytest

from lag.collector import CollectorConfig, LagCollector
from lag.rack import PartitionPlacement, RackConfig, spread
from linkwatch.records import FINDINGS_TOPIC, SAMPLES_TOPIC, is_own

NAMES = [
    # (name, linkwatch's own?)
    ("linkwatch.probe.commit.host-1.0", True),  # the probe's commit groups
    ("linkwatch-lag-lease", True),  # the lag collectors' lease group
    ("linkwatch.remediation.lease", True),
    ("linkwatch.probe", True),  # the probe's topic
    (SAMPLES_TOPIC, True),
    (FINDINGS_TOPIC, True),
    ("linkwatchers", False),  # no separator: someone else's
    ("orders-linkwatch-x", False),
    ("orders", False),
    ("__consumer_offsets", False),  # internal, left out by its own rule
]


@pytest.mark.parametrize(("name", "own"), NAMES)
def test_one_pattern_tells_linkwatch_names(name: str, own: bool) -> None:
    assert is_own(name) is own


@pytest.mark.parametrize(("name", "own"), NAMES)
def test_the_lag_collector_leaves_out_its_own_groups_by_default(name: str, own: bool) -> None:
    collector = LagCollector(admin=None, reader=None, config=CollectorConfig())
    assert collector.wanted(name) is not own


def test_the_rack_check_leaves_out_the_probes_single_replica_topic() -> None:
    racks = {1: "a", 2: "b"}
    probe = [PartitionPlacement("linkwatch.probe", p, b, (b,), (b,)) for p, b in ((0, 1), (1, 2))]
    theirs = PartitionPlacement("orders", 0, 1, (1,), (1,))
    assert spread([*probe, theirs], racks, RackConfig()).single_replica == {"orders": [0]}
    everything = spread([*probe, theirs], racks, RackConfig(include_internal=True)).single_replica
    assert everything == {"linkwatch.probe": [0, 1], "orders": [0]}
