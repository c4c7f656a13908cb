"""JSON that reaches nodeforge from somewhere other than a file: a statement inside a signed
envelope, a canary report or manifest downloaded from Glance, the framed report a booted guest
prints on its serial console, the node data the agent returns. Each goes through
``schema.loader.parse_json``, the file reader's limits on bytes already in memory: deep nesting,
NaN and Infinity, numbers no field holds, lone surrogates, too many values and non-UTF-8 bytes
end in the reader's own error, never a RecursionError, a MemoryError or a silently odd value."""

from __future__ import annotations

import base64
import hashlib

import pytest

from nodeforge.errors import ConfigError
from nodeforge.imageverify import boottest, verify_guest
from nodeforge.publish import provenance
from nodeforge.schema import loader

HOSTILE = {
    "deep": b"[" * 200_000 + b"]" * 200_000,
    "nan": b'{"a": NaN}',
    "infinity": b'{"a": [1, -Infinity]}',
    "huge number": b'{"a": 1' + b"0" * 5000 + b"}",
    "lone surrogate": b'{"a": "\\ud800"}',
    "many values": b"[" + b"0," * 2_000_000 + b"0]",
    "not utf-8": b'{"a": "\xff"}',
    "nul": b'{"a": 1}\x00',
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_parse_json_refuses_by_label(name):
    with pytest.raises(ConfigError) as err:
        loader.parse_json("the payload", HOSTILE[name])
    assert str(err.value).startswith("the payload"), str(err.value)


def test_parse_json_refuses_a_payload_over_the_size_limit_before_decoding():
    with pytest.raises(ConfigError, match="larger than"):
        loader.parse_json("the payload", b" " * (loader.DEFAULT_LIMITS.max_bytes + 1))


def test_parse_json_reads_plain_json():
    assert loader.parse_json("x", b'{"a": [1, 2.5, "\\u00e9", null, true]}') == {"a": [1, 2.5, "é", None, True]}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_provenance_statement_of_hostile_json_is_invalid_provenance(name):
    with pytest.raises(provenance.ProvenanceInvalid) as err:
        provenance.parse_statement(HOSTILE[name], "img-1")
    assert "img-1" in str(err.value) and "statement" in str(err.value)


@pytest.mark.parametrize("name", sorted(set(HOSTILE) - {"not utf-8", "nul"}))
def test_a_guest_report_of_hostile_json_is_a_report_error(name):
    """The frame's digest is right (the guest computed it): only the JSON inside is hostile."""
    payload = HOSTILE[name]
    b64 = base64.b64encode(payload).decode()
    head = f"{verify_guest.MAGIC_BEGIN} {verify_guest.FORMAT} {hashlib.sha256(payload).hexdigest()} {len(payload)}"
    framed = "\r\n".join(["console noise", head, *[b64[i:i + 76] for i in range(0, len(b64), 76)],
                           verify_guest.MAGIC_END, ""])
    with pytest.raises(boottest.ReportError):
        boottest.parse_report(framed)


def test_a_guest_report_framed_as_the_guest_frames_it_is_read():
    assert boottest.parse_report(verify_guest.frame({"a": [1, "b"]})) == {"a": [1, "b"]}


@pytest.mark.parametrize("path", ["/dev/zero", "fifo", "big"])
def test_a_certificate_given_to_provenance_is_read_bounded(path, tmp_path):
    """``image provenance --cert FILE``: a device, a FIFO (a hang) or a large file is refused by name."""
    import os

    if path == "fifo":
        path = tmp_path / "cert.pem"
        os.mkfifo(path)
    elif path == "big":
        path = tmp_path / "cert.pem"
        path.write_bytes(b"-" * (1 << 20))
    with pytest.raises(ConfigError) as err:
        provenance._certificate(None, {}, path, None, "img-1")
    assert str(path) in str(err.value)
