"""QEMU machines behind the Redfish emulator's machine-backed systems.

Standalone like ``redfish_emulator.py`` (which imports it as ``machine``): the
standard library only, run under the ``bmc`` virtualenv, never importing
nodeforge. One :class:`QemuMachine` per machine-backed system; it runs a QEMU
process only while the system is powered on:

* firmware: OVMF (UEFI), with a private copy of the variables store;
* a virtio disk (qcow2, sparse, created at the first power-on);
* a CD-ROM drive (AHCI) for Redfish virtual media, present even when empty,
  so media can be inserted and ejected while the machine runs;
* one virtio NIC on QEMU's user-mode network, isolated (``restrict=on``: the
  guest reaches nothing on the host or beyond), with the host's
  ``127.0.0.1:<agent_port>`` forwarded to the guest's agent port, and the
  guest's ``10.0.2.100:<port>`` forwarded to the host's ``127.0.0.1:<port>`` for
  exactly the ports the emulator's config names (``guest_forwards``: Ironic's
  API, its http_root server): QEMU's ``guestfwd`` with a ``cmd:`` target, which
  runs :func:`relay` (this file, ``python -I -S machine.py relay PORT``) per
  connection (the chardev form of guestfwd carries a single connection, all
  guest connections mixed into one stream);
* the serial console appended to ``console.log``, QEMU's own messages to
  ``qemu.log``;
* QMP on QEMU's stdin/stdout (no socket file): powerdown, NMI, media changes,
  and the events, which are logged.

Each power-on starts a new QEMU process with the boot order of that moment:
the Redfish boot override target first when the override is enabled (a
``Once`` override is used up by that power-on), else disk, CD, network. A
reboot the guest makes itself stays inside the same process (same order).
PowerState is the process's: a guest that powers itself off is ``Off``.

Nothing outlives the emulator: :meth:`QemuMachine.stop` and :func:`stop_all`
stop the processes, and every QEMU is started from one long-lived thread with
``PR_SET_PDEATHSIG`` so the kernel stops it if the emulator dies without
cleaning up.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import itertools
import json
import logging
import os
import shutil
import signal
import select
import shlex
import socket
import subprocess
import sys
import threading
import time

LOG = logging.getLogger("nodeforge.redfish_emulator.machine")

AGENT_GUEST_PORT = 9999
# The address a guest reaches the host's forwarded services at. Not 10.0.2.2 (the user-mode
# network's gateway, the usual "host" address) nor 10.0.2.3 (its DNS): libslirp refuses a guest
# forward on either ("Conflicting/invalid host:port in guest forwarding rule"), so the services get
# an address of their own on the guest's /24, which slirp answers ARP for.
GUEST_HOST = "10.0.2.100"
RELAY_HOST = "127.0.0.1"                        # where a guest forward goes: loopback, nothing else
RELAY_IDLE = 600.0                              # seconds a forwarded connection may idle before it is closed
BOOT_TARGETS = ("Hdd", "Cd", "Pxe")            # the boot override targets a machine honours
BOOT_ENABLED = ("Disabled", "Once", "Continuous")
DEFAULT_ORDER = ("Hdd", "Cd", "Pxe")            # the firmware's order without an override
START_TIMEOUT = 30.0                            # QEMU answering QMP after its start
STOP_TIMEOUT = 5.0                              # SIGTERM, then SIGKILL

_PR_SET_PDEATHSIG = 1


class MachineError(Exception):
    """A machine could not do what was asked (the message says why)."""


def _die_with_parent() -> None:       # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


# PR_SET_PDEATHSIG fires when the *thread* that forked the child ends, not the process: QEMU is
# started from this one long-lived thread, never from a request thread that ends after its answer.
_SPAWNER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="qemu-spawner")


def _spawn(argv: list[str], log_path: str) -> subprocess.Popen:
    def popen() -> subprocess.Popen:
        with open(log_path, "ab") as log:
            return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                    preexec_fn=_die_with_parent, close_fds=True)
    return _SPAWNER.submit(popen).result()


def _opt(value: str) -> str:
    """A value inside a QEMU ``key=value,...`` option (commas doubled)."""
    return str(value).replace(",", ",,")


def _tail(path: str, lines: int = 10) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4096))
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class Qmp:
    """QMP over a QEMU process's stdin/stdout: commands with replies, events to a callback."""

    def __init__(self, proc: subprocess.Popen, name: str, on_event, on_exit):
        self.proc, self.name = proc, name
        self._on_event, self._on_exit = on_event, on_exit
        self._ids = itertools.count(1)
        self._replies: dict[int, dict] = {}
        self._cond = threading.Condition()
        self._write = threading.Lock()
        self._closed = False
        self._reader = threading.Thread(target=self._read, name=f"qmp-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "event" in msg:
                try:
                    self._on_event(msg)
                except Exception:  # noqa: BLE001 - a callback's failure must not stop the reader
                    LOG.exception("%s: QMP event handler failed", self.name)
            elif "id" in msg:
                with self._cond:
                    self._replies[msg["id"]] = msg
                    self._cond.notify_all()
        self.proc.wait()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._on_exit(self.proc)

    def command(self, name: str, timeout: float = 10.0, **arguments) -> dict:
        ident = next(self._ids)
        msg = {"execute": name, "id": ident}
        if arguments:
            msg["arguments"] = arguments
        with self._write:
            try:
                self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError, OSError):
                raise MachineError(f"{self.name}: QEMU is not running") from None
        deadline = time.monotonic() + timeout
        with self._cond:
            while ident not in self._replies:
                left = deadline - time.monotonic()
                if self._closed or left <= 0:
                    raise MachineError(f"{self.name}: no QMP answer to {name}"
                                       + (" (QEMU exited)" if self._closed else f" within {timeout:.0f} s"))
                self._cond.wait(left)
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise MachineError(f"{self.name}: QMP {name}: {reply['error'].get('desc', reply['error'])}")
        return reply.get("return", {})


class QemuMachine:
    """The machine behind one Redfish system: its files under ``directory``, its QEMU process."""

    def __init__(self, system: dict, tools: dict, directory: str, guest_forwards=()):
        self.system, self.tools, self.dir = system, tools, directory
        self.guest_forwards = [_port(p, "guest_forwards") for p in guest_forwards]
        self.spec = system["machine"]
        self.name = system["name"]
        self.lock = threading.RLock()
        self.proc: subprocess.Popen | None = None
        self.qmp: Qmp | None = None
        self.boot_device = "Hdd"
        self.boot_enabled = "Disabled"
        self.cd: str | None = None               # the inserted ISO (a local file), or None
        self.cd_write_protected = True
        self._restart_on_exit = False
        self.events: list[dict] = []              # the last QMP events (for logs and tests)

    # -- files -------------------------------------------------------------------------------------------

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    @property
    def console_log(self) -> str:
        return self.path("console.log")

    def _prepare(self) -> None:
        missing = [k for k in ("qemu", "qemu_img", "ovmf_code", "ovmf_vars") if not self.tools.get(k)]
        if missing:
            raise MachineError(f"{self.name}: cannot power on: {', '.join(missing)} not found on this host "
                               f"(Debian packages qemu-system-x86, qemu-utils, ovmf)")
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        if not os.path.exists(self.path("OVMF_VARS.fd")):
            shutil.copyfile(self.tools["ovmf_vars"], self.path("OVMF_VARS.fd"))
        if not os.path.exists(self.path("disk.qcow2")):
            out = subprocess.run([self.tools["qemu_img"], "create", "-q", "-f", "qcow2", self.path("disk.qcow2"),
                                  f"{self.spec['disk_gib']}G"], capture_output=True, text=True, check=False,
                                 timeout=60)
            if out.returncode != 0:
                raise MachineError(f"{self.name}: qemu-img create failed: {out.stderr.strip()}")

    # -- QEMU command line -------------------------------------------------------------------------------

    def boot_order(self) -> list[str]:
        """The devices in the order this power-on boots them."""
        first = self.boot_device if self.boot_enabled != "Disabled" and self.boot_device in BOOT_TARGETS else None
        return ([first] if first else []) + [d for d in DEFAULT_ORDER if d != first]

    def argv(self) -> list[str]:
        s, m, t = self.system, self.spec, self.tools
        index = {dev: i for i, dev in enumerate(self.boot_order())}
        cd = f",format=raw,file={_opt(self.cd)}" if self.cd else ""     # an empty drive takes no format
        mac = s["nics"][0]["mac"]
        return [
            t["qemu"], "-name", f"nodeforge-machine-{s['name']}", "-nodefaults", "-display", "none",
            "-machine", f"{t.get('machine_type', 'q35')},accel={t.get('accel', 'tcg')}",
            "-cpu", t.get("cpu", "max"), "-smp", str(m["cpus"]), "-m", str(m["memory_mib"]),
            "-uuid", s["uuid"],
            "-smbios", f"type=1,manufacturer={_opt(s['manufacturer'])},product={_opt(s['model'])},"
                       f"serial={_opt(s['serial'])},sku={_opt(s['sku'])},uuid={s['uuid']}",
            "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={_opt(t['ovmf_code'])}",
            "-drive", f"if=pflash,format=raw,unit=1,file={_opt(self.path('OVMF_VARS.fd'))}",
            # Thin like a SAN volume: blocks the guest zeroes (a full-disk erase's zero pass) are
            # unmapped in the qcow2, not written out on this host's disk.
            "-drive", f"if=none,id=disk0,format=qcow2,cache=unsafe,discard=unmap,detect-zeroes=unmap,"
                      f"file={_opt(self.path('disk.qcow2'))}",
            "-device", f"virtio-blk-pci,drive=disk0,id=disk,bootindex={index['Hdd']}",
            "-drive", f"if=none,id=cd0,media=cdrom,readonly=on{cd}",
            "-device", f"ide-cd,drive=cd0,id=cd,bus=ide.0,bootindex={index['Cd']}",
            # User-mode network, isolated: the guest reaches nothing but the agent's port forwarded
            # in from loopback and the guest forwards out (10.0.2.100:P -> 127.0.0.1:P, nothing else).
            # No option ROM: OVMF's own virtio-net driver network-boots.
            "-netdev", f"user,id=net0,restrict=on,"
                       f"hostfwd=tcp:127.0.0.1:{m['agent_port']}-:{m.get('agent_guest_port', AGENT_GUEST_PORT)}"
                       + "".join(f",guestfwd={_opt(self.guestfwd(p))}" for p in self.guest_forwards),
            "-device", f"virtio-net-pci,netdev=net0,id=nic,mac={mac},romfile=,bootindex={index['Pxe']}",
            "-chardev", f"file,id=serial0,append=on,path={_opt(self.console_log)}", "-serial", "chardev:serial0",
            "-chardev", "stdio,id=qmp0,signal=off", "-mon", "chardev=qmp0,mode=control",
        ]

    def guestfwd(self, port: int) -> str:
        """QEMU's guestfwd rule for ``GUEST_HOST:port`` -> ``127.0.0.1:port``: a relay per connection."""
        relay_cmd = shlex.join([sys.executable, "-I", "-S",
                                os.path.abspath(__file__), "relay", str(port)])
        return f"tcp:{GUEST_HOST}:{port}-cmd:{relay_cmd}"

    # -- power -------------------------------------------------------------------------------------------

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def power_state(self) -> str:
        return "On" if self.running() else "Off"

    def start(self) -> None:
        with self.lock:
            if self.running():
                return
            self._prepare()
            argv = self.argv()
            order = self.boot_order()
            with open(self.path("qemu.log"), "ab") as log:
                log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} power on, boot order "
                          f"{', '.join(order)}\n{' '.join(argv)}\n".encode())
            proc = _spawn(argv, self.path("qemu.log"))
            self.proc = proc
            self.qmp = Qmp(proc, self.name, self._event, self._exited)
            try:
                self.qmp.command("qmp_capabilities", timeout=START_TIMEOUT)
            except MachineError:
                self._kill(proc)
                self.proc = self.qmp = None
                said = _tail(self.path("qemu.log"), 20).split("\n--- ")[-1].splitlines()[2:]
                raise MachineError(f"{self.name}: QEMU did not start (exit code {proc.returncode}): "
                                   + (" ".join(said)[-600:] or "no message")) from None
            if self.boot_enabled == "Once":
                self.boot_enabled = "Disabled"
            LOG.info("%s: powered on (QEMU pid %d, boot order %s)", self.name, proc.pid, ", ".join(order))

    def stop(self) -> None:
        """Power off at once (QEMU stopped: SIGTERM, then SIGKILL)."""
        with self.lock:
            self._restart_on_exit = False
            proc = self.proc
            if proc is None or proc.poll() is not None:
                return
            self._kill(proc)
            LOG.info("%s: powered off (QEMU pid %d stopped)", self.name, proc.pid)

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            proc.terminate()
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        except ProcessLookupError:
            pass

    def powerdown(self) -> None:
        """The ACPI power button: the guest decides (a guest that ignores it stays on)."""
        with self.lock:
            if self.running():
                self.qmp.command("system_powerdown")

    def restart(self) -> None:
        """Power cycle: a new QEMU process (the boot override and media of this moment apply)."""
        with self.lock:
            self.stop()
            self.start()

    def graceful_restart(self) -> None:
        """ACPI power button, then power on again once the guest has powered off."""
        with self.lock:
            if not self.running():
                self.start()
                return
            self._restart_on_exit = True
            self.qmp.command("system_powerdown")

    def nmi(self) -> None:
        with self.lock:
            if self.running():
                self.qmp.command("inject-nmi")

    def set_power_state(self, state: str) -> None:
        if state in ("On", "ForceOn"):
            self.start()
        elif state == "ForceOff":
            self.stop()
        elif state == "GracefulShutdown":
            self.powerdown()
        elif state in ("ForceRestart", "PowerCycle"):
            self.restart()
        elif state == "GracefulRestart":
            self.graceful_restart()
        elif state == "PushPowerButton":
            if self.running():
                self.powerdown()
            else:
                self.start()
        elif state == "Nmi":
            self.nmi()
        else:
            raise MachineError(f"power state {state} is not supported")

    def _event(self, msg: dict) -> None:
        self.events = (self.events + [msg])[-50:]
        LOG.info("%s: QMP event %s %s", self.name, msg.get("event"), json.dumps(msg.get("data", {})))

    def _exited(self, proc: subprocess.Popen) -> None:
        LOG.info("%s: QEMU pid %d exited with %s (powered off)", self.name, proc.pid, proc.returncode)
        if self._restart_on_exit and self.proc is proc:
            self._restart_on_exit = False
            threading.Thread(target=self._restart_after_exit, name=f"restart-{self.name}", daemon=True).start()

    def _restart_after_exit(self) -> None:
        try:
            self.start()
        except MachineError as exc:
            LOG.error("%s: power on after the graceful restart failed: %s", self.name, exc)

    # -- boot device and media -----------------------------------------------------------------------------

    def set_boot(self, target: str | None = None, enabled: str | None = None) -> None:
        with self.lock:
            if enabled is not None:
                if enabled not in BOOT_ENABLED:
                    raise MachineError(f"BootSourceOverrideEnabled {enabled!r}: one of {', '.join(BOOT_ENABLED)}")
                self.boot_enabled = enabled
            if target is not None:
                if target not in BOOT_TARGETS:
                    raise MachineError(f"boot target {target!r}: a machine boots from {', '.join(BOOT_TARGETS)}")
                self.boot_device = target
                if enabled is None and self.boot_enabled == "Disabled":
                    self.boot_enabled = "Continuous"      # a target alone enables the override

    def set_cd(self, path: str | None, write_protected: bool = True) -> None:
        """Insert ``path`` (an ISO) into the CD-ROM drive, or eject with None; live when running."""
        with self.lock:
            old = self.cd
            if self.running():
                if path:
                    self.qmp.command("blockdev-change-medium", id="cd", filename=path, format="raw",
                                     **{"read-only-mode": "read-only"})
                else:
                    self.qmp.command("eject", id="cd", force=True)
            self.cd, self.cd_write_protected = path, write_protected
            LOG.info("%s: CD %s", self.name, f"inserted {path}" if path else "ejected")
        if old and old != path and os.path.exists(old):
            try:
                os.unlink(old)                    # the previous download, no longer attached
            except OSError:
                pass


def _port(value, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise MachineError(f"{field}: {value!r} is not a TCP port")
    return value


def relay(port: int, guest: socket.socket | None = None) -> int:
    """One guest connection (on stdin/stdout, as QEMU's guestfwd ``cmd:`` hands it over) relayed to
    ``127.0.0.1:port`` until both sides have closed (or it idles :data:`RELAY_IDLE` seconds)."""
    guest = guest or socket.socket(fileno=0)
    try:
        upstream = socket.create_connection((RELAY_HOST, _port(port, "relay port")), timeout=10)
    except OSError:
        return 1                                   # the guest sees its connection closed
    upstream.settimeout(None)
    peer = {guest: upstream, upstream: guest}
    reading = {guest, upstream}
    while reading:
        ready, _, _ = select.select(list(reading), [], [], RELAY_IDLE)
        if not ready:
            break
        for sock in ready:
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if data:
                try:
                    peer[sock].sendall(data)
                    continue
                except OSError:
                    return 0
            reading.discard(sock)                  # this side is done sending: pass the half-close on
            try:
                peer[sock].shutdown(socket.SHUT_WR)
            except OSError:
                pass
    return 0


def stop_all(machines) -> None:
    """Stop every running machine, all at once (SIGTERM to each, then wait, SIGKILL the stragglers)."""
    procs = []
    for m in machines:
        m._restart_on_exit = False
        if m.running():
            procs.append((m, m.proc))
            try:
                m.proc.terminate()
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + STOP_TIMEOUT
    for m, proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        LOG.info("%s: stopped with the emulator (QEMU pid %d)", m.name, proc.pid)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "relay":
    sys.exit(relay(int(sys.argv[2])))
