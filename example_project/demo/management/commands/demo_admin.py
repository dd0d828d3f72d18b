"""``manage.py demo_admin``: the demo's admin login, created once and printed every time."""

import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

USERNAME = "admin"


class Command(BaseCommand):
    help = gettext_lazy(
        "Create the demo's superuser 'admin' with a random password (once), and print the login."
    )

    def handle(self, *args, **options):
        # The password is kept beside the demo's database, so every run can print it again.
        password_file = Path(settings.DEMO_FILES_DIR) / "admin-password"
        user_model = get_user_model()
        user = user_model.objects.filter(username=USERNAME).first()
        kept = password_file.read_text().strip() if password_file.exists() else None
        if user is None:
            kept = secrets.token_urlsafe(12)
            password_file.parent.mkdir(parents=True, exist_ok=True)
            password_file.touch(mode=0o600)
            password_file.write_text(kept + "\n")
            user_model.objects.create_superuser(USERNAME, "admin@example.com", kept)
        elif kept is None or not user.check_password(kept):
            kept = _("(the one you set: this command did not change it)")
        self.stdout.write(
            _("username %(username)s, password %(password)s") % {"username": USERNAME, "password": kept}
        )
