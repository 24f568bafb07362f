"""The files a head node installs beside the wheel: the systemd unit, the logrotate file and the
config template that ``gpuplan init`` writes (docs/operations.md, "Install on a head node")."""

from __future__ import annotations

from pathlib import Path

#: Where this package's files are, in the installed wheel.
FOLDER = Path(__file__).parent
UNIT = FOLDER / "gpuplan.service"
LOGROTATE = FOLDER / "gpuplan.logrotate"
CONFIG_TEMPLATE = FOLDER / "gpuplan.yaml"

#: The service's defaults, as the unit names them.
DEFAULT_CONFIG = Path("/etc/gpuplan/gpuplan.yaml")
DEFAULT_DB = "sqlite:////var/lib/gpuplan/gpuplan.db"
