"""Hostile URLs: a credential anywhere a URL can hold one never survives the redactor
(nodeforge.redact), and a command handed such a URL prints it masked.

* property (hypothesis): URLs with a marker string as password (holding any of ``/ ? # @ :``),
  as a user-name token, as a sensitive query value or in a fragment, with and without a scheme,
  alone or inside free text: the marker is in no ``redact_url``/``redact_urls``/``scrub`` result;
* the Debian mirror variables: a bad URL is one error naming the variable, exit 2, no
  traceback, the credential nowhere;
* ``--allow-plaintext-secrets`` lets plaintext secrets in, and every output still masks them
  (driver_info URLs with credentials, ``snmp_community``);
* a template's proxy URL with credentials is refused without echoing them.
"""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nodeforge.redact import redact_url, redact_urls, scrub, scrub_obj, url_has_credentials
from tests.hostile.conftest import REPO, check, run_cli

MARKER = "NFurlMARKq7"
URL_PROPERTY = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                        suppress_health_check=[HealthCheck.too_slow])

# What a password may hold here: anything but whitespace and the quotes and angle brackets
# that end a URL in free text (a password with those cannot be told from the text around it).
_PW_CHARS = string.ascii_letters + string.digits + "-._~!$&()*+,;=%/?#@:[]{}|^`\\"
_USER_CHARS = string.ascii_letters + string.digits + "-._~%"
_VALUE_CHARS = string.ascii_letters + string.digits + "-._~%+/=:@!$()*,"   # no & ; # (they end a value), no quote
SENSITIVE_KEYS = ["X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token", "X-Goog-Signature",
                  "X-Goog-Credential", "OSSAccessKeyId", "Signature", "sig", "token", "access_token", "password",
                  "passwd", "secret", "api_key", "apikey", "key", "client_secret", "temp_url_sig", "refresh_token"]


def _cased(draw, name: str) -> str:
    return "".join(c.upper() if draw(st.booleans()) else c.lower() for c in name) if draw(st.booleans()) else name


@st.composite
def _secret(draw, chars: str) -> str:
    text = st.text(alphabet=chars, max_size=6)
    return draw(text) + MARKER + draw(text)


@st.composite
def _host(draw) -> str:
    name = draw(st.sampled_from(["h.example", "deb.debian.org", "10.0.0.1", "[2001:db8::1]", "[::1]", "proxy",
                                 "mirror-1.example.org"]))
    port = draw(st.one_of(st.just(""), st.integers(1, 65535).map(lambda p: f":{p}")))
    return name + port


@st.composite
def _tail(draw) -> str:
    """A path, query and fragment holding no credential (and no '@')."""
    path = draw(st.sampled_from(["", "/", "/debian", "/k8s/release/v1.36.0/bin", "/a.b/c-d_e~f"]))
    plain = st.tuples(st.sampled_from(["a", "x", "page", "sv", "Expires"]), st.text(string.ascii_letters, max_size=4))
    pairs = draw(st.lists(plain, max_size=2))
    query = ("?" + "&".join(f"{k}={v}" for k, v in pairs)) if pairs else ""
    fragment = draw(st.sampled_from(["", "#top", "#section-2"]))
    return path + query + fragment


@st.composite
def hostile_urls(draw) -> str:
    """One URL with :data:`MARKER` as a credential, in one of the forms a credential takes."""
    scheme = draw(st.sampled_from(["http://", "https://", "HTTPS://", "ftp://", "redfish+https://", "s3://", "//",
                                   ""]))
    host, tail = draw(_host()), draw(_tail())
    form = draw(st.sampled_from(["password", "user", "query", "fragment"] if scheme else ["password"]))
    user = draw(st.text(alphabet=_USER_CHARS, max_size=6))
    if form == "password":
        return f"{scheme}{user}:{draw(_secret(_PW_CHARS))}@{host}{tail}"
    if form == "user":
        return f"{scheme}{draw(_secret(_USER_CHARS))}@{host}{tail}"
    path, _, rest = tail.partition("#")
    pair = f"{_cased(draw, draw(st.sampled_from(SENSITIVE_KEYS)))}={draw(_secret(_VALUE_CHARS))}"
    if form == "query":
        sep = "&" if "?" in path else "?"
        return f"{scheme}{host}{path}{sep}{pair}" + (f"#{rest}" if rest else "")
    fragment = draw(st.sampled_from([pair, f"state=x&{pair}", f"{pair}&token_type=bearer",
                                     f"/callback?{pair}", f"secret-{draw(_secret(_USER_CHARS))}"]))
    return f"{scheme}{host}{path.split('#')[0]}#{fragment}"


_AROUND = ["{}", "error: cannot download InRelease {}: nonnumeric port", "({})", "see {}.", "url={}", "'{}'",
           "\"{}\"", "<{}>", "[{}]", "a,{},b", "x\n{}\ty", "{}: HTTP 403"]


@URL_PROPERTY
@given(url=hostile_urls(), around=st.sampled_from(_AROUND))
def test_no_credential_survives_the_redactor(url, around):
    assert MARKER not in redact_url(url), url
    assert url_has_credentials(url), url
    text = around.format(url)
    for shown in (redact_urls(text), scrub(text), json.dumps(scrub_obj({"url": url, "note": text}))):
        assert MARKER not in shown, (url, shown)


@URL_PROPERTY
@given(urls=st.lists(hostile_urls(), min_size=2, max_size=4))
def test_no_credential_survives_among_several_urls(urls):
    text = " ".join(urls)
    assert MARKER not in redact_urls(text), text


# --- the Debian mirror variables through the CLI ---------------------------------------------------------

BAD_MIRRORS = [f"http://user:pa/{MARKER}@deb.example/debian",         # urlsplit: port 'pa' -> InvalidURL before
               f"http://user:{MARKER}@deb.example/debian",
               f"http://user:{MARKER}#x@deb.example/debian",
               f"http://user:{MARKER}@[::1/debian",                   # unparseable: masked whole
               f"http://us er:{MARKER}@deb.example:99999/debian",
               f"https://deb.example/debian?token={MARKER}",
               f"https://deb.example/debian#access_token={MARKER}",
               f"user:{MARKER}@deb.example/debian",
               f"http://user:pa ss/{MARKER}@deb.example/debian",
               f"http://deb.example/deb ian?token={MARKER}"]


@pytest.mark.parametrize("var", ["NODEFORGE_DEBIAN_MIRROR", "NODEFORGE_DEBIAN_SECURITY_MIRROR"])
@pytest.mark.parametrize("url", BAD_MIRRORS)
@pytest.mark.parametrize("fmt", [[], ["-o", "json"], ["--log-format", "json"]])
def test_a_bad_mirror_url_is_one_error_naming_the_variable(var, url, fmt, no_cloud_env):
    env = {**no_cloud_env, "NODEFORGE_DEBIAN_MIRROR": "http://deb.example/debian",
           "NODEFORGE_DEBIAN_SECURITY_MIRROR": "http://deb.example/debian-security", var: url}
    run = run_cli([*fmt, "release", "lock-packages", "--dry-run", "--lockfile", REPO / "manifests/versions.yaml"],
                  env=env)
    check(run, codes=(2,), json_out="-o" in fmt, secrets={MARKER: MARKER})
    lines = [line for line in run.err.splitlines() if line.strip()]
    if fmt == ["--log-format", "json"]:
        [record] = [json.loads(line) for line in lines]
        assert record["level"] == "error" and record["message"].startswith(f"{var}: ") and record["exit_code"] == 2
    else:
        assert [line for line in lines if var in line] == [lines[0]] and lines[0].startswith(f"error: {var}: ")
        assert all(line.startswith(("error: ", "hint: ")) for line in lines), run.err
    if fmt == ["-o", "json"]:
        doc = json.loads(run.out)
        assert doc["exit_code"] == 2 and doc["error"].startswith(f"{var}: ")


# --- --allow-plaintext-secrets: let in, still masked everywhere ----------------------------------------

PLAIN = {"bmc": "NFplainBMCpw9x", "kernel": "NFkernelPWq3", "sig": "NFgoogSIGz8", "community": "NFcommunityK2",
         "proxy": "NFproxyPWm5"}


def _plaintext_inventory(d) -> str:
    (d / "inv.yaml").write_text(f"""version: 1
nodes:
  - name: n1
    bmc: {{address: "ipmi://10.0.0.21:623", username: admin, password: "{PLAIN['bmc']}"}}
    macs: ["02:4e:46:00:01:10"]
    driver_info:
      deploy_kernel: "http://kuser:pa/{PLAIN['kernel']}@images.example/k"
      deploy_ramdisk: "https://images.example/r?X-Goog-Signature={PLAIN['sig']}&X-Goog-Credential={PLAIN['sig']}"
      snmp_community: "{PLAIN['community']}"
      rescue_kernel: "kuser:{PLAIN['proxy']}@images.example/rescue"
""")
    return d / "inv.yaml"


@pytest.mark.parametrize("fmt", [[], ["-o", "json"], ["-o", "yaml"], ["-v", "--log-format", "json"]])
def test_plaintext_secrets_let_in_are_masked_in_every_output(fmt, workdir, no_cloud_env):
    inv = _plaintext_inventory(workdir())
    run = run_cli([*fmt, "baremetal", "validate", inv, "--allow-plaintext-secrets"], env=no_cloud_env)
    check(run, codes=(0,), json_out="json" in fmt and "-o" in fmt, secrets={v: v for v in PLAIN.values()})
    if fmt == ["-o", "json"]:
        info = json.loads(run.out)["nodes"][0]["driver_info"]
        assert info["deploy_kernel"] == "http://***@images.example/k"
        assert info["deploy_ramdisk"] == "https://images.example/r?X-Goog-Signature=***&X-Goog-Credential=***"
        assert info["snmp_community"] == "***" and info["rescue_kernel"] == "***@images.example/rescue"
    # without the flag the plaintext password is refused, and the refusal echoes nothing either
    run = run_cli([*fmt, "baremetal", "validate", inv], env=no_cloud_env)
    check(run, codes=(2,), json_out="json" in fmt and "-o" in fmt, secrets={v: v for v in PLAIN.values()})


# --- a template's proxy URL ----------------------------------------------------------------------------

@pytest.mark.parametrize("proxy", [f"http://puser:pa/{MARKER}@proxy.example:3128",
                                   f"http://puser:{MARKER}#x@proxy.example:3128",
                                   f"http://proxy.example:3128/#access_token={MARKER}",
                                   f"http://proxy.example:3128/?X-Goog-Credential={MARKER}",
                                   f"puser:{MARKER}@proxy.example:3128"])
@pytest.mark.parametrize("field", ["http_proxy", "https_proxy"])
def test_a_template_proxy_url_with_credentials_is_refused_without_echoing_them(proxy, field, workdir, no_cloud_env):
    d = workdir()
    (d / "templates").mkdir()
    text = (REPO / "manifests/templates/k8s-1.36-vm.yaml").read_text()
    (d / "templates" / "t.yaml").write_text(text.replace("magnum:\n", f"magnum:\n  {field}: \"{proxy}\"\n", 1))
    for fmt in ([], ["-o", "json"]):
        run = run_cli([*fmt, "template", "check", "--templates", d / "templates"], env=no_cloud_env)
        check(run, codes=(2,), json_out=bool(fmt), secrets={MARKER: MARKER})
        assert f"magnum.{field}" in run.err


@pytest.mark.parametrize("fmt", [[], ["-o", "json"], ["-o", "yaml"]])
def test_a_proxy_url_in_a_label_is_masked_in_the_rendered_template(fmt, workdir, no_cloud_env, monkeypatch):
    """Labels are free text, so one may carry a proxy URL with credentials; ``template render`` prints
    the body and the ``openstack coe`` command masked in every format (the cloud is stubbed out)."""
    from nodeforge.commands import template as template_cmd

    d = workdir()
    (d / "templates").mkdir()
    text = (REPO / "manifests/templates/k8s-1.36-vm.yaml").read_text()
    (d / "templates" / "t.yaml").write_text(text.replace(
        "labels:\n", f"labels:\n  proxy_url: \"http://lbl:pa/{MARKER}@proxy.example:3128\"\n"
                     f"  image_src: \"https://s3.example/i?X-Amz-Signature={MARKER}\"\n", 1))
    monkeypatch.setattr(template_cmd, "_state", lambda app, cloud: None)
    monkeypatch.setattr(template_cmd.tpl, "resolve", lambda t, state: t)

    def render(t):
        labels = dict(t.labels)
        assert MARKER in labels["proxy_url"]          # read as written
        return {"driver": "k8s_cluster_api_debian", "driver_package": "magnum-cluster-api",
                "cluster_type": {"server_type": "vm", "os_distro": "debian", "coe": "kubernetes"},
                "cluster_template": {"name": t.name, "labels": labels},
                "commands": ["openstack coe cluster template create " + t.name + "".join(
                    f" --labels {k}={v}" for k, v in labels.items())]}

    monkeypatch.setattr(template_cmd.tpl, "render", render)
    run = run_cli([*fmt, "template", "render", "--templates", d / "templates", "k8s-1.36-vm"], env=no_cloud_env)
    check(run, codes=(0,), json_out=fmt == ["-o", "json"], secrets={MARKER: MARKER})
    assert "http://***@proxy.example:3128" in run.out and "X-Amz-Signature=***" in run.out


def test_the_archive_download_turns_an_invalid_url_into_its_error():
    """urllib's InvalidURL quotes the URL it could not use (here from the host's apt sources,
    which are not checked as the variables are): an ArchiveError with the URL redacted."""
    from nodeforge.oslock import archive

    with pytest.raises(archive.ArchiveError) as info:
        archive.http_get(f"http://user:pa/{MARKER}@127.0.0.1:9/debian/dists/x/InRelease", what="InRelease")
    assert MARKER not in str(info.value) + str(info.value.hint)
    assert "http://***@127.0.0.1:9/debian/dists/x/InRelease" in str(info.value)
