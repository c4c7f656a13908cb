"""Pre-flight: check every BMC in parallel before Ironic is touched.

Redfish (sushy, basic auth): reachable, credentials accepted, TLS chain valid
(or explicitly not verified), system id unambiguous, power state readable;
reads serial number, model, boot mode, CPU, memory and NIC MACs.
IPMI (``ipmitool -I lanplus``, password via ``IPMI_PASSWORD``/``-E``, never on
the command line): ``power status``. Failures are classified per node
(the bare-metal :class:`~nodeforge.ironic.errorkind.ErrorKind`: network, auth,
tls, ambiguous-system, unsupported, error); passwords never appear in any message.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

from nodeforge.base.ipmitool import ipmitool
from nodeforge.base.runner import CommandTimeout
from nodeforge.ironic.ipmi import ipmi_probe
from nodeforge import transport
from nodeforge.ironic.errorkind import ErrorKind
from nodeforge.ironic.inventory import BmcKind, Inventory, NodeSpec
from nodeforge.redact import scrub


@dataclasses.dataclass
class Check:
    name: str
    bmc: str
    ok: bool
    failure: ErrorKind | None = None
    detail: str | None = None
    power_state: str | None = None
    facts: dict = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, "bmc": self.bmc, "ok": self.ok,
                "failure": self.failure.value if self.failure else None,
                "detail": scrub(self.detail) if self.detail else None, "power_state": self.power_state,
                "facts": self.facts}


REDFISH_TRIES = 3          # sushy's own default is 10 tries 3 s apart: 27 s before an unreachable BMC is reported


def redfish_limits(timeout: float) -> dict:
    """sushy settings that keep one pre-flight request within about ``timeout`` seconds: a few
    tries one second apart, each connection attempt a share of the timeout."""
    return {"server_side_retries": REDFISH_TRIES, "server_side_retries_delay": 1, "read_timeout": timeout,
            "connect_timeout": max(1.0, timeout / REDFISH_TRIES)}


def check_redfish(spec: NodeSpec, timeout: float = 10.0) -> Check:
    import requests
    import sushy
    from sushy import exceptions as sx

    b = spec.bmc
    c = Check(spec.name, b.address, ok=False)
    try:
        root = sushy.Sushy(f"{b.redfish_address}/redfish/v1", verify=b.verify_ca,
                           auth=sushy.auth.BasicAuth(b.username, b.password.reveal()),
                           **redfish_limits(timeout))
        if b.system_id:
            system = root.get_system(b.system_id)
        else:
            members = root.get_system_collection().members_identities
            if len(members) != 1:
                c.failure, c.detail = ErrorKind.AMBIGUOUS_SYSTEM, (
                    f"{len(members)} systems behind this BMC; name one in the URL (/redfish/v1/Systems/ID)")
                return c
            system = root.get_system(members[0])
        c.power_state = str(system.power_state.value if hasattr(system.power_state, "value") else system.power_state)
        macs = []
        try:
            macs = sorted(str(i.mac_address).lower() for i in system.ethernet_interfaces.get_members()
                          if i.mac_address)
        except sx.SushyError:
            pass
        c.facts = {"serial_number": system.serial_number, "model": system.model,
                   "manufacturer": system.manufacturer,
                   "boot_mode": getattr(system.boot.mode, "value", system.boot.mode) if system.boot else None,
                   "cpu_count": system.processors.summary.count if system.processors else None,
                   "memory_gib": system.memory_summary.size_gib if system.memory_summary else None,
                   "macs": macs}
        missing = [m for m in spec.macs if macs and m not in macs]
        if missing:
            c.detail = f"inventory MACs not reported by the BMC: {', '.join(missing)}"
        c.ok = True
    except sx.AccessError as exc:
        status = getattr(exc, "status_code", None)
        refused = status is None or transport.kind_of(status) is transport.ErrorKind.AUTH
        c.failure = ErrorKind.AUTH if refused else ErrorKind.ERROR
        c.detail = f"BMC refused the credentials (HTTP {status})"
    except sx.ResourceNotFoundError:
        c.failure, c.detail = ErrorKind.AMBIGUOUS_SYSTEM, f"system {b.system_id} not found on the BMC"
    except sx.ConnectionError as exc:
        text = str(exc)
        if "CERTIFICATE_VERIFY_FAILED" in text or "SSLError" in text or "certificate" in text.lower():
            c.failure, c.detail = ErrorKind.TLS, "TLS certificate not trusted (set verify_ca to a CA bundle, or false)"
        else:
            c.failure, c.detail = ErrorKind.NETWORK, "BMC unreachable"
    except requests.exceptions.SSLError:
        c.failure, c.detail = ErrorKind.TLS, "TLS handshake failed"
    except sx.SushyError as exc:
        c.failure, c.detail = ErrorKind.UNSUPPORTED, f"{type(exc).__name__}: {scrub(str(exc))[:200]}"
    except Exception as exc:  # noqa: BLE001 - one bad BMC must not stop the batch
        c.failure, c.detail = ErrorKind.ERROR, f"{type(exc).__name__}"
    return c


def check_ipmi(spec: NodeSpec, timeout: float = 10.0) -> Check:
    b = spec.bmc
    c = Check(spec.name, b.address, ok=False)
    try:
        proc = ipmitool(b.host, b.port or 623, b.username or "", b.password, "power", "status",
                        retries=2, timeout_per_try=1, timeout=timeout)
    except CommandTimeout:
        c.failure, c.detail = ErrorKind.NETWORK, "no IPMI answer (timeout)"
        return c
    out = scrub((proc.stdout + proc.stderr).strip())
    if proc.returncode == 0 and "Chassis Power is" in out:
        c.ok, c.power_state = True, out.rsplit(" ", 1)[-1]
        return c
    low = out.lower()
    if "unable to establish" in low:
        # Some BMCs (pyghmi's) answer a bad password like an absent BMC; an
        # unauthenticated capabilities probe tells the two apart.
        if ipmi_probe(b.host, b.port or 623):
            c.failure, c.detail = ErrorKind.AUTH, "BMC answers but refused the session (credentials)"
        else:
            c.failure, c.detail = ErrorKind.NETWORK, "BMC unreachable"
        return c
    if "unauthorized name" in low or "rakp" in low or "password" in low or "authentication" in low:
        c.failure, c.detail = ErrorKind.AUTH, "BMC refused the credentials"
    elif "no response" in low or "timeout" in low or "connection" in low:
        c.failure, c.detail = ErrorKind.NETWORK, "BMC unreachable"
    elif "cipher" in low:
        c.failure, c.detail = ErrorKind.UNSUPPORTED, "no common cipher suite"
    else:
        c.failure, c.detail = ErrorKind.ERROR, out[-200:]
    return c


def check(spec: NodeSpec) -> Check:
    if spec.bmc.kind is BmcKind.IPMI:
        return check_ipmi(spec)
    if spec.bmc.is_redfish:
        return check_redfish(spec)
    return Check(spec.name, spec.bmc.address, ok=True, detail="fake hardware: nothing to check")


def run(inventory: Inventory, *, jobs: int = 16) -> list[Check]:
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(check, inventory.nodes))
