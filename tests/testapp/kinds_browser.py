"""Job kinds for the browser test of the admin (tests/e2e/test_browser.py), and its screenshots.

They look like the work an operator's admin really lists — deploys, backups, an order that waits
for its payment, a module updated on several servers — but do nothing outside the database. The
subject decides how a run goes:

- ``browser_deploy_site``: ``domain``; ``occupied`` asks a person whether to overwrite the site
  already there (actions ``overwrite`` and ``keep``).
- ``browser_backup_database``: ``host``; ``unreachable`` makes the dump step time out (a failure).
- ``browser_order_hosting``: ``invoice``, ``amount``; waits in ``awaiting_payment`` until resumed.
- ``browser_update_module``: ``module``, ``servers``, ``failing`` (servers whose child job fails);
  one child job per server, and a partial family fails the parent with ``error_code="partial"``.
- ``browser_renew_certificate``: ``domain``; finishes at once (the test enqueues it for later).
"""

from __future__ import annotations

from datetime import timedelta

from django_durajobs import JobError, Status, job


@job(
    "browser_deploy_site",
    title="Deploy site",
    steps=[
        ("build", "Build the site"),
        ("upload", "Upload files"),
        ("check_dns", "Check DNS"),
        ("switch", "Switch traffic"),
    ],
    max_attempts=3,
)
def browser_deploy_site(job, ctx):
    domain = job.subject["domain"]
    build = ctx.step("build", lambda: {"artifact": f"{domain}-2024.06.1.tar.gz", "files": 1284})
    ctx.log(f"Built {build['artifact']} ({build['files']} files).")
    ctx.progress(25)
    if job.subject.get("occupied") and ctx.resume_action is None:
        ctx.needs_user(
            f"{domain} already serves a site from another account. Overwrite it with this release?",
            actions=[
                {"id": "overwrite", "label": "Overwrite the site"},
                {"id": "keep", "label": "Keep the existing site"},
            ],
        )
    if ctx.resume_action == "keep":
        ctx.log("The existing site was kept; nothing deployed.")
        return {"deployed": False}
    ctx.step("upload", lambda: {"uploaded": build["files"]})
    ctx.progress(60)
    ctx.step("check_dns", lambda: {"a": "192.0.2.10"})
    ctx.progress(80)
    ctx.step("switch", lambda: {"release": "2024.06.1"})
    return {"url": f"https://{domain}/", "release": "2024.06.1"}


@browser_deploy_site.revert
def undo_browser_deploy_site(job, ctx):
    ctx.step("restore_previous", lambda: {"release": "2024.05.3"}, title="Restore the previous release")


def _dump(host: str, unreachable: bool):
    if unreachable:
        raise TimeoutError(f"pg_dump: connection to {host}.internal port 5432 timed out after 30 s")
    return {"file": f"{host}-20240611.sql", "bytes": 734_003_200}


@job(
    "browser_backup_database",
    title="Back up database",
    steps=[
        ("dump", "Dump the database"),
        ("compress", "Compress the dump"),
        ("upload", "Upload to off-site storage"),
    ],
)
def browser_backup_database(job, ctx):
    host = job.subject["host"]
    dump = ctx.step("dump", lambda: _dump(host, job.subject.get("unreachable", False)))
    ctx.progress(40)
    archive = ctx.step("compress", lambda: {"file": f"{dump['file']}.zst", "bytes": dump["bytes"] // 6})
    ctx.progress(70)
    ctx.step("upload", lambda: {"url": f"s3://backups/{archive['file']}"})
    return {"archive": archive["file"], "bytes": archive["bytes"]}


@job(
    "browser_order_hosting",
    title="Order hosting",
    steps=[
        ("reserve", "Reserve a server"),
        ("payment", "Collect the payment"),
        ("provision", "Provision the server"),
    ],
)
def browser_order_hosting(job, ctx):
    ctx.step("reserve", lambda: {"server": "vps-s-2"})
    ctx.progress(20)
    if ctx.resume_action is None:
        ctx.wait_external(
            f"Payment of invoice {job.subject['invoice']} ({job.subject['amount']}) by the customer",
            resume_at=timedelta(minutes=15),
            status=Status.AWAITING_PAYMENT,
        )
    ctx.step("payment", lambda: {"paid": job.subject["amount"]})
    ctx.step("provision", lambda: {"host": "vps-s-2.example.net"})
    return {"ready": True}


@job(
    "browser_update_module",
    title="Update module",
    steps=[("fan_out", "Start one job per server"), ("report", "Report")],
)
def browser_update_module(job, ctx):
    module, servers = job.subject["module"], job.subject["servers"]
    failing = job.subject.get("failing", [])
    ctx.step(
        "fan_out",
        lambda: [
            ctx.enqueue_child(
                "browser_update_module_on_server",
                server,
                subject={"server": server, "module": module, "fails": server in failing},
                label=f"Update module on {server}",
                subject_type="server",
                subject_id=server,
            ).pk
            for server in servers
        ],
        atomic=True,
    )
    family = ctx.wait_for_children()
    if family["overall"] != "done":
        done = family["by_status"].get("done", 0)
        raise JobError(
            "partial",
            f"{module} updated on {done} of {family['total']} servers; retry the failed ones, then this job.",
        )
    return ctx.step("report", lambda: {"servers": family["total"]})


def _install(subject):
    if subject["fails"]:
        package = f"{subject['module']}_1.24.0-2_amd64.deb"
        raise RuntimeError(f"Checksum mismatch for {package}: the mirror served a truncated file")
    return {"version": "1.24.0-2"}


@job(
    "browser_update_module_on_server",
    title="Update module on server",
    steps=[
        ("download", "Download the package"),
        ("install", "Install the package"),
        ("restart", "Restart nginx"),
    ],
)
def browser_update_module_on_server(job, ctx):
    ctx.step("download", lambda: {"bytes": 48_211})
    ctx.step("install", lambda: _install(job.subject))
    ctx.step("restart", lambda: {"restarted": True})
    return {"version": "1.24.0-2"}


@job(
    "browser_renew_certificate",
    title="Renew TLS certificate",
    steps=[("order", "Order the certificate"), ("install", "Install the certificate")],
)
def browser_renew_certificate(job, ctx):
    ctx.step("order", lambda: {"expires": "2024-09-09"})
    ctx.step("install", lambda: {"installed": True})
    return {"domain": job.subject["domain"]}
