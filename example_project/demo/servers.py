"""Updating a module on the server fleet, one server at a time."""

from django.utils import timezone
from django.utils.translation import ngettext

from django_durajobs import JobError

from .files import demo_file, replace_with
from .models import InstalledModule, Server
from .outside import take_time


def copy_package(server_name: str, module: str, version: str) -> dict:
    """Put the package on the server's disk; a broken server refuses it with its reason."""
    take_time()
    server = Server.objects.get(name=server_name)
    if server.broken_reason:
        raise JobError("package_not_copied", f"{server_name}: {server.broken_reason}")
    package = f"servers/{server_name}/packages/{module}-{version}.pkg"
    replace_with(demo_file(package), lambda path: path.write_text(f"{module} {version}\n"))
    return {"package": package}


def install(server_name: str, module: str, version: str) -> dict:
    """Record the module's new version on the server (an atomic step)."""
    server = Server.objects.get(name=server_name)
    previous = (
        InstalledModule.objects.filter(server=server, name=module).values_list("version", flat=True).first()
    )
    InstalledModule.objects.update_or_create(
        server=server, name=module, defaults={"version": version, "installed_at": timezone.now()}
    )
    return {"server": server_name, "version": version, "previous": previous}


def verify_rollout(module: str, version: str, family: dict) -> dict:
    """Check that every server's job ended done; name the servers where it did not."""
    servers = [child["subject"]["server"] for child in family["children"]]
    failed = [child["subject"]["server"] for child in family["children"] if child["status"] != "done"]
    if failed:
        raise JobError(
            "partial_rollout",
            ngettext(
                "%(module)s %(version)s failed on %(failed)s of %(count)s server: %(names)s. "
                "Their jobs say why; repair those servers, retry their jobs, then retry this one.",
                "%(module)s %(version)s failed on %(failed)s of %(count)s servers: %(names)s. "
                "Their jobs say why; repair those servers, retry their jobs, then retry this one.",
                len(servers),
            )
            % {
                "module": module,
                "version": version,
                "failed": len(failed),
                "count": len(servers),
                "names": ", ".join(failed),
            },
        )
    return {"module": module, "version": version, "servers": servers}


def names() -> list[str]:
    return list(Server.objects.order_by("name").values_list("name", flat=True))
