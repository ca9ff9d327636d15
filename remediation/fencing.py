"""Every call that changes the cluster is fenced: the actor proves it still holds the lease first.

:class:`FencedAdmin` is the admin client remediations are handed (``Context.admin``). Its
methods that change the cluster (:data:`CHANGES`) first run ``fence()`` — with the lease on,
:meth:`remediation.state.TopicStateStore.fence`: a transaction the broker accepts only from
the lease group's current generation and from the newest producer of the state's transactional
id — and raise :class:`~remediation.state.Fenced` (nothing sent) when it fails; every other
attribute is the wrapped client's, unchanged. A remediation cannot reach the raw client, so a
third-party remediation is fenced as the built-ins are.

What it cannot close: the few microseconds between the check and the request leaving the
process. Kafka's admin API takes no fencing token, so a pause that lands exactly there can still
send one call after the lease moved; that step was written ``intent`` before, so the new holder
sees it as "maybe sent" and recovers it like a killed holder's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from remediation.failpoints import failpoint

# The kafka-python admin methods that change a cluster.
CHANGES = frozenset(
    {
        "alter_partition_reassignments",
        "elect_leaders",
        "alter_configs",
        "incremental_alter_configs",
        "alter_replica_log_dirs",
        "create_topics",
        "delete_topics",
        "create_partitions",
        "delete_records",
        "create_acls",
        "delete_acls",
        "delete_consumer_groups",
        "alter_consumer_group_offsets",
    }
)


class FencedAdmin:
    """The admin client as remediations see it: changes go through ``fence()`` first."""

    def __init__(
        self, admin: Any, fence: Callable[[], None], on_call: Callable[[str], None] = lambda n: None
    ):
        self._admin = admin
        self._fence = fence
        self._on_call = on_call
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._admin, name)
        if name not in CHANGES:
            return attr

        def fenced(*args: Any, **kwargs: Any) -> Any:
            failpoint("before_fence")
            self._fence()
            failpoint("before_call")
            self._on_call(name)
            self.calls += 1
            return attr(*args, **kwargs)

        return fenced
