from django.db import migrations, models

DUE_ORDER = ["status", "-priority", "-interrupted", "next_run_at", "id"]


class Migration(migrations.Migration):
    """Interrupted work keeps its place: the claim's index gains ``interrupted`` after the priority.

    The new index is built before the old one is dropped, so claims never go without one (MySQL
    and MariaDB change the schema outside any transaction).
    """

    dependencies = [
        ("django_durajobs", "0010_events"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="interrupted",
            field=models.BooleanField(
                default=False,
                help_text="Handed back by a lost or stopping worker: claimed before the jobs of its priority "
                "that have not started, until it runs again.",
                verbose_name="interrupted",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(fields=DUE_ORDER, name="durajobs_due_resume"),
        ),
        migrations.RemoveIndex(model_name="job", name="durajobs_due"),
        migrations.RenameIndex(model_name="job", new_name="durajobs_due", old_name="durajobs_due_resume"),
    ]
