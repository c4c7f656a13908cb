"""openstacksdk connections, resolved the standard way (clouds.yaml, OS_CLOUD)."""

from __future__ import annotations

from nodeforge.errors import NodeforgeError


class CloudConfigError(NodeforgeError):
    message = "cannot use cloud '{cloud}': {detail}"


# Seconds a single API request may stay silent before it fails (clouds.yaml
# ``api_timeout`` wins). Without one, a request to a service that died
# mid-conversation, or through a network black hole, waits forever.
DEFAULT_API_TIMEOUT = 300


def connect(cloud: str | None):
    import openstack
    from openstack import config as os_config
    from openstack import exceptions as os_exc

    try:
        region = os_config.OpenStackConfig().get_one(cloud=cloud)
        if region.config.get("api_timeout") is None:
            region = os_config.OpenStackConfig().get_one(cloud=cloud, api_timeout=DEFAULT_API_TIMEOUT)
        return openstack.connection.Connection(config=region)
    except os_exc.ConfigException as exc:
        raise CloudConfigError(cloud=cloud or "(from environment)", detail=str(exc),
                               hint="set --os-cloud or OS_CLOUD; for the local cloud run 'nodeforge devcloud env'") from None
