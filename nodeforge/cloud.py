"""openstacksdk connections, resolved the standard way (clouds.yaml, OS_CLOUD)."""

from __future__ import annotations

from nodeforge.errors import NodeforgeError


class CloudConfigError(NodeforgeError):
    message = "cannot use cloud '{cloud}': {detail}"


def connect(cloud: str | None):
    import openstack
    from openstack import exceptions as os_exc

    try:
        return openstack.connect(cloud=cloud)
    except os_exc.ConfigException as exc:
        raise CloudConfigError(cloud=cloud or "(from environment)", detail=str(exc),
                               hint="set --os-cloud or OS_CLOUD; for the local cloud run 'nodeforge devcloud env'") from None
