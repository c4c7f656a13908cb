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
