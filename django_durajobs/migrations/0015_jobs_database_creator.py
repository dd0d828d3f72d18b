"""A job's creator without a foreign key constraint: the users may live in another database
than the jobs (``DURAJOBS["DATABASE"]``). 0001 and 0003 make none on a new database; this drops
the one an older install has."""

from django.conf import settings
from django.db import migrations, models

import django_durajobs.routers


class Migration(migrations.Migration):
    dependencies = [
        ("django_durajobs", "0014_versions_reruns_fairness"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="job",
            name="created_by",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django_durajobs.routers.creator_deleted,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
                verbose_name="created by",
            ),
        ),
    ]
