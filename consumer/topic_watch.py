"""The deleted-topic watch: :class:`DeletedTopicWatch` tells when a consumed topic was deleted.

Without it kafka-python keeps a deleted topic's partitions assigned and fetches nothing from
them forever, silently. A topic is *deleted* once the cluster metadata has not listed it for
``gone_after_s`` after it was seen at least once (a topic not created yet is not deleted: it
is assigned once it exists). kafka-python refreshes metadata only on errors or every
``metadata_max_age_ms`` (5 min), so the watch asks for a refresh every ``gone_after_s`` while
all is well, and at every check while a topic is missing. What to do about a deleted topic
(release its partitions, drop them from the subscription) is the consumer's business.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafka.cluster import ClusterMetadata

CHECK_INTERVAL_S = 0.5


class DeletedTopicWatch:
    """State of the watch; called from the pump thread only (not thread-safe)."""

    def __init__(self, gone_after_s: float) -> None:
        self.gone_after_s = gone_after_s
        self._missing_since: dict[str, float] = {}  # topic -> when metadata stopped listing it
        self._seen: set[str] = set()
        self._next_check = 0.0
        self._next_refresh = 0.0

    def seen(self, topic: str) -> None:
        """Records of ``topic`` arrived: it existed, so its absence later means deleted."""
        self._seen.add(topic)

    def due(self, now: float) -> bool:
        """Whether :meth:`check` would look now (it looks at most every 0.5 s)."""
        return now >= self._next_check

    def check(self, cluster: ClusterMetadata, topics: Iterable[str], now: float) -> list[str]:
        """The topics of ``topics`` found deleted now (each reported once); at most every 0.5 s."""
        if not self.due(now):
            return []
        self._next_check = now + CHECK_INTERVAL_S
        gone = []
        for topic in set(topics):
            if cluster.partitions_for_topic(topic):
                self._missing_since.pop(topic, None)
                self._seen.add(topic)
                continue
            if topic not in self._seen:  # not created yet: assigned once it exists
                continue
            since = self._missing_since.setdefault(topic, now)
            if now - since >= self.gone_after_s:
                gone.append(topic)
        for topic in gone:
            self._missing_since.pop(topic, None)
        if not gone and (self._missing_since or now >= self._next_refresh):
            cluster.request_update()
            self._next_refresh = now + self.gone_after_s
        return gone
