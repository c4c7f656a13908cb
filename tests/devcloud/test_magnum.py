"""Magnum, its RabbitMQ and Neutron in the local cloud, exercised for real
through openstacksdk (``container_infrastructure_management``), AMQP and
/proc. There is no Cluster API management cluster here: a cluster create
passes the API's validation against the real Glance, Nova and Neutron, then
fails in the driver (CREATE_FAILED), and is removed with the local-cloud-only
purge helper."""

from __future__ import annotations

import io
import re
import subprocess
import time
import uuid

import pytest
from openstack import exceptions as sdk_exc

from nodeforge.devcloud import credentials, magnum, neutron, openstack as dc_openstack, rabbitmq
from nodeforge.devcloud.paths import Paths
from nodeforge.devcloud.process import _group_members
from nodeforge.redact import Secret
from tests.magnum.live_cloud import RECORD_TIMEOUT, conductor_errors

pytestmark = pytest.mark.devcloud

NEW_SERVICES = ("neutron", "rabbitmq", "magnum-api", "magnum-conductor")


def unique(prefix: str) -> str:
    return f"nftest-{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def admin(devcloud):
    return devcloud.admin()


@pytest.fixture(scope="module")
def image_and_flavor(admin):
    """A Glance image Magnum accepts (os_distro set) and a Nova flavor."""
    image = admin.image.create_image(name=unique("magnum-img"), disk_format="raw", container_format="bare",
                                     data=io.BytesIO(b"\0" * 4096), os_distro="ubuntu", wait=True)
    flavor = admin.compute.create_flavor(name=unique("magnum-fl"), ram=2048, vcpus=2, disk=10)
    yield image, flavor
    admin.image.delete_image(image, ignore_missing=True)
    admin.compute.delete_flavor(flavor, ignore_missing=True)


def template_attrs(image, flavor, **over):
    attrs = dict(name=unique("tpl"), coe="kubernetes", server_type="vm", image_id=image.id,
                 external_network_id=neutron.PUBLIC_NETWORK, fixed_network=neutron.PRIVATE_NETWORK,
                 fixed_subnet=neutron.PRIVATE_SUBNET, flavor_id=flavor.name, master_flavor_id=flavor.name,
                 network_driver="calico", labels={"kube_tag": "v1.31.1"})
    attrs.update(over)
    return attrs


def test_magnum_in_the_catalog_and_its_conductor_up(devcloud, admin):
    endpoint = admin.endpoint_for("container-infra")
    assert endpoint == dc_openstack.url("magnum-api") + "/v1"
    service = next(s for s in admin.identity.services() if s.type == "container-infra")
    assert service.name == "magnum"
    states = [(s.binary, s.state) for s in admin.container_infrastructure_management.services()]
    assert ("magnum-conductor", "up") in states
    rows = {r["service"]: r for r in devcloud.cloud.status()}
    for name in NEW_SERVICES:
        assert rows[name]["running"] and rows[name]["healthy"], rows[name]


def test_template_create_get_delete(devcloud, image_and_flavor):
    cim = devcloud.magnum()
    image, flavor = image_and_flavor
    attrs = template_attrs(image, flavor)
    tpl = cim.create_cluster_template(**attrs)
    try:
        got = cim.get_cluster_template(tpl.id)
        assert (got.name, got.coe, got.image_id, got.network_driver) == (attrs["name"], "kubernetes", image.id,
                                                                          "calico")
        # The network names resolved against the real Neutron.
        assert got.external_network_id == neutron.PUBLIC_NETWORK
        assert got.fixed_subnet == neutron.PRIVATE_SUBNET
        assert [t.id for t in cim.cluster_templates() if t.name == attrs["name"]] == [tpl.id]
    finally:
        cim.delete_cluster_template(tpl.id)
    with pytest.raises(sdk_exc.NotFoundException):
        cim.get_cluster_template(tpl.id)


def test_template_validation_is_real(devcloud, image_and_flavor):
    """An unknown network, flavor or image is refused by Magnum's API, which
    looked it up in Neutron, Nova and Glance."""
    cim = devcloud.magnum()
    image, flavor = image_and_flavor
    for over, word in ((dict(external_network_id="nftest-no-such-net"), "nftest-no-such-net"),
                       (dict(flavor_id="nftest-no-such-flavor"), "nftest-no-such-flavor"),
                       (dict(image_id="nftest-no-such-image"), "nftest-no-such-image")):
        with pytest.raises(sdk_exc.HttpException) as err:
            cim.create_cluster_template(**template_attrs(image, flavor, **over))
        assert err.value.status_code in (400, 404), err.value
        # Magnum's error body ({"errors": [{"detail": ...}]}) names what was not found.
        assert word in err.value.response.text, err.value.response.text


def _wait_cluster(cim, cluster_id, paths, limit=RECORD_TIMEOUT):
    """The cluster record is written by the conductor: a GET right after the
    create may be refused (400 "No Cluster found") for a moment."""
    deadline = time.monotonic() + limit
    cluster = None
    while time.monotonic() < deadline:
        try:
            cluster = cim.get_cluster(cluster_id)
        except (sdk_exc.NotFoundException, sdk_exc.BadRequestException):
            if cluster is not None:
                raise                  # it existed: now missing is a real error
            cluster = None
        if cluster is not None and cluster.status != "CREATE_IN_PROGRESS":
            return cluster
        time.sleep(1)
    pytest.fail(f"cluster {cluster_id} still {cluster.status if cluster else 'missing'} after {limit} s; "
                f"the conductor's last errors:\n{conductor_errors(paths)}")


def test_cluster_create_fails_without_management_cluster_and_is_purged(devcloud, image_and_flavor):
    cim = devcloud.magnum()
    image, flavor = image_and_flavor
    tpl = cim.create_cluster_template(**template_attrs(image, flavor))
    name = unique("cluster")
    try:
        created = cim.create_cluster(name=name, cluster_template_id=tpl.id, master_count=1, node_count=1)
        cluster = _wait_cluster(cim, created.id, devcloud.paths)
        assert cluster.status == "CREATE_FAILED", (cluster.status, cluster.status_reason)
        # It failed where expected: the driver reached for the (absent)
        # management cluster named by the placeholder kubeconfig.
        assert "127.0.0.1" in cluster.status_reason and re.search(r"port.{0,3}1\b", cluster.status_reason), \
            cluster.status_reason
        assert cluster.cluster_template_id == tpl.id
        # The template is still referenced: Magnum refuses to delete it.
        with pytest.raises(sdk_exc.BadRequestException):
            cim.delete_cluster_template(tpl.id)
        assert cim.get_cluster_template(tpl.id).id == tpl.id
    finally:
        removed = devcloud.purge_clusters(name)
    assert removed == [created.id]
    with pytest.raises((sdk_exc.NotFoundException, sdk_exc.BadRequestException)):
        cim.get_cluster(created.id)
    assert name not in [c.name for c in cim.clusters()]
    assert devcloud.purge_clusters(name) == []       # nothing left: a no-op
    cim.delete_cluster_template(tpl.id)


def test_purge_refuses_anything_but_a_local_cloud_database(tmp_path):
    with pytest.raises(magnum.PurgeError) as err:
        magnum.purge_clusters(Paths(tmp_path), ["x"])
    assert "not a local cloud's state directory" in str(err.value)
    (tmp_path / "etc" / "magnum").mkdir(parents=True)
    (tmp_path / "etc" / "magnum" / "magnum.conf").write_text(
        "[database]\nconnection = mysql+pymysql://magnum@db.example/magnum\n")
    with pytest.raises(magnum.PurgeError) as err:
        magnum.purge_clusters(Paths(tmp_path), ["x"])
    assert "refusing to change another database" in str(err.value)


def test_neutron_networks_resolve_by_name(admin):
    public = admin.network.find_network(neutron.PUBLIC_NETWORK)
    private = admin.network.find_network(neutron.PRIVATE_NETWORK)
    assert public is not None and public.is_router_external
    assert private is not None and not private.is_router_external
    subnet = admin.network.find_subnet(neutron.PRIVATE_SUBNET)
    assert subnet.network_id == private.id and subnet.cidr == neutron.PRIVATE_CIDR
    assert admin.network.find_subnet(neutron.PUBLIC_SUBNET).network_id == public.id
    # The API works beyond the seed: a network and subnet of the test's own.
    net = admin.network.create_network(name=unique("net"))
    try:
        sub = admin.network.create_subnet(network_id=net.id, ip_version=4, cidr="10.99.0.0/24", name=unique("sub"))
        assert admin.network.get_subnet(sub.id).cidr == "10.99.0.0/24"
    finally:
        admin.network.delete_network(net.id)


def _listeners(pid: int) -> list[tuple[str, int]]:
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        if f"pid={pid}," in line:
            local = line.split()[3]
            host, _, port = local.rpartition(":")
            found.append((host.strip("[]"), int(port)))
    return found


def test_rabbitmq_user_is_not_guest_and_listens_on_loopback_only(devcloud):
    creds = credentials.load(devcloud.paths.etc)
    port = rabbitmq.amqp_port()
    assert "logged in" in rabbitmq.login(port, rabbitmq.USER, creds["rabbitmq_password"])
    with pytest.raises(rabbitmq.AmqpLoginError):
        rabbitmq.login(port, "guest", Secret("guest"))
    with pytest.raises(rabbitmq.AmqpLoginError):
        rabbitmq.login(port, rabbitmq.USER, Secret("not-the-password"))
    users = rabbitmq.ctl(devcloud.paths, "list_users")
    assert users.returncode == 0, users.stderr
    names = [line.split()[0] for line in users.stdout.splitlines()[1:] if line.strip()]
    assert names == [rabbitmq.USER]

    pid = devcloud.cloud.supervisor.running_pid("rabbitmq")
    members = _group_members(pid)
    listening = [addr for member in members for addr in _listeners(member)]
    ports = {p for _, p in listening}
    assert set(rabbitmq.ports()) <= ports, listening       # AMQP, distribution and our own epmd
    assert all(host in ("127.0.0.1", "::1") for host, _ in listening), listening
    # The broker itself (not epmd, which always adds ::1) only on 127.0.0.1.
    assert {h for h, p in listening if p in (rabbitmq.amqp_port(), rabbitmq.ports()[1])} == {"127.0.0.1"}


def test_no_secret_in_argv_environment_or_logs_of_the_new_services(devcloud):
    secrets = [v.reveal() for v in credentials.load(devcloud.paths.etc).values()]
    for name in NEW_SERVICES:
        pid = devcloud.cloud.supervisor.running_pid(name)
        members = _group_members(pid)
        assert members, name
        for member in members:
            for what in ("cmdline", "environ"):
                try:
                    raw = open(f"/proc/{member}/{what}", "rb").read().decode("utf-8", "replace")
                except OSError:
                    continue           # exited meanwhile
                assert not any(s in raw for s in secrets), f"a secret is in /proc/{member}/{what} ({name})"
    logs = [f for f in devcloud.paths.log.rglob("*")
            if f.is_file() and (f.name.startswith(("magnum", "neutron", "rabbitmq")) or "rabbitmq" in f.parts)]
    names = {f.name for f in logs}
    assert {"magnum-conductor-app.log", "magnum-api-app.log", "neutron-app.log", "rabbitmq.log"} <= names, names
    for f in logs:
        text = f.read_text(errors="replace")
        assert not any(s in text for s in secrets), f"a local-cloud secret is in {f}"
