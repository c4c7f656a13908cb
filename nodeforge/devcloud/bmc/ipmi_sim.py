#!/usr/bin/env python3
"""IPMI 2.0 BMC simulator of the nodeforge local cloud.

Serves several emulated BMCs over UDP (RMCP+, ``ipmitool -I lanplus -C 3``)
from one process, one :class:`pyghmi.ipmi.bmc.Bmc` per port, each with its
own credentials, power state and boot device. Runs under the ``bmc``
virtualenv's python and must not import nodeforge.

    .devcloud/venvs/bmc/bin/python ipmi_sim.py --config FILE

FILE is a JSON document (mode 0600, passwords never go on the command line):

    {"listen_ip": "127.0.0.1",
     "bmcs": [{"name": "ipmi-node-01", "port": 6230, "uuid": "...",
               "username": "ipmi01", "password": "...",
               "power_state": "off", "boot_device": "default"}, ...]}

Supported: chassis power status/on/off/cycle/reset/soft, chassis status,
boot device get/set (``chassis bootdev``, ``chassis bootparam get 5``),
``mc info``, ``mc guid``, ``mc reset cold`` (acknowledged; the BMC keeps
running). Power changes land immediately.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import uuid as uuidlib

LOG = logging.getLogger("nodeforge.ipmi_sim")


class _SimulatedHost:
    """An emulated host's power state and boot device as pyghmi's Bmc asks for them (power
    changes land immediately); mixed into :class:`SimBmc` by :func:`make_bmc_class`."""

    def _set_power(self, state: str, verb: str):
        with self._lock:
            old, self.powerstate = self.powerstate, state
        LOG.info("%s: %s (power %s -> %s)", self.name, verb, old, state)

    def get_system_guid(self):
        return self.uuid

    def cold_reset(self):
        LOG.info("%s: BMC cold reset requested (acknowledged, BMC keeps running)", self.name)
        return 0

    def get_power_state(self):
        return self.powerstate

    def power_off(self):
        self._set_power("off", "power off")

    def power_on(self):
        self._set_power("on", "power on")

    def power_cycle(self):
        # Off then on; a powered-off host comes on, as on real BMCs.
        self._set_power("on", "power cycle")

    def power_reset(self):
        if self.powerstate != "on":
            # Real BMCs refuse a reset of a host that is off.
            LOG.info("%s: power reset refused, host is off", self.name)
            return 0xD5     # "command not supported in present state"
        self._set_power("on", "power reset")

    def power_shutdown(self):
        self._set_power("off", "soft power off")

    def pulse_diag(self):
        LOG.info("%s: diagnostic interrupt (NMI)", self.name)

    def is_active(self):
        return self.powerstate == "on"

    def get_boot_device(self):
        return self.bootdevice

    def set_boot_device(self, bootdevice):
        with self._lock:
            self.bootdevice = bootdevice
        LOG.info("%s: boot device -> %s", self.name, bootdevice)


def make_bmc_class(bmc_module):
    """pyghmi's Bmc with a simulated host (pyghmi is imported by the caller, in the bmc virtualenv)."""
    class SimBmc(_SimulatedHost, bmc_module.Bmc):
        def __init__(self, spec: dict, address: str):
            self.name = spec["name"]
            self._lock = threading.Lock()
            self.powerstate = spec.get("power_state", "off")
            self.bootdevice = spec.get("boot_device", "default")
            super().__init__({spec["username"]: spec["password"]}, port=int(spec["port"]),
                             bmcuuid=uuidlib.UUID(spec["uuid"]) if spec.get("uuid") else None,
                             address=address)

    return SimBmc


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="JSON config file (0600)")
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    with open(args.config, encoding="utf-8") as fh:
        cfg = json.load(fh)

    import pyghmi.ipmi.bmc as bmc_module

    sim_cls = make_bmc_class(bmc_module)
    address = cfg.get("listen_ip", "127.0.0.1")
    bmcs = [sim_cls(spec, address) for spec in cfg["bmcs"]]
    for b in bmcs:
        LOG.info("%s listening on udp://%s:%d (power %s)", b.name, address, b.port, b.powerstate)

    def _stop(signum, frame):
        LOG.info("signal %d received, exiting", signum)
        sys.exit(0)

    signal.signal(signal.SIGTERM, _stop)
    # Every Bmc registers its socket with pyghmi's shared session loop;
    # listen() serves them all.
    bmcs[0].listen(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
