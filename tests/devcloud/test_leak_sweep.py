"""The leak sweep: every command that takes a secret, run with known,
distinctive secret values against the session's local cloud; then
everything it printed or wrote is scanned for each value (raw, base64,
URL-encoded): stdout and stderr (text and JSON logs, at -vv where the HTTP
libraries log requests), the ``--report`` file, every file under the work
directory, and the local services' own logs (request logs included) under
the session cloud's state directory.

Secrets: a Redfish BMC's real password (``file:``), a wrong Redfish
password (``env:``), an IPMI password encrypted with ``baremetal encrypt``
(``fernet:``, key from ``baremetal keygen``), and the Fernet key itself; the
signing key's passphrase and private key; a mirror login from ``~/.netrc`` and a
``?token=`` in a mirror setting through a real pipeline run and its run records.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.hostile.conftest import check, run_cli, secret_forms
from tests.ironic.devcloud_inventory import delete_nodes, write_secret

pytestmark = [pytest.mark.devcloud, pytest.mark.slow]

WRONG_RF = "NFleak-wrong-redfish-pw-Q8m3x"
FERNET_PLAIN = "NFleak-fernet-ipmi-pw-Z2k7w"


def _scan_tree(root: Path, forms: dict[str, str], *, skip=()) -> list[str]:
    """Every file under ``root`` holding a secret form: ``path: secret``."""
    found = []
    for path in root.rglob("*"):
        if path.is_symlink() or not path.is_file() or any(s in path.parts for s in skip):
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        for form, value in forms.items():
            if form.encode() in data:
                found.append(f"{path}: {value!r} (as {form!r})")
    return found


def test_no_secret_in_anything_printed_or_written(devcloud, bmc_pool, run_prefix, tmp_path, monkeypatch):
    from nodeforge.devcloud import bmc

    creds = bmc.credentials(devcloud.paths)
    real_rf = creds.redfish.password.reveal()
    [good, wrong] = bmc_pool.redfish(2)
    [ipmi] = bmc_pool.ipmi(1)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("NODEFORGE_SECRET_LEAK_WRONG_RF", WRONG_RF)
    env = {"NODEFORGE_SECRET_LEAK_WRONG_RF": WRONG_RF}
    system = "nodeforge-dev-system"

    # keygen + encrypt: the plaintext only on stdin.
    key = work / "inventory.key"
    r = run_cli(["baremetal", "keygen", key], env=env)
    check(r, codes=(0,))
    fernet_key = key.read_text().strip()
    r = run_cli(["baremetal", "encrypt", "--key-file", key], env=env, stdin=FERNET_PLAIN + "\n")
    check(r, codes=(0,), secrets=secret_forms([FERNET_PLAIN, fernet_key]))
    token = r.out.strip()
    assert token.startswith("fernet:"), r.out

    secrets = [real_rf, WRONG_RF, FERNET_PLAIN, fernet_key]
    forms = secret_forms(secrets)
    url = f"redfish+https://127.0.0.1:{bmc.redfish_port()}/redfish/v1/Systems/"
    nodes = [
        {"name": f"{run_prefix}leak-rf-good", "bmc": {"address": url + good.uuid, "username": creds.redfish.username,
                                                      "password": write_secret(work, "rf.pw", real_rf),
                                                      "verify_ca": str(bmc.ca_bundle(devcloud.paths))},
         "macs": list(good.macs), "resource_class": "baremetal-leak", "cleaning": "none"},
        {"name": f"{run_prefix}leak-rf-wrong", "bmc": {"address": url + wrong.uuid,
                                                       "username": creds.redfish.username,
                                                       "password": "env:NODEFORGE_SECRET_LEAK_WRONG_RF",
                                                       "verify_ca": str(bmc.ca_bundle(devcloud.paths))},
         "macs": list(wrong.macs), "resource_class": "baremetal-leak", "cleaning": "none"},
        {"name": f"{run_prefix}leak-ipmi", "bmc": {"address": ipmi.address, "username": ipmi.username,
                                                   "password": token},
         "macs": [], "resource_class": "baremetal-leak", "cleaning": "none"},
    ]
    inv = work / "inventory.yaml"
    inv.write_text(yaml.safe_dump({"version": 1, "scope": f"{run_prefix}leak", "nodes": nodes}, sort_keys=False))
    report = work / "enroll-report.json"
    runs = []
    try:
        for args, codes in (
            (["baremetal", "validate", inv, "--key-file", key, "-o", "json"], (0,)),
            (["baremetal", "validate", inv, "--key-file", key, "-vv"], (0,)),
            (["baremetal", "preflight", inv, "--key-file", key, "-o", "json", "-vv"], (0, 1, 3)),
            (["baremetal", "preflight", inv, "--key-file", key, "--log-format", "json", "-vv"], (0, 1, 3)),
            (["--os-cloud", system, "baremetal", "enroll", inv, "--key-file", key, "--dry-run", "-o", "json", "-vv"],
             (0,)),
            (["--os-cloud", system, "baremetal", "enroll", inv, "--key-file", key, "--no-lifecycle",
              "--report", report, "-o", "json", "-vv", "--log-format", "json"], (0, 1, 3)),
            (["--os-cloud", system, "baremetal", "enroll", inv, "--key-file", key, "--no-lifecycle", "-vv"],
             (0, 1, 3)),
            # A wrong key: the refusal names the key file, never the token's plaintext or the key.
            (["baremetal", "validate", inv, "--key-file", work / "rf.pw", "-o", "json"], (2,)),
        ):
            r = run_cli(args, env=env)
            runs.append(r)
            check(r, codes=codes, json_out="json" in args and "-o" in args, secrets=forms)
        assert report.exists()
        # The scan finds a secret where one is meant to be (the password file, the key file) ...
        assert {x.split(":", 1)[0] for x in _scan_tree(work, forms)} >= {str(work / "rf.pw"), str(key)}
        # ... and nowhere else.
        leaks = _scan_tree(work, forms, skip=("rf.pw", "inventory.key"))
        assert not leaks, "secrets written:\n" + "\n".join(leaks)
        # The local services' logs (API request logs, conductor logs) of the session cloud.
        logs = devcloud.paths.log
        assert logs.is_dir() and any(logs.rglob("*.log")), f"no service logs under {logs}"
        assert any(b"/v1/nodes" in p.read_bytes() for p in logs.rglob("*.log") if p.is_file()), \
            f"no Ironic API request in the logs under {logs}: the scan would see nothing"
        leaks = _scan_tree(logs, forms)
        assert not leaks, "secrets in the local services' logs:\n" + "\n".join(leaks)
        # Ironic has the nodes, its API answers with the passwords masked.
        conn = devcloud.system()
        mine = {n.name: n for n in conn.baremetal.nodes(details=True) if (n.name or "").startswith(run_prefix)}
        assert len(mine) == 3, sorted(mine)
        for n in mine.values():
            assert all(v == "******" for k, v in (n.driver_info or {}).items() if k.endswith("password")), n.name
    finally:
        delete_nodes(devcloud.system(), run_prefix)


SIGN_PASS = "NFleak-signing-passphrase-T4r6v"


def test_no_signing_secret_in_anything_printed_or_written(devcloud, tmp_path, monkeypatch):
    """image signing-cert upload and image publish --sign-key: the key's passphrase (by env:
    reference) and the private key's bytes appear nowhere: output, logs at -vv, the build
    directory, the services' logs (Glance, Barbican)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from tests.imagebuild.builddir_factory import make_build_dir
    from tests.imagebuild.glance_fixtures import Tracker
    from tests.imagebuild.test_signing import _cert

    admin = devcloud.admin()
    tracker = Tracker(admin)
    work = tmp_path / "work"
    work.mkdir()
    key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    key_path = work / "signing.pem"
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.BestAvailableEncryption(SIGN_PASS.encode())))
    key_path.chmod(0o600)
    (work / "signing.crt").write_bytes(_cert(key))
    plain_der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption())
    import base64

    body = base64.b64encode(plain_der).decode()
    # The passphrase, and stretches of the unencrypted key (as PEM/base64 would print it).
    forms = {**secret_forms([SIGN_PASS]), **{body[i:i + 48]: "private key" for i in range(64, len(body) - 48, 400)}}
    monkeypatch.setenv("NF_LEAK_SIGN_PASS", SIGN_PASS)
    env = {"OS_CLOUD": "nodeforge-dev", "NF_LEAK_SIGN_PASS": SIGN_PASS}
    try:
        r = run_cli(["image", "signing-cert", "upload", work / "signing.crt", "-o", "json"], env=env)
        check(r, codes=(0,), json_out=True, secrets=forms)
        import json

        cert_id = json.loads(r.out)["id"]
        tracker.secrets.append(cert_id)
        d = tracker.build(make_build_dir(tmp_path / "builds", variants=("vm",), size=512 * 1024))
        for args, codes in (
            (["image", "publish", d, "--sign-key", key_path, "--sign-key-passphrase", "env:NF_LEAK_SIGN_PASS",
              "--sign-cert-id", cert_id, "--dry-run", "-o", "json", "-vv"], (0,)),
            (["image", "publish", d, "--sign-key", key_path, "--sign-key-passphrase", "env:NF_LEAK_SIGN_PASS",
              "--sign-cert-id", cert_id, "-o", "json", "-vv", "--log-format", "json"], (0,)),
            # Wrong passphrase, and a passphrase given literally: refused, never echoed.
            (["image", "publish", d, "--sign-key", key_path, "--sign-key-passphrase", "env:NF_LEAK_NOPE",
              "--sign-cert-id", cert_id, "-vv"], (1, 2)),
            (["image", "publish", d, "--sign-key", key_path, "--sign-key-passphrase", SIGN_PASS,
              "--sign-cert-id", cert_id, "-o", "json"], (1, 2)),
        ):
            r = run_cli(args, env={**env, "NF_LEAK_NOPE": "NFleak-not-the-passphrase"})
            check(r, codes=codes, json_out="-o" in args, secrets=forms)
        leaks = _scan_tree(work, forms, skip=("signing.pem",)) + _scan_tree(d, forms)
        assert not leaks, "secrets written:\n" + "\n".join(leaks)
        leaks = _scan_tree(devcloud.paths.log, forms)
        assert not leaks, "secrets in the local services' logs:\n" + "\n".join(leaks)
    finally:
        tracker.cleanup()


NETRC_PW = "NFleak-netrc-mirror-pw-W4t9q"
URL_TOKEN = "NFleak-url-token-H6v2p"


def test_no_secret_in_a_pipeline_run_record(tmp_path, monkeypatch, caplog):
    """A real pipeline run (check, bump, prefetch against the local fixture mirror, whose login
    comes from ~/.netrc; render skipped, build failing: no image builder here) and a second run
    whose mirror setting carries a credential-looking ``?token=`` (refused by check): the run
    records (run.json, summary.md, pr-body.md), everything else under the runs and cache
    directories, and every log record at DEBUG hold neither value in any form."""
    import logging

    import requests

    from nodeforge.demo.upstream_mirror import FixtureUpstream, MirrorServer
    from nodeforge.pins.lockfile import Component
    from nodeforge.pins.sources import SourceName
    from nodeforge.pipeline import stages as st
    from nodeforge.pipeline.run import Pipeline, PipelineFailed

    up = FixtureUpstream(tmp_path / "up", size=256)
    for version in ("1.36.0", "1.36.1"):
        up.add_kubernetes(version)
    up.add(Component.CRICTL, "1.36.0")
    companions = {Component.CNI_PLUGINS: "1.9.1", Component.CONTAINERD: "2.3.4", Component.RUNC: "1.4.3"}
    for comp, version in companions.items():
        up.add(comp, version)
    lock = tmp_path / "fixture" / "versions.yaml"
    lock.parent.mkdir()
    lock.write_text(up.lockfile_text({"1.36": "1.36.0"}, companions))
    home = tmp_path / "home"
    home.mkdir()
    (home / ".netrc").write_text(f"machine 127.0.0.1 login nf-mirror password {NETRC_PW}\n")
    (home / ".netrc").chmod(0o600)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("NETRC", raising=False)
    forms = secret_forms([NETRC_PW, URL_TOKEN])
    caplog.set_level(logging.DEBUG)

    def broken_build(ctx):
        raise st.StageFailed(stage="build", detail="no image builder here")

    stages = {**st.DEFAULT_STAGES, "render": lambda ctx: {"summary": "skipped in this test"}, "build": broken_build}
    with MirrorServer(up.root) as server:
        (lock.parent / "sources.yaml").write_text(
            "mirrors:\n" + "".join(f"  {s.value}: {server.base_url(s)}\n" for s in SourceName))
        # The login is really in play: requests sends it to the mirror.
        assert requests.utils.get_netrc_auth(server.base_url(SourceName.KUBERNETES)) == ("nf-mirror", NETRC_PW)
        cfg = st.PipelineConfig(lockfile=lock, cache_dir=tmp_path / "cache", fixture="leak sweep mirror",
                                packages=False)
        with pytest.raises(PipelineFailed, match=r"build\[1.36\]"):
            Pipeline(cfg, runs_dir=tmp_path / "runs", stages=stages).run()
        [first] = list((tmp_path / "runs").glob("*/run.json"))
        assert '"prefetch"' in first.read_text() and "succeeded" in first.read_text()
        # A mirror setting with a credential-looking query: check refuses it, the record says why.
        up.add_kubernetes("1.36.2")
        monkeypatch.setenv("NODEFORGE_MIRROR_KUBERNETES",
                           f"{server.base_url(SourceName.KUBERNETES)}?token={URL_TOKEN}")
        with pytest.raises(Exception) as second:
            Pipeline(cfg, runs_dir=tmp_path / "runs2", stages=stages).run()
    leaks = [f"exception: {v!r}" for f, v in forms.items() if f in str(second.value)]
    leaks += _scan_tree(tmp_path / "runs", forms) + _scan_tree(tmp_path / "runs2", forms)
    leaks += _scan_tree(tmp_path / "cache", forms) + _scan_tree(lock.parent, forms)
    leaks += [f"log record: {v!r}" for f, v in forms.items() if f in caplog.text]
    assert not leaks, "secrets in the pipeline's run records, files or logs:\n" + "\n".join(leaks)
    # The second run was recorded, failed at check, saying why without the token.
    [second_record] = list((tmp_path / "runs2").glob("*/run.json"))
    text = second_record.read_text()
    assert '"status": "failed"' in text and "failed at check" in text and "holds credentials" in text
