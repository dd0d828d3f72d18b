"""Deploying a site: build an artifact, upload it to the site's webroot, switch its traffic."""

import io
import shutil
import tarfile

from django.utils.translation import gettext as _

from django_durajobs import JobError

from .files import demo_file, replace_with, sha256_of
from .models import DnsRecord, Release, Site
from .outside import take_time


def build(domain: str, version: str) -> dict:
    """Build the release into ``builds/``: a real tarball holding the site's page."""
    take_time()
    artifact = f"builds/{domain}-{version}.tar.gz"
    page = f"<!doctype html>\n<title>{domain}</title>\n<h1>{domain}</h1>\n<p>Release {version}</p>\n".encode()

    def write(path):
        with tarfile.open(path, "w:gz") as tar:
            entry = tarfile.TarInfo("index.html")
            entry.size = len(page)
            tar.addfile(entry, io.BytesIO(page))

    replace_with(demo_file(artifact), write)
    return {"artifact": artifact, "sha256": sha256_of(demo_file(artifact))}


def upload(domain: str, version: str, built: dict) -> dict:
    """Copy the build into the site's webroot and check that what arrived is what was built."""
    take_time()
    uploaded = f"webroot/{domain}/releases/{version}.tar.gz"
    replace_with(demo_file(uploaded), lambda path: shutil.copyfile(demo_file(built["artifact"]), path))
    if sha256_of(demo_file(uploaded)) != built["sha256"]:
        raise JobError(
            "upload_corrupted",
            _("The upload of %(domain)s %(version)s does not match its build.")
            % {"domain": domain, "version": version},
        )
    return {"path": uploaded, "sha256": built["sha256"]}


def dns_answer(domain: str) -> str | None:
    """What resolvers answer for ``domain``; None while its record's change propagates."""
    record = DnsRecord.objects.filter(name=domain).first()
    if record is None:
        raise JobError(
            "no_dns_record",
            _("%(domain)s has no DNS record: add one, then retry this job.") % {"domain": domain},
        )
    return record.target if record.is_visible() else None


def switch_traffic(domain: str, version: str, uploaded: dict) -> dict:
    """Make the uploaded release the live one, remembering the release it replaces.

    Database writes only: run it in an atomic step, so that it happens exactly once.
    """
    site = Site.objects.select_for_update().get(domain=domain)
    release, _created = Release.objects.get_or_create(
        site=site, version=version, defaults={"artifact": uploaded["path"], "sha256": uploaded["sha256"]}
    )
    if site.live_release_id != release.pk:
        release.replaced = site.live_release
        release.save(update_fields=["replaced"])
        site.live_release = release
        site.save(update_fields=["live_release"])
    return {"live": version, "replaced": release.replaced.version if release.replaced else None}


def switch_back(domain: str, version: str) -> dict:
    """Send the site's traffic back to the release that ``version`` replaced (an atomic step).

    Refused when another release went live since: switching back would take that one down.
    """
    site = Site.objects.select_for_update().get(domain=domain)
    release = Release.objects.filter(site=site, version=version).select_related("replaced").first()
    live = site.live_release.version if site.live_release else None
    if release is None:
        return {"live": live, "note": _("Traffic was never switched to %(version)s.") % {"version": version}}
    if site.live_release_id != release.pk:
        raise JobError(
            "superseded",
            _(
                "%(domain)s now serves %(live)s, not %(version)s: reverting this deploy would "
                "take that release down. Deploy the release you want instead."
            )
            % {"domain": domain, "live": live or _("no release"), "version": version},
        )
    site.live_release = release.replaced
    site.save(update_fields=["live_release"])
    return {"live": release.replaced.version if release.replaced else None}
