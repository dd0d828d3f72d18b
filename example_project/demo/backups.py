"""Backing up and restoring the shop's tables (products and orders) as gzipped JSON files."""

import gzip
import shutil
from itertools import chain

from django.core import serializers
from django.core.management.color import no_style
from django.db import connection
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from django_durajobs import JobError

from .files import demo_file, replace_with, sha256_of
from .models import Backup, Order, Product
from .outside import take_time

#: In the order they are loaded back: an order refers to its product.
BACKED_UP = (Product, Order)


def dump(relative: str) -> dict:
    """Write every backed-up row to a JSON file."""
    take_time()
    rows = list(chain.from_iterable(model.objects.order_by("pk") for model in BACKED_UP))
    replace_with(
        demo_file(relative),
        lambda path: path.write_text(serializers.serialize("json", rows, indent=1), encoding="utf-8"),
    )
    return {"file": relative, "rows": len(rows)}


def compress(dumped: dict) -> dict:
    """Gzip the dump and remove the uncompressed file.

    Safe to run again after an interruption: if the dump is already gone, it was compressed.
    """
    take_time()
    source = demo_file(dumped["file"])
    compressed = f"{dumped['file']}.gz"
    if source.exists():

        def write(path):
            with source.open("rb") as plain, gzip.open(path, "wb") as packed:
                shutil.copyfileobj(plain, packed)

        replace_with(demo_file(compressed), write)
        source.unlink()
    path = demo_file(compressed)
    return {
        "file": compressed,
        "rows": dumped["rows"],
        "size_bytes": path.stat().st_size,
        "sha256": sha256_of(path),
    }


def write(relative: str) -> dict:
    """Dump and compress in one go (a safety copy, the seeded backup)."""
    return compress(dump(relative))


def record(written: dict, purpose: str) -> int:
    """Catalogue a written backup file; returns the Backup's id."""
    return Backup.objects.create(
        file=written["file"],
        purpose=purpose,
        size_bytes=written["size_bytes"],
        sha256=written["sha256"],
        rows=written["rows"],
    ).pk


def _backup(backup_id: int) -> Backup:
    backup = Backup.objects.filter(pk=backup_id).first()
    if backup is None:
        raise JobError("backup_missing", _("There is no backup %(backup)s.") % {"backup": backup_id})
    return backup


def restore_question(backup_id: int) -> str:
    backup = _backup(backup_id)
    return ngettext(
        "Replace every product and order with the %(rows)s row of %(backup)s? "
        "A safety copy of the current data is taken first.",
        "Replace every product and order with the %(rows)s rows of %(backup)s? "
        "A safety copy of the current data is taken first.",
        backup.rows,
    ) % {"rows": backup.rows, "backup": backup}


def verify(backup_id: int) -> dict:
    """Check that the backup's file is there and unchanged since it was written."""
    take_time()
    backup = _backup(backup_id)
    path = demo_file(backup.file)
    if not path.exists():
        raise JobError(
            "backup_missing",
            _("%(backup)s: its file %(path)s is missing.") % {"backup": backup, "path": path},
        )
    if sha256_of(path) != backup.sha256:
        raise JobError(
            "backup_corrupted",
            _("%(backup)s: %(path)s does not match its checksum.") % {"backup": backup, "path": path},
        )
    return {"backup_id": backup.pk, "rows": backup.rows}


def restore(backup_id: int) -> dict:
    """Make the backed-up tables hold exactly the backup's rows (in an atomic step: all or nothing).

    Rows are updated in place, not deleted and inserted again, so that a job holding a lock on
    an order waits for the restore and then reads the restored row.
    """
    backup = _backup(backup_id)
    with gzip.open(demo_file(backup.file), "rt", encoding="utf-8") as stream:
        rows = list(serializers.deserialize("json", stream))
    for model in reversed(BACKED_UP):
        kept = [row.object.pk for row in rows if isinstance(row.object, model)]
        model.objects.exclude(pk__in=kept).delete()
    for row in rows:
        row.save()
    # As loaddata does: rows created later must not collide with restored ids (PostgreSQL sequences).
    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_sql(no_style(), BACKED_UP):
            cursor.execute(sql)
    return {"backup_id": backup.pk, "rows": len(rows)}
