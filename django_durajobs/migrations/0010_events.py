"""Named events: the Event table, and the event a waiting job is woken by."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_durajobs", "0009_console"),
    ]

    operations = [
        migrations.CreateModel(
            name="Event",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=200, unique=True, verbose_name="name")),
                ("payload", models.JSONField(blank=True, null=True, verbose_name="payload")),
                (
                    "sent_at",
                    models.DateTimeField(
                        db_index=True, default=django.utils.timezone.now, verbose_name="sent"
                    ),
                ),
                ("sent_by", models.CharField(blank=True, default="", max_length=255, verbose_name="sent by")),
            ],
            options={
                "verbose_name": "event",
                "verbose_name_plural": "events",
                "ordering": ["-sent_at", "-id"],
            },
        ),
        migrations.AddField(
            model_name="job",
            name="timed_out_events",
            field=models.JSONField(blank=True, null=True, verbose_name="timed-out event waits"),
        ),
        migrations.AddField(
            model_name="job",
            name="waits_for_event",
            field=models.CharField(
                blank=True,
                default="",
                help_text="Woken when an event of this name is sent.",
                max_length=200,
                verbose_name="waits for event",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(fields=["waits_for_event", "status"], name="durajobs_event_waiters"),
        ),
    ]
