"""IPMI over the network, below what ipmitool offers: a presence probe that
needs no credentials (so a refused login can be told from a dead BMC)."""

from __future__ import annotations

import socket


def _checksum(data: bytes) -> int:
    return (-sum(data)) & 0xFF


def ipmi_probe(host: str, port: int, timeout: float = 1.0) -> bool:
    """Unauthenticated IPMI "Get Channel Authentication Capabilities" over
    RMCP; True when a well-formed answer arrives (no credentials needed)."""
    hdr = bytes([0x20, 0x18])                      # rsAddr=BMC, netFn=App(6)<<2
    body = bytes([0x81, 0x00, 0x38, 0x8E, 0x04])   # rqAddr, seq, cmd, chan=E|v2, priv=admin
    msg = hdr + bytes([_checksum(hdr)]) + body + bytes([_checksum(body)])
    packet = bytes([0x06, 0x00, 0xFF, 0x07,        # RMCP: ver, rsvd, seq, class=IPMI
                    0x00, 0, 0, 0, 0, 0, 0, 0, 0,   # auth type none, seq, session id
                    len(msg)]) + msg
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.sendto(packet, (host, port))
            data, _ = sock.recvfrom(512)
        except OSError:
            return False
    # RMCP header echoed and the completion code of a 0x38 response is 0.
    return len(data) > 21 and data[:4] == packet[:4] and data[19] == 0x38 and data[20] == 0x00
