"""Groups and topics that vanish in the middle of a lag pass: the real admin client, which
deletes the groups right after ListGroups and the topics right after the committed offsets are
read, once each."""

from __future__ import annotations

import time
from typing import Any


class DeleteMidPass:
    """The real admin client with a fault at a real point of a lag pass: right after ListGroups
    the ``groups`` are deleted (they vanish mid-pass); right after the committed offsets are read
    the ``topics`` are deleted (their partitions are committed but gone). Once each; ``groups``
    may be empty."""

    def __init__(self, admin: Any, topics: list[str], groups: list[str]) -> None:
        self._admin, self.topics, self.groups = admin, topics, groups
        self.groups_done = self.topics_done = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._admin, name)  # everything else is the real client

    def list_groups(self, *a: Any, **kw: Any) -> Any:
        out = self._admin.list_groups(*a, **kw)
        if not self.groups_done:
            self.groups_done = True
            if self.groups:
                self._admin.delete_groups(self.groups)
        return out

    def list_group_offsets(self, *a: Any, **kw: Any) -> Any:
        out = self._admin.list_group_offsets(*a, **kw)
        if not self.topics_done:
            self.topics_done = True
            self._admin.delete_topics(self.topics)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if not {t["name"] for t in self._admin.describe_topics()} & set(self.topics):
                    break
                time.sleep(0.2)
        return out
