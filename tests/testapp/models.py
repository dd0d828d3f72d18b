from django.db import models


class SideEffect(models.Model):
    """A row a test job writes, so a test can count how often a step really ran."""

    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name
