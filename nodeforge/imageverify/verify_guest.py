#!/usr/bin/python3
"""Guest side of ``nodeforge image verify``: collect facts, print them, power off.

This file is shipped *as text* inside the cloud-init seed of the throwaway
verification boot (never baked into an image) and runs under the image's own
``python3`` (cloud-init's interpreter), so it uses the standard library only
and imports nothing from nodeforge.

It only **observes**: the host sends a list of probes (``probes.json``), this
script answers each with what it sees (versions printed, file digests, unit
states, sysctls, ``sshd -T``, file modes, globs, sizes), and the host decides
pass/fail (``nodeforge.imageverify.verifychecks``), so every expectation lives
in one place and is unit-tested on the host.

The report goes to the second serial port (``/dev/ttyS1``, a file on the host
that nothing else writes to) framed as::

    NODEFORGE-VERIFY-BEGIN 1 <sha256 of payload> <payload bytes>
    <payload: base64 of the JSON report, 76-character lines>
    NODEFORGE-VERIFY-END

and, if ``ttyS1`` does not exist, to the console (``/dev/ttyS0``), where the
host looks too. Then the machine powers off.

A canary deploy (``nodeforge image canary``) runs the same collector on a node Ironic deployed:
its probes add ``report_url`` (the same frame is POSTed there, a channel a real cloud has too),
``late_commands`` (run once the boot has finished: growpart, the config drive and the network
are done by then) and ``poweroff: false`` (the node stays deployed until it is undeployed).
"""

import base64
import glob
import grp
import hashlib
import json
import os
import pwd
import subprocess
import sys
import time
import urllib.error
import urllib.request

MAGIC_BEGIN = "NODEFORGE-VERIFY-BEGIN"
MAGIC_END = "NODEFORGE-VERIFY-END"
FORMAT = 1
OUTPUT_LIMIT = 2000


def run(argv, timeout=60, limit=OUTPUT_LIMIT):
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
        return {"rc": p.returncode, "output": p.stdout.decode("utf-8", "replace")[:limit]}
    except FileNotFoundError:
        return {"rc": 127, "output": "not found: %s" % argv[0]}
    except subprocess.TimeoutExpired:
        return {"rc": 124, "output": "timed out after %ss" % timeout}
    except OSError as exc:
        return {"rc": 126, "output": str(exc)}


def sha256(path):
    try:
        h = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        return {"sha256": h.hexdigest(), "size": os.path.getsize(path)}
    except OSError as exc:
        return {"error": exc.strerror or str(exc)}


UNIT_PROPS = ("LoadState", "ActiveState", "SubState", "UnitFileState")


def units(names):
    """{name: {property: value}} of each unit, from one ``systemctl show`` (a process started under
    emulation costs about 0.2 s: one per unit was a second and a half of every verify boot). systemctl
    prints one block per unit, in the order asked, blank lines between."""
    names = list(names)
    if not names:
        return {}
    out = run(["systemctl", "show", "--property=" + ",".join(UNIT_PROPS), "--"] + names,
              limit=OUTPUT_LIMIT * len(names))
    blocks = [b for b in out["output"].replace("\r", "").split("\n\n") if b.strip()]
    if out["rc"] != 0 or len(blocks) != len(names):       # not one block per unit: ask one by one
        return {name: unit(name) for name in names}
    return {name: _props(block) for name, block in zip(names, blocks)}


def unit(name):
    out = run(["systemctl", "show", "--property=" + ",".join(UNIT_PROPS), "--", name])
    return _props(out["output"])


def _props(text):
    state = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key in UNIT_PROPS:
            state[key] = value
    return state


def sysctl(key):
    try:
        with open("/proc/sys/" + key.replace(".", "/")) as fh:
            return fh.read().strip()
    except OSError as exc:
        return {"error": exc.strerror or str(exc)}


def loaded_modules():
    names = set()
    try:
        with open("/proc/modules") as fh:
            names = {line.split()[0] for line in fh if line.strip()}
    except OSError:
        pass
    return names


def module_present(name, loaded):
    # Built-in modules do not show in /proc/modules but have /sys/module/<name>.
    return name in loaded or os.path.isdir("/sys/module/" + name.replace("-", "_"))


def sshd_values(keys):
    out = run(["/usr/sbin/sshd", "-T"], limit=1 << 20)   # ~100 lines; only the asked keys are kept
    values = {}
    for line in out["output"].splitlines():
        key, _, value = line.strip().partition(" ")
        if key in keys:
            values[key] = value.strip()
    return {"rc": out["rc"], "values": values,
            "output": "" if out["rc"] == 0 else out["output"][-500:]}


def stat(path):
    try:
        st = os.stat(path)
    except OSError as exc:
        return {"error": exc.strerror or str(exc)}
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return {"mode": "%04o" % (st.st_mode & 0o7777), "owner": owner, "group": group}


def read(path, limit=4096):
    try:
        with open(path, "rb") as fh:
            return fh.read(limit).decode("utf-8", "replace")
    except OSError as exc:
        return {"error": exc.strerror or str(exc)}


def matches(pattern):
    """The paths ``pattern`` matches, sorted; ``**`` matches any number of directories
    (``/usr/lib/modules/*/kernel/sound/**/*.ko*``: a module file at any depth)."""
    return sorted(glob.glob(pattern, recursive=True))


def text(path):
    """File content, or None if unreadable."""
    value = read(path)
    return value if isinstance(value, str) else None


def rootfs():
    """Sizes of the root filesystem, its partition and the disk under it."""
    info = {}
    st = os.stat("/")
    vfs = os.statvfs("/")
    info["fs_bytes"] = vfs.f_blocks * vfs.f_frsize
    info["fs_avail_bytes"] = vfs.f_bavail * vfs.f_frsize
    info["source"] = run(["findmnt", "-n", "-o", "SOURCE,FSTYPE", "/"])["output"].strip()
    sysdir = "/sys/dev/block/%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev))
    real = os.path.realpath(sysdir)
    info["device"] = os.path.basename(real)

    def num(path):
        try:
            with open(path) as fh:
                return int(fh.read().strip())
        except (OSError, ValueError):
            return None

    size, start = num(real + "/size"), num(real + "/start")
    info["partition_bytes"] = size * 512 if size is not None else None
    info["partition_start_bytes"] = start * 512 if start is not None else None
    parent_size = num(os.path.dirname(real) + "/size") if start is not None else None
    info["disk"] = os.path.basename(os.path.dirname(real)) if start is not None else None
    info["disk_bytes"] = parent_size * 512 if parent_size is not None else None
    info["lsblk"] = run(["lsblk", "-b", "-o", "NAME,SIZE,TYPE,FSTYPE,MOUNTPOINTS"])["output"]
    return info


def wait_running(timeout):
    """Wait until systemd finished booting (running or degraded); we are not part
    of the boot transaction (started with systemd-run), so this cannot deadlock."""
    out = run(["systemctl", "is-system-running", "--wait"], timeout=timeout)
    return out["output"].strip() or ("timed out" if out["rc"] == 124 else "rc=%s" % out["rc"])


def wait_units(units, timeout):
    deadline = time.monotonic() + timeout
    for name in units:
        while time.monotonic() < deadline:
            state = unit(name).get("ActiveState")
            if state in ("active", "failed"):
                break
            time.sleep(1)


def console(line):
    """One line on the console, where the host's watch reads the boot's stages."""
    try:
        with open("/dev/console", "w") as con:
            con.write("\r\n%s\r\n" % line)
    except OSError:
        pass


def cloud_init_status():
    """cloud-init's own status files (what ``cloud-init status --long`` prints, without starting
    another Python)."""
    lines = []
    for name in ("status.json", "result.json"):
        try:
            with open("/run/cloud-init/" + name) as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as exc:
            lines.append("%s: %s" % (name, getattr(exc, "strerror", None) or exc))
            continue
        v1 = doc.get("v1") or {}
        if name == "status.json":
            stages = [k for k, v in sorted(v1.items()) if isinstance(v, dict) and v.get("finished")]
            lines.append("stages finished: %s" % ", ".join(stages))
            lines.append("datasource: %s" % v1.get("datasource"))
        else:
            lines.append("status: %s" % ("error" if v1.get("errors") else "done"))
            lines.append("errors: %s" % (v1.get("errors") or []))
    return "\n".join(lines)


def collect_static(probes):
    """What the boot cannot change (installed files and what they print): collected while the
    boot is still going on."""
    return {"commands": {name: run(argv) for name, argv in sorted(probes.get("commands", {}).items())},
            "files": {path: sha256(path) for path in probes.get("files", [])}}


def collect(probes, static=None):
    t0 = time.monotonic()
    report = {"format": FORMAT, "probes": probes.get("id")}
    report.update(static if static is not None else collect_static(probes))
    report["static_seconds"] = round(time.monotonic() - t0, 1)
    report["system_state"] = wait_running(probes.get("wait_seconds", 240))
    wait_units(probes.get("wait_units", []), probes.get("wait_seconds", 240))
    report["waited_seconds"] = round(time.monotonic() - t0, 1)
    console("nodeforge verify: boot finished (%s); checking" % report["system_state"])
    uptime = text("/proc/uptime")
    report["uptime_seconds"] = float(uptime.split()[0]) if uptime else None
    report["kernel"] = os.uname().release
    report["cmdline"] = (text("/proc/cmdline") or "").strip() or None
    report["failed_units"] = run(["systemctl", "list-units", "--failed", "--plain", "--no-legend"])["output"]
    report["cloud_init"] = cloud_init_status()
    report["units"] = units(probes.get("units", []))
    report["sysctls"] = {key: sysctl(key) for key in probes.get("sysctls", [])}
    loaded = loaded_modules()
    report["modules"] = {name: module_present(name, loaded) for name in probes.get("modules", [])}
    report["sshd"] = sshd_values(set(probes.get("sshd", []))) if probes.get("sshd") else None
    report["stat"] = {path: stat(path) for path in probes.get("stat", [])}
    report["globs"] = {pattern: matches(pattern) for pattern in probes.get("globs", [])}
    swaps = text("/proc/swaps")
    report["swaps"] = [line for line in swaps.splitlines()[1:] if line.strip()] if swaps is not None else None
    report["machine_id"] = read("/etc/machine-id")
    report["rootfs"] = rootfs()
    if probes.get("late_commands"):
        report["late_commands"] = {name: run(argv) for name, argv in sorted(probes["late_commands"].items())}
    report["collect_seconds"] = round(time.monotonic() - t0, 1)
    return report


def frame(report):
    payload = json.dumps(report, sort_keys=True).encode()
    b64 = base64.b64encode(payload).decode()
    lines = [b64[i:i + 76] for i in range(0, len(b64), 76)]
    head = "%s %d %s %d" % (MAGIC_BEGIN, FORMAT, hashlib.sha256(payload).hexdigest(), len(payload))
    return "\r\n".join(["", head] + lines + [MAGIC_END, ""])


def emit(text):
    # Quiet the kernel on the console so nothing interleaves with the fallback path.
    run(["dmesg", "--console-level", "1"])
    for port in ("/dev/ttyS1", "/dev/ttyS0"):
        try:
            fd = os.open(port, os.O_WRONLY | os.O_NOCTTY)
        except OSError:
            continue
        try:
            data = text.encode()
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        return port
    return None


def post(url, text, attempts=40, delay=3.0):
    """POST the frame to ``url`` (no proxy: the host given is the one meant); retried while the
    network comes up. Returns what happened, for the console."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    last = "not tried"
    for _ in range(max(1, attempts)):
        try:
            req = urllib.request.Request(url, data=text.encode(), method="POST",
                                         headers={"Content-Type": "text/plain; charset=utf-8"})
            with opener.open(req, timeout=30) as resp:
                if 200 <= resp.status < 300:
                    return "posted (HTTP %d)" % resp.status
                last = "HTTP %d" % resp.status
        except urllib.error.HTTPError as exc:
            last = "HTTP %d" % exc.code
            if 400 <= exc.code < 500:       # refused: sending it again changes nothing
                return "refused (%s)" % last
        except (OSError, ValueError) as exc:
            last = type(exc).__name__
        time.sleep(delay)
    return "not delivered (%s)" % last


def main(argv):
    with open(argv[1]) as fh:
        probes = json.load(fh)
    try:
        report = collect(probes)
    except Exception as exc:  # report the failure instead of hanging the host until its timeout
        report = {"format": FORMAT, "probes": probes.get("id"), "error": "%s: %s" % (type(exc).__name__, exc)}
    framed = frame(report)
    if probes.get("report_url"):
        # The URL carries the run's token: never printed.
        console("nodeforge verify: report %s" % post(probes["report_url"], framed))
    port = emit(framed)
    console("nodeforge verify: report written to %s" % port)
    if probes.get("poweroff", True):
        subprocess.run(["systemctl", "poweroff", "--no-block"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
