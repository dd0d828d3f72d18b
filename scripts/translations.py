"""Keep the translation catalogs in step with the code (run by scripts/translations).

Each catalog is made by Django's ``makemessages`` from the app's own sources, without source
locations (they would change with every edit), and compiled by ``compilemessages``; both ``.po``
and ``.mo`` are committed, so an installed package needs no gettext tools.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: The apps that carry catalogs, and the settings module that loads each of them.
APPS = {
    REPO / "django_durajobs": "tests.settings",
    REPO / "example_project" / "demo": "example_project.settings",
}
DOMAINS = ("django", "djangojs")
#: Header lines that change on every run, left out when catalogs are compared.
VOLATILE_HEADERS = ("POT-Creation-Date:", "PO-Revision-Date:")


def languages(app: Path) -> list[str]:
    locale = app / "locale"
    return sorted(path.name for path in locale.iterdir() if (path / "LC_MESSAGES").is_dir())


def run_django(settings: str, cwd: Path, *arguments: str) -> None:
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": settings, "PYTHONPATH": str(REPO)}
    subprocess.run(
        [sys.executable, "-m", "django", *arguments, "--verbosity", "0"], cwd=cwd, env=environment, check=True
    )


def make_messages(app: Path, settings: str, language_codes: list[str]) -> None:
    locale_options = [option for code in language_codes for option in ("--locale", code)]
    for domain in DOMAINS:
        run_django(
            settings,
            app,
            "makemessages",
            *locale_options,
            "--domain",
            domain,
            "--no-location",
            "--no-obsolete",
            "--ignore",
            "migrations/*",
        )
    run_django(settings, app, "compilemessages", *locale_options)


def catalogs(app: Path) -> list[Path]:
    return sorted((app / "locale").glob("*/LC_MESSAGES/*.po"))


def stable_text(po: Path) -> str:
    lines = po.read_text(encoding="utf-8").splitlines()
    return "\n".join(line for line in lines if not line.strip('"').startswith(VOLATILE_HEADERS))


def problems_of(po: Path, made: Path, committed_dir: Path) -> list[str]:
    """What is wrong with the committed catalog ``po``, given ``made``: the one made from the code now."""
    found = []
    if stable_text(po) != stable_text(made):
        found.append("is not what makemessages makes from the code now (a text added, changed or removed)")
    # msgfmt --statistics: "612 translated messages, 1 fuzzy translation, 2 untranslated messages."
    statistics = subprocess.run(
        ["msgfmt", "--statistics", "-o", "/dev/null", str(made)], capture_output=True, text=True
    ).stderr
    for count, name in re.findall(r"(\d+) (fuzzy|untranslated)", statistics):
        found.append(f"has {count} {name} message(s)")
    checked = subprocess.run(
        ["msgfmt", "--check", "-o", "/dev/null", str(po)], capture_output=True, text=True
    )
    if checked.returncode:
        found.append(f"fails msgfmt --check:\n{checked.stderr}")
    mo = po.with_suffix(".mo")
    fresh = committed_dir / "fresh.mo"
    subprocess.run(["msgfmt", "-o", str(fresh), str(po)], check=True)
    if not mo.exists() or mo.read_bytes() != fresh.read_bytes():
        found.append(f"{mo.name} is not compiled from it (run scripts/translations)")
    return found


def check() -> int:
    failures = 0
    with tempfile.TemporaryDirectory() as scratch:
        for app, settings in APPS.items():
            copy = Path(scratch) / app.relative_to(REPO)
            shutil.copytree(app, copy, ignore=shutil.ignore_patterns("__pycache__"))
            make_messages(copy, settings, languages(app))
            for po in catalogs(app):
                made = copy / po.relative_to(app)
                for problem in problems_of(po, made, Path(scratch)):
                    failures += 1
                    print(f"{po.relative_to(REPO)} {problem}")
    if failures:
        print("translations: fix the catalogs above, then run scripts/translations", file=sys.stderr)
        return 1
    print("translations: every catalog is complete, current and compiled")
    return 0


def update(new_language: str | None) -> int:
    for app, settings in APPS.items():
        codes = languages(app)
        if new_language and new_language not in codes:
            (app / "locale" / new_language / "LC_MESSAGES").mkdir(parents=True)
            codes.append(new_language)
        make_messages(app, settings, codes)
        for po in catalogs(app):
            print(f"updated {po.relative_to(REPO)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--check", action="store_true", help="fail if a catalog is stale, incomplete or uncompiled"
    )
    mode.add_argument("--add", metavar="LANGUAGE", help="start catalogs for a new language (e.g. ja, pt_BR)")
    options = parser.parse_args()
    return check() if options.check else update(options.add)


if __name__ == "__main__":
    sys.exit(main())
