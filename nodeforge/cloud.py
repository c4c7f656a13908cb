"""openstacksdk connections, resolved the standard way (clouds.yaml, OS_CLOUD)."""

from __future__ import annotations

from nodeforge.errors import ExitCode, NodeforgeError


class CloudConfigError(NodeforgeError):
    """No usable cloud: a usage/configuration error (exit 2)."""

    message = "cannot use cloud '{cloud}': {detail}"
    exit_code = ExitCode.USAGE


HINT = ("set OS_CLOUD or pass --os-cloud NAME, naming a cloud in clouds.yaml (./clouds.yaml, "
        "~/.config/openstack/clouds.yaml, /etc/openstack/clouds.yaml or $OS_CLIENT_CONFIG_FILE); "
        "for the local cloud run 'eval \"$(nodeforge devcloud env)\"'")


# Seconds a single API request may stay silent before it fails (clouds.yaml
# ``api_timeout`` wins). Without one, a request to a service that died
# mid-conversation, or through a network black hole, waits forever.
DEFAULT_API_TIMEOUT = 300


def connect(cloud: str | None):
    import openstack
    from keystoneauth1 import exceptions as ks_exc
    from openstack import config as os_config
    from openstack import exceptions as os_exc

    cloud = cloud or None          # --os-cloud "" is no cloud, as OS_CLOUD unset is
    try:
        region = os_config.OpenStackConfig().get_one(cloud=cloud)
        if region.config.get("api_timeout") is None:
            region = os_config.OpenStackConfig().get_one(cloud=cloud, api_timeout=DEFAULT_API_TIMEOUT)
        return openstack.connection.Connection(config=region)
    except os_exc.ConfigException as exc:
        raise CloudConfigError(cloud=cloud or "(from environment)", detail=str(exc), hint=HINT) from None
    except ks_exc.AuthPluginException as exc:
        # keystoneauth's MissingRequiredOptions ("requires parameters which were
        # not given: auth_url") is what no cloud at all looks like.
        if cloud is None:
            raise CloudConfigError("no cloud selected: OS_CLOUD is not set and --os-cloud was not given "
                                   f"(or is empty), and the environment holds no complete credentials ({exc})",
                                   hint=HINT) from None
        raise CloudConfigError(cloud=cloud, detail=f"incomplete credentials in clouds.yaml: {exc}",
                               hint=HINT) from None


class CloudUnreachable(NodeforgeError):
    """The cloud did not answer, or refused the credentials, before any command's own call."""

    message = "cloud '{cloud}' ({source}): {detail}"
    exit_code = ExitCode.FAILURE


UNREACHABLE_HINT = ("check that the cloud is up and that clouds.yaml names the right auth_url and credentials "
                    "(the local cloud: 'nodeforge devcloud status', 'nodeforge devcloud up')")


def cloud_named(args: list[str], environ) -> tuple[str, str]:
    """(the cloud a command line uses, where that name came from)."""
    for i, a in enumerate(args):
        if a == "--os-cloud" and i + 1 < len(args):
            return args[i + 1], "--os-cloud"
        if a.startswith("--os-cloud="):
            return a.split("=", 1)[1], "--os-cloud"
    if environ.get("OS_CLOUD"):
        return environ["OS_CLOUD"], "$OS_CLOUD"
    try:
        from openstack import config as os_config

        config = os_config.OpenStackConfig()
        names = [n for n in config.get_cloud_names() if n != "envvars"]
        if config.config_filename and len(names) == 1 and not environ.get("OS_AUTH_URL"):
            return names[0], f"the only cloud in {config.config_filename}"
    except Exception:  # noqa: BLE001 - only a name for a message; the connection said what failed
        pass
    return "(none named)", "the OS_* variables or the only cloud in clouds.yaml"


def _reason(text: str) -> str:
    low = text.lower()
    for needle, said in (("connection refused", "connection refused"), ("timed out", "timed out"),
                         ("name or service not known", "host name not known"), ("certificate", "TLS certificate "
                         "not trusted"), ("no route to host", "no route to host")):
        if needle in low:
            return said
    return "no answer"


def failure_of(exc: BaseException, cloud: str, source: str) -> CloudUnreachable | None:
    """A :class:`CloudUnreachable` naming the cloud, the endpoint and what happened for a
    keystoneauth/openstacksdk failure to reach or authenticate with a cloud; None for anything else.
    The URL is shown without credentials, the library's message never whole."""
    import re

    from keystoneauth1 import exceptions as ks

    from nodeforge.redact import redact_url

    text = str(exc)
    found = re.search(r"https?://[^\s'\"]+", text)
    where = redact_url(found.group(0).rstrip(":,.)")) if found else "its endpoint"
    if isinstance(exc, ks.ConnectionError):
        detail = f"cannot reach {where}: {_reason(text)}"
    elif isinstance(exc, ks.DiscoveryFailure):
        detail = f"cannot reach Keystone ({where}): {_reason(text)}"
    elif isinstance(exc, ks.Unauthorized):
        detail = "Keystone refused the credentials (HTTP 401)"
    elif isinstance(exc, (ks.EndpointNotFound, ks.EmptyCatalog)):
        detail = f"its service catalog has no such endpoint ({type(exc).__name__})"
    else:
        return None
    return CloudUnreachable(cloud=cloud, source=source, detail=detail, hint=UNREACHABLE_HINT)
