"""What the management commands share."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils.functional import Promise


class TranslatedCommand(BaseCommand):
    """A command whose ``help`` is a lazy translation: it is made text, in the language active
    when the help is shown, before argparse (which takes only ``str``) formats it."""

    help: str | Promise = ""  # type: ignore[assignment]  # BaseCommand declares only str

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        if parser.description is not None:
            parser.description = str(parser.description)
        return parser
