"""The admin as its users reach it: URLs, logged-in clients, messages, the parts of a page, and
its forms submitted as a browser would. Shared by the admin tests."""

from __future__ import annotations

from html.parser import HTMLParser

from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from django_durajobs import Job, JobLog
from tests.factories import JobFactory


def list_url() -> str:
    return reverse("admin:django_durajobs_job_changelist")


def change_url(job) -> str:
    return reverse("admin:django_durajobs_job_change", args=[job.pk])


def operate_url(job, operation: str) -> str:
    return reverse("admin:django_durajobs_job_operate", args=[job.pk, operation])


def summary_url(job) -> str:
    return reverse("admin:django_durajobs_job_live", args=[job.pk])


def staff_user(django_user_model, username: str, *codenames: str):
    """A staff user holding exactly the given ``django_durajobs`` permissions."""
    user = django_user_model.objects.create_user(username=username, is_staff=True)
    for codename in codenames:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_durajobs", codename=codename)
        )
    return user


def logged_in(user, **client_options) -> Client:
    client = Client(**client_options)
    client.force_login(user)
    return client


def messages_of(response, level=None) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request) if level is None or m.level == level]


def snapshot(job):
    """Everything about a job a refused or forbidden operation must leave alone: its row and its log."""
    row = Job.objects.filter(pk=job.pk).values().get()
    return row, list(JobLog.objects.filter(job_id=job.pk).order_by("id").values_list("line", flat=True))


def post_action(client, action: str, jobs, **extra):
    """What the changelist's action form posts: the action, the ticked rows, the form's index."""
    data = {"action": action, "_selected_action": [str(job.pk) for job in jobs], "index": "0", **extra}
    return client.post(list_url(), data)


def history_of(job):
    return LogEntry.objects.filter(
        content_type=ContentType.objects.get_for_model(Job), object_id=str(job.pk)
    ).order_by("id")


def shown_ids(response) -> list[int]:
    """The jobs the changelist shows, in the order shown."""
    return [job.pk for job in response.context["cl"].result_list]


def between(content: str, start: str, end: str | None = None) -> str:
    """The part of the page from ``start`` to ``end`` (or to the end of the page)."""
    assert start in content, f"{start!r} is not on the page"
    rest = content[content.index(start) :]
    return rest[: rest.index(end)] if end and end in rest else rest


def rows_in(content: str, section: str) -> int:
    """How many rows the job page's table of ``section`` (steps, log_lines, children) shows."""
    body = between(between(content, f'id="{section}-group"'), "<tbody>", "</tbody>")
    return body.count("<tr>")


def summary_part(content: str) -> str:
    return between(content, 'id="durajobs-summary"', '<fieldset class="module aligned')


class FormsAsABrowserSeesThem(HTMLParser):
    """Which form each button (``<button>``, ``<input type=submit>``) and input belongs to, by the
    HTML parsing rules browsers follow.

    A ``<form>`` start tag while a form is open is ignored (forms cannot nest), and ``</form>``
    closes the open form: what follows belongs to no form until the next ``<form>``.
    """

    def __init__(self, content: str):
        super().__init__(convert_charrefs=True)
        self.forms: list[dict] = []
        self.buttons: list[dict] = []
        self._form = None
        self._button = None
        self.feed(content)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            if self._form is None:
                self._form = {"attrs": attrs, "inputs": []}
                self.forms.append(self._form)
        elif tag == "input" and attrs.get("type") == "submit":
            self.buttons.append({"attrs": attrs, "text": attrs.get("value", ""), "form": self._form})
        elif tag == "input" and self._form is not None:
            self._form["inputs"].append(attrs)
        elif tag == "button":
            self._button = {"attrs": attrs, "text": "", "form": self._form}
            self.buttons.append(self._button)

    def handle_endtag(self, tag):
        if tag == "form":
            self._form = None
        elif tag == "button":
            self._button = None

    def handle_data(self, data):
        if self._button is not None:
            self._button["text"] += data

    def button(self, text: str) -> dict:
        found = [button for button in self.buttons if button["text"].strip() == text]
        assert len(found) == 1, f"{len(found)} buttons labelled {text!r}"
        return found[0]


def submit(client, page_url: str, content: str, button_text: str):
    """Click the button as a browser would: POST its form's fields to its form's action."""
    button = FormsAsABrowserSeesThem(content).button(button_text)
    form = button["form"]
    assert form is not None, f"the {button_text!r} button belongs to no form"
    data: dict[str, list[str]] = {}
    for field in form["inputs"]:
        if field.get("name") and field.get("type", "text") not in ("submit", "button", "checkbox", "radio"):
            data.setdefault(field["name"], []).append(field.get("value", ""))
    if button["attrs"].get("name"):
        data.setdefault(button["attrs"]["name"], []).append(button["attrs"].get("value", ""))
    return client.post(form["attrs"].get("action") or page_url, data)


def needs_user_job(**extra):
    return JobFactory(
        kind="states_ask",
        status="needs_user",
        user_message="Overwrite the existing site?",
        actions=[{"id": "approve", "label": "Approve"}, {"id": "reject", "label": "Reject it"}],
        **extra,
    )
