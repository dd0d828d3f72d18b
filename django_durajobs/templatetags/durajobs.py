"""``{% moment value %}``: a moment as the console shows it ("3 min ago", the exact time on hover)."""

from __future__ import annotations

from datetime import datetime

from django import template

from ..admin.display import time_tag

register = template.Library()


@register.simple_tag
def moment(value: datetime | None) -> str:
    return time_tag(value)
