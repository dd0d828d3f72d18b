"""Where the demo keeps its files (builds, webroots, backups, server disks): under DEMO_FILES_DIR."""

import hashlib
import os
from pathlib import Path

from django.conf import settings


def demo_file(relative: str) -> Path:
    """The absolute path of a demo file; the database stores the relative one."""
    return Path(settings.DEMO_FILES_DIR) / relative


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def replace_with(path: Path, write) -> None:
    """Create ``path`` through ``write(temporary_path)`` and a rename, so that a step that is
    interrupted and runs again never finds a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.part")
    write(partial)
    partial.replace(path)
