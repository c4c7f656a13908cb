"""The local cloud's OpenStack API services, exercised for real: Keystone,
Glance, Nova API (+ Placement), Barbican and Ironic's API, through openstacksdk
and the ``openstack`` CLI. No mocks; every resource created here carries a
uuid-suffixed name and is deleted at the end of its test.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import openstack
import openstack.config
import pytest
from openstack import exceptions as sdk_exc

from nodeforge.devcloud.cloud import ADMIN_CLOUD, MEMBER_CLOUD

pytestmark = pytest.mark.devcloud

# Nova validates flavor extra specs only from this microversion on.
EXTRA_SPEC_VALIDATION = "2.86"
OPENSTACK_CLI = Path(sys.executable).with_name("openstack")


def unique(prefix: str) -> str:
    return f"nftest-{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def admin(devcloud):
    return devcloud.admin()


@pytest.fixture(scope="module")
def member(devcloud):
    return devcloud.member()


@pytest.fixture(scope="module")
def system(devcloud):
    return devcloud.system()


@pytest.fixture
def cleanup():
    """Register callables to run at teardown (last registered first); a
    resource already gone (NotFound) is fine, any other error fails the test."""
    actions = []
    yield actions.append
    errors = []
    for action in reversed(actions):
        try:
            action()
        except sdk_exc.NotFoundException:
            pass
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    assert not errors, f"cleanup failed: {errors!r}"


# -- Keystone ------------------------------------------------------------------


def test_sdk_authenticates_through_keystone_and_lists_images(admin, member, cleanup):
    assert admin.authorize()
    assert member.authorize()
    assert admin.current_project["name"] == "admin"
    assert member.current_project["name"] == "nodeforge"

    # A private image of the admin project: admin lists it, the member
    # (another project) does not. Proves both lists come from Glance with
    # each user's own token.
    name = unique("private")
    image = admin.image.create_image(name=name, disk_format="raw", container_format="bare",
                                     visibility="private")
    cleanup(lambda: admin.image.delete_image(image.id))
    assert image.id in {i.id for i in admin.image.images()}
    assert image.id not in {i.id for i in member.image.images()}


def test_keystone_rejects_a_wrong_password():
    auth = dict(openstack.config.OpenStackConfig().get_one(MEMBER_CLOUD).config["auth"])
    auth["password"] = "not-the-password-" + uuid.uuid4().hex[:6]
    conn = openstack.connect(auth=auth, region_name="RegionOne", identity_api_version="3")
    with pytest.raises(sdk_exc.SDKException, match="HTTP 401"):
        conn.authorize()


def test_sdk_lists_baremetal_nodes(admin, system, cleanup):
    name = unique("list")
    node = system.baremetal.create_node(name=name, driver="fake-hardware")
    cleanup(lambda: system.baremetal.delete_node(node.id))
    assert node.provision_state == "enroll"
    listed = {n.id: n for n in system.baremetal.nodes(details=True)}
    assert listed[node.id].name == name
    assert listed[node.id].driver == "fake-hardware"
    # Secure RBAC: a node without an owner is invisible to a project.
    assert node.id not in {n.id for n in admin.baremetal.nodes()}


# -- the openstack CLI (acceptance) --------------------------------------------


@pytest.mark.slow  # ~10 s idle, 55 s seen with the machine busy (CLI start-up is CPU-bound)
def test_openstack_cli_lists_images_flavors_and_nodes(devcloud, admin, system, cleanup):
    """`openstack --os-cloud nodeforge-dev image list | flavor list |
    baremetal node list` work and show what exists in the cloud."""
    image = admin.image.create_image(name=unique("cli"), disk_format="raw", container_format="bare",
                                     visibility="private")
    cleanup(lambda: admin.image.delete_image(image.id))
    flavor = admin.compute.create_flavor(name=unique("cli"), ram=512, vcpus=1, disk=1)
    cleanup(lambda: admin.compute.delete_flavor(flavor.id))
    # The project-scoped admin sees the nodes its project owns.
    node = system.baremetal.create_node(name=unique("cli"), driver="fake-hardware",
                                        owner=admin.current_project_id)
    cleanup(lambda: system.baremetal.delete_node(node.id))

    assert OPENSTACK_CLI.exists(), OPENSTACK_CLI
    env = dict(os.environ, OS_CLIENT_CONFIG_FILE=str(devcloud.paths.clouds_yaml))
    env.pop("OS_CLOUD", None)
    commands = {"image": ["image", "list"], "flavor": ["flavor", "list"],
                "baremetal": ["baremetal", "node", "list"]}
    # The CLI takes ~6 s of CPU to start: run the three side by side.
    procs = {key: subprocess.Popen([str(OPENSTACK_CLI), "--os-cloud", ADMIN_CLOUD, *argv, "-f", "json"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                   stdin=subprocess.DEVNULL)
             for key, argv in commands.items()}
    out = {}
    for key, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"openstack {' '.join(commands[key])}: {stderr}"
        out[key] = json.loads(stdout)
    assert image.id in {row["ID"] for row in out["image"]}
    assert flavor.id in {row["ID"] for row in out["flavor"]}
    # python-ironicclient names the column "UUID" in tables, "uuid" in JSON.
    assert node.id in {row.get("uuid", row.get("UUID")) for row in out["baremetal"]}


# -- Nova: bare-metal flavors --------------------------------------------------

BAREMETAL_SPECS = {
    "resources:CUSTOM_NODEFORGE_COMPUTE": "1",
    "resources:VCPU": "0",
    "resources:MEMORY_MB": "0",
    "resources:DISK_GB": "0",
}


def _create_flavor(conn, cleanup, name: str) -> str:
    resp = conn.compute.post("/flavors", json={"flavor": {"name": name, "ram": 262144, "vcpus": 64,
                                                          "disk": 446}},
                             microversion=EXTRA_SPEC_VALIDATION, raise_exc=False)
    assert resp.status_code == 200, resp.text
    flavor_id = resp.json()["flavor"]["id"]
    cleanup(lambda: conn.compute.delete_flavor(flavor_id))
    return flavor_id


def test_baremetal_flavor_with_custom_resource_class(admin, cleanup):
    name = unique("bm")
    flavor_id = _create_flavor(admin, cleanup, name)
    resp = admin.compute.post(f"/flavors/{flavor_id}/os-extra_specs", json={"extra_specs": BAREMETAL_SPECS},
                              microversion=EXTRA_SPEC_VALIDATION, raise_exc=False)
    assert resp.status_code == 200, resp.text
    assert resp.json()["extra_specs"] == BAREMETAL_SPECS

    # Read back: the flavor itself (extra_specs embedded since 2.61) and via the SDK.
    resp = admin.compute.get(f"/flavors/{flavor_id}", microversion=EXTRA_SPEC_VALIDATION)
    assert resp.status_code == 200
    body = resp.json()["flavor"]
    assert body["name"] == name
    assert body["extra_specs"] == BAREMETAL_SPECS
    assert admin.compute.get_flavor(flavor_id).extra_specs == BAREMETAL_SPECS
    assert name in {f.name for f in admin.compute.flavors()}


@pytest.mark.parametrize("spec, message", [
    ({"resources:CUSTOM_NODEFORGE_COMPUTE": "one"}, "not a valid integer"),
    ({"resources:custom_lowercase": "1"}, "does not appear to be a valid extra spec"),
    ({"hw:no_such_option": "1"}, "does not appear to be a valid extra spec"),
])
def test_malformed_extra_spec_refused_at_2_86(admin, cleanup, spec, message):
    flavor_id = _create_flavor(admin, cleanup, unique("bad"))
    resp = admin.compute.post(f"/flavors/{flavor_id}/os-extra_specs", json={"extra_specs": spec},
                              microversion=EXTRA_SPEC_VALIDATION, raise_exc=False)
    assert resp.status_code == 400, resp.text
    assert message in resp.json()["badRequest"]["message"]
    assert admin.compute.get(f"/flavors/{flavor_id}/os-extra_specs",
                             microversion=EXTRA_SPEC_VALIDATION).json()["extra_specs"] == {}
    # Before 2.86 Nova stores anything: why nodeforge pins 2.86.
    resp = admin.compute.post(f"/flavors/{flavor_id}/os-extra_specs", json={"extra_specs": spec},
                              microversion="2.85", raise_exc=False)
    assert resp.status_code == 200, resp.text


# -- Barbican ------------------------------------------------------------------


def _self_signed_pem() -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, unique("signer"))])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False, crl_sign=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM)


def test_certificate_stored_in_barbican_as_pem(admin, cleanup):
    from cryptography import x509

    pem = _self_signed_pem()
    name = unique("cert")
    secret = admin.key_manager.create_secret(name=name, secret_type="certificate",
                                             payload=pem.decode(), payload_content_type="text/plain")
    secret_id = secret.secret_ref.rsplit("/", 1)[-1]
    cleanup(lambda: admin.key_manager.delete_secret(secret_id))
    assert uuid.UUID(secret_id)

    fetched = admin.key_manager.get_secret(secret_id)
    assert fetched.name == name
    assert fetched.secret_type == "certificate"
    assert fetched.content_types == {"default": "text/plain"}
    # Barbican drops the trailing newline of a text/plain payload.
    assert fetched.payload.encode().strip() == pem.strip()
    assert fetched.payload.startswith("-----BEGIN CERTIFICATE-----")
    assert x509.load_pem_x509_certificate(fetched.payload.encode()) == x509.load_pem_x509_certificate(pem)

    admin.key_manager.delete_secret(secret_id)
    # Raw GET: openstacksdk's Secret.fetch does not check the HTTP status
    # (a deleted secret "fetches" as an empty resource).
    assert admin.key_manager.get(f"/secrets/{secret_id}", raise_exc=False).status_code == 404


# -- Glance: policy and uploads --------------------------------------------------


def test_member_may_not_publicize_an_image_admin_may(admin, member, cleanup):
    image = member.image.create_image(name=unique("pub"), disk_format="raw", container_format="bare",
                                      visibility="private")
    cleanup(lambda: admin.image.delete_image(image.id))
    assert image.visibility == "private"

    with pytest.raises(sdk_exc.ForbiddenException) as refused:
        member.image.update_image(image.id, visibility="public")
    assert refused.value.status_code == 403
    assert member.image.get_image(image.id).visibility == "private"

    # The member may edit its own image otherwise: the 403 is about publicizing.
    assert member.image.update_image(image.id, visibility="shared").visibility == "shared"

    assert admin.image.update_image(image.id, visibility="public").visibility == "public"
    assert member.image.get_image(image.id).visibility == "public"


def test_glance_upload_hash_matches(member, cleanup):
    data = os.urandom(300 * 1024 + 13)
    image = member.image.create_image(name=unique("upload"), data=data, disk_format="raw",
                                      container_format="bare", visibility="private",
                                      validate_checksum=False)
    cleanup(lambda: member.image.delete_image(image.id))

    stored = member.image.get_image(image.id)
    assert stored.status == "active"
    assert stored.size == len(data)
    assert stored.hash_algo == "sha512"
    assert stored.hash_value == hashlib.sha512(data).hexdigest()
    assert stored.checksum == hashlib.md5(data, usedforsecurity=False).hexdigest()
    assert member.image.download_image(image.id).content == data


def test_every_service_database_is_in_wal_mode(devcloud):
    """Readers do not wait for a writer: a GET during a background write (an
    image import) is not a 500 "database is locked" on a loaded machine."""
    import contextlib
    import sqlite3

    names = ("keystone", "glance", "placement", "nova_api", "nova", "nova_cell0", "barbican", "ironic")
    for name in names:
        path = devcloud.paths.data / f"{name}.sqlite"
        assert path.is_file(), path
        with contextlib.closing(sqlite3.connect(path)) as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal", path


def test_every_service_database_waits_for_a_lock(devcloud):
    """A writer waits for another's lock (SQLite's busy timeout) instead of failing at once with
    "database is locked": every service's configured database URL carries the timeout."""
    import re

    from nodeforge.devcloud.openstack import SQLITE_BUSY_TIMEOUT

    urls = {}
    for conf in sorted(devcloud.paths.etc.rglob("*.conf")):
        for m in re.finditer(r"^(?:connection|sql_connection)\s*=\s*(sqlite:\S+)", conf.read_text(), re.M):
            urls[f"{conf.relative_to(devcloud.paths.etc)}: {m.group(1).split('?')[0].rsplit('/', 1)[-1]}"] = m.group(1)
    names = {key.rsplit(": ", 1)[1] for key in urls}
    assert {"keystone.sqlite", "glance.sqlite", "nova_api.sqlite", "ironic.sqlite", "magnum.sqlite"} <= names, urls
    wrong = {key: url for key, url in urls.items() if not url.endswith(f"?timeout={SQLITE_BUSY_TIMEOUT}")}
    assert not wrong, wrong
