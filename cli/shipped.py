"""The files an installation starts from, as the wheel carries them: sample configs, systemd
units, the Prometheus and Alertmanager examples, the alert rules and the dashboards.

In the wheel ``config/`` and ``deploy/`` are packed under ``cli/shipped/`` (pyproject's
``force-include``); run from the repository they are read where they are. The rules and the
dashboards are package data of ``alerts`` and ``dashboards`` either way.

:func:`files` says what ``linkwatch init DIR`` writes and where; :func:`render` makes a file
fit the directory it goes to (the units and the Prometheus example name ``/etc/linkwatch`` and
``/opt/linkwatch/bin/linkwatch``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parent

# (file as shipped under config/, name it is written under)
CONFIGS = [
    ("agent.sample.yaml", "agent.yaml"),
    ("lag.sample.yaml", "lag.yaml"),
    ("probe.sample.yaml", "probe.yaml"),
    ("analyzer.sample.yaml", "analyzer.yaml"),
    ("remediation.sample.yaml", "remediation.yaml"),
    ("alerts.example.yml", "alerts.yml"),
    ("consumer.yaml", "consumer.yaml"),
    ("prometheus.example.yml", "prometheus.yml"),
]
# The directory and the linkwatch command the shipped units and examples name.
DEFAULT_CONFIG_DIR = "/etc/linkwatch"
DEFAULT_COMMAND = "/opt/linkwatch/bin/linkwatch"


def shipped_dir(name: str) -> Path:
    """``config`` or ``deploy``: inside the installed wheel, else the repository's."""
    packed = _HERE / "shipped" / name
    return packed if packed.is_dir() else _REPO / name


@dataclass(frozen=True)
class Shipped:
    source: Path
    target: str  # relative to the directory written
    mode: int = 0o644


def files() -> list[Shipped]:
    """Every file ``linkwatch init`` writes, in order."""
    import alerts
    import dashboards

    config, deploy = shipped_dir("config"), shipped_dir("deploy")
    alerts_dir = Path(alerts.__file__).parent
    dashboards_dir = Path(dashboards.__file__).parent
    out = [Shipped(config / src, dst) for src, dst in CONFIGS]
    out.append(Shipped(alerts_dir / "alertmanager.example.yml", "alertmanager.yml"))
    out += [Shipped(p, f"rules/{p.name}") for p in sorted((alerts_dir / "rules").glob("*.yml"))]
    out += [Shipped(p, f"systemd/{p.name}") for p in sorted(deploy.glob("*.service"))]
    out += [Shipped(p, f"dashboards/{p.name}") for p in sorted(dashboards_dir.glob("*.json"))]
    out += [
        Shipped(p, f"dashboards/provisioning/{p.name}")
        for p in sorted((dashboards_dir / "provisioning").glob("*.yaml"))
    ]
    missing = [str(f.source) for f in out if not f.source.is_file()]
    if missing or not any(f.target.startswith("systemd/") for f in out):
        raise FileNotFoundError(f"this installation lacks its shipped files: {missing or deploy}")
    return out


def render(text: str, config_dir: Path, command: Path) -> str:
    """The shipped text for a config directory and a ``linkwatch`` command other than the
    defaults it names."""
    return text.replace(DEFAULT_COMMAND, str(command)).replace(DEFAULT_CONFIG_DIR, str(config_dir))
