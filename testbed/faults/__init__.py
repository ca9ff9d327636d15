"""Faults that make a real broker slow, each reversible, for tests and the demo; one kind a module.

* :mod:`.pause` — :class:`PauseDutyCycle`: SIGSTOP/SIGCONT the broker JVM in a duty cycle: every
  stage of every request it handles gets slower, like a long GC or a stuck disk.
* :mod:`.request_handlers` — :func:`starve_request_handlers`: the dynamic per-broker
  ``num.io.threads`` set low, so requests wait in the request queue (the RequestQueue stage).
* :mod:`.topic_configs` — :func:`topic_configs`: topic config overrides (``flush.messages=1``:
  slow log appends on the topics' leaders), deleted on exit whatever they read back as.
* :mod:`.replication_throttle` — :func:`throttle_replication`:
  ``leader/follower.replication.throttled.rate`` on a broker and throttled replicas ``*`` on
  topics: followers fall behind, acks=all produce waits (Remote).
* :mod:`.stalled_follower` — :func:`stall_follower`: a broker made a follower (not leader) of
  topics' partitions and paused in a duty cycle: acks=all produce waits on it in the leaders'
  Remote stage.
* :mod:`.log_appends` — :func:`slow_log_appends`: per-broker ``log.flush.interval.messages=1``:
  every append on that broker only is flushed, like a slow disk (its Local stage grows).
* :mod:`.disk` — :func:`throttle_disk_writes`: the broker JVM's writes to its disk capped (cgroup
  v1 blkio); :func:`slow_disk`: both, a slow disk of its own on a machine where brokers share one.
* :mod:`.cpu` — :func:`starve_cpu`: the broker JVM pinned to one CPU that spinning processes
  share: its RequestQueue and Local stages grow.
* :mod:`.slow_client` — :class:`SlowClient`: a consumer that stalls before reading each fetch
  response: the broker's Send stage grows for that client id only.
* :mod:`.safepoints` — :class:`SafepointStorm`: full GCs or heap dumps one after another through
  the broker's Jolokia: stop-the-world pauses of seconds, mostly unseen by its own timers.
* :mod:`.link` — :class:`CongestedLink`: an HTB rate cap on loopback for one broker's port (a
  congested or degraded network path to it).
* :mod:`.restart` — :func:`rolling_restart`: each broker stopped cleanly and started again in
  turn (planned maintenance: nothing to remediate).

Beside them, faults of the lag collector's and the cold-read tests' own: :mod:`.mid_pass`
(:class:`DeleteMidPass`: groups and topics deleted in the middle of a lag pass) and
:mod:`.page_cache` (:func:`evict_page_cache`: a segment made cold).

Shared: :mod:`.registry` (every fault registers its undo in :data:`ACTIVE`, so a test teardown
or Ctrl-C in the demo calls :func:`revert_all` and nothing stays broken), :mod:`.configs`
(dynamic configs set and waited for; :func:`broker_config`, :func:`topic_config` read them) and
:mod:`.partitions` (replica orders and leaders; :func:`restore_preferred_leaders`).

Each fault is a context manager (or has ``start``/``stop``) and is imported from here:
``from testbed import faults``, then ``faults.PauseDutyCycle(pid).start()``, ``faults.revert_all()``.
"""

from testbed.faults.configs import broker_config, topic_config
from testbed.faults.cpu import starve_cpu
from testbed.faults.disk import BLKIO_ROOT, blkio_cgroup, block_device, slow_disk, throttle_disk_writes
from testbed.faults.link import CongestedLink
from testbed.faults.log_appends import slow_log_appends
from testbed.faults.mid_pass import DeleteMidPass
from testbed.faults.page_cache import evict_page_cache
from testbed.faults.partitions import restore_preferred_leaders
from testbed.faults.pause import PauseDutyCycle
from testbed.faults.registry import ACTIVE, revert_all
from testbed.faults.replication_throttle import throttle_replication
from testbed.faults.request_handlers import starve_request_handlers
from testbed.faults.restart import rolling_restart
from testbed.faults.safepoints import SafepointStorm
from testbed.faults.slow_client import SlowClient
from testbed.faults.stalled_follower import stall_follower
from testbed.faults.topic_configs import topic_configs

__all__ = [
    "ACTIVE",
    "BLKIO_ROOT",
    "CongestedLink",
    "DeleteMidPass",
    "PauseDutyCycle",
    "SafepointStorm",
    "SlowClient",
    "blkio_cgroup",
    "block_device",
    "broker_config",
    "evict_page_cache",
    "restore_preferred_leaders",
    "revert_all",
    "rolling_restart",
    "slow_disk",
    "slow_log_appends",
    "stall_follower",
    "starve_cpu",
    "starve_request_handlers",
    "throttle_disk_writes",
    "throttle_replication",
    "topic_config",
    "topic_configs",
]
