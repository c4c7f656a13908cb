"""The Magnum cluster drivers nodeforge knows, and what each serves.

Magnum 23 ships no in-tree driver; the maintained drivers are external
packages registered under the ``magnum.drivers`` entry-point group, and a
cluster template's ``driver`` field is an **entry-point name**. Each
driver's ``provides`` lists the (server_type, os, coe) tuples it builds; at
cluster create Magnum refuses a template whose tuple no loaded driver serves
("Cluster type (bm, debian, kubernetes) is not supported by any loaded
cluster driver"). None serves ``server_type: bm``: bare-metal workers are
reached by giving a ``vm`` template a bare-metal Nova flavor.

* magnum-cluster-api 0.38.2 registers one entry point per OS
  (``k8s_cluster_api_ubuntu``, ``_ubuntu_focal``, ``_debian``, ``_flatcar``,
  ``_rockylinux``), each serving ``vm`` x that OS. It reads the Kubernetes
  version from the ``kube_tag`` label, ``v`` + a full semantic version
  (``v1.36.1``: ``semver.VersionInfo.parse(kube_tag[1:])``), and supports
  the network drivers ``calico`` and ``cilium`` only.
* magnum-capi-helm 1.4.0 registers ``k8s_capi_helm_v1``: ``vm`` x {ubuntu,
  flatcar}. It takes the Kubernetes version from the **image's**
  ``kube_version`` property, not from a label.

Both replace a cluster's nodes when ``openstack coe cluster upgrade`` moves it to
a template with another image, even at the same ``kube_tag`` (an image refresh):
magnum-cluster-api's ``upgrade_cluster`` sets every node group's ``image_id``
to the new template's and re-applies the cluster (the ``imageUUID`` variable of
its ClusterClass changes, so Cluster API rolls the control plane and the
machine deployments); magnum-capi-helm's moves the cluster to the template and
upgrades its Helm release, whose ``machineImageId`` is the template's image.
A driver not in the table (the Heat drivers of older Magnums among them) is
not known to replace nodes on a template change: an image refresh of its
clusters is a manual step.

With several drivers installed, a template that names none gets
``[drivers] default_driver`` or the alphabetically first entry point: so
nodeforge always names its ``driver``.

``labels`` are the label names each driver reads (from its source); a
template label outside them would be ignored by the driver, so nodeforge
refuses it. The table is checked against the drivers installed in the local
cloud's Magnum by ``tests/magnum/test_drivers_devcloud.py``, so a driver
upgrade that changes what it provides fails that test rather than a user's
cluster.
"""

from __future__ import annotations

import dataclasses
import re


@dataclasses.dataclass(frozen=True)
class Provides:
    server_type: str
    os_distro: str
    coe: str = "kubernetes"


@dataclasses.dataclass(frozen=True)
class Driver:
    name: str                       # the entry-point name, Magnum's template field ``driver``
    package: str                    # the PyPI distribution that ships it
    provides: tuple[Provides, ...]
    labels: frozenset[str] = frozenset()          # label names the driver reads
    kube_tag: str = "label"         # "label": kube_tag sets the version; "image": the image's kube_version does
    network_drivers: tuple[str, ...] | None = None   # None: not checked by the driver
    # ``cluster upgrade`` to a template with another image (same kube_tag) replaces the nodes
    # one by one: the driver writes the new image into the Cluster API machine templates,
    # which Cluster API rolls. False: an image refresh is a manual step.
    rolling_image: bool = False

    def serves(self, server_type: str, os_distro: str, coe: str = "kubernetes") -> bool:
        return Provides(server_type, os_distro, coe) in self.provides

    def kube_tag_for(self, version: str) -> str:
        """The ``kube_tag`` label value this driver expects for a Kubernetes version."""
        return "v" + str(version).lstrip("v")

    def kube_tag_problem(self, value: str) -> str | None:
        if self.kube_tag == "label" and not _SEMVER_TAG.match(str(value)):
            return (f"kube_tag '{value}': {self.name} expects 'v' and a full version (e.g. v1.36.1): it parses "
                    "kube_tag[1:] as a semantic version")
        return None

    def to_dict(self) -> dict:
        return {"name": self.name, "package": self.package,
                "provides": [dataclasses.asdict(p) for p in self.provides], "kube_tag": self.kube_tag,
                "network_drivers": list(self.network_drivers) if self.network_drivers else None}


_SEMVER_TAG = re.compile(r"^v\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?$")

# Read from magnum_cluster_api 0.38.2 (resources.py, utils.py, integrations/): every label it reads.
CLUSTER_API_LABELS = frozenset({
    "admission_control_list", "api_server_cert_sans", "api_server_floating_ip", "api_server_tls_cipher_suites",
    "audit_log_enabled", "audit_log_max_age", "audit_log_max_backup", "audit_log_max_size",
    "auto_healing_enabled", "auto_scaling_enabled", "availability_zone", "boot_volume_availability_zone",
    "boot_volume_size", "boot_volume_type", "calico_ipv4pool", "calico_tag", "cilium_ipv4pool",
    "cinder_csi_enabled", "container_infra_prefix", "control_plane_availability_zones",
    "different_failure_domain", "dns_cluster_domain", "docker_volume_type", "etcd_volume_size",
    "etcd_volume_type", "fixed_subnet_cidr", "keystone_auth_enabled", "kube_tag", "kubelet_tls_cipher_suites",
    "manila_csi_enabled", "manila_csi_share_network_id", "master_lb_floating_ip_enabled", "max_node_count",
    "octavia_lb_algorithm", "octavia_lb_healthcheck", "octavia_provider", "oidc_client_id",
    "oidc_groups_claim", "oidc_groups_prefix", "oidc_issuer_url", "oidc_username_claim",
    "oidc_username_prefix", "server_group_policies", "service_cluster_ip_range"})

# magnum_capi_helm 1.4.0: the registered cluster labels (conf.py, capi_helm_cluster_labels) it reads.
CAPI_HELM_LABELS = frozenset({
    "api_master_lb_allowed_cidrs", "auto_healing_enabled", "auto_scaling_enabled", "boot_volume_size",
    "boot_volume_type", "capi_helm_chart_version", "csi_cinder_allow_volume_expansion",
    "csi_cinder_availability_zone", "csi_cinder_fstype", "csi_cinder_reclaim_policy",
    "csi_cinder_volume_binding_mode", "etcd_blockdevice_size", "etcd_blockdevice_type",
    "etcd_blockdevice_volume_az", "etcd_blockdevice_volume_type", "etcd_volume_size", "etcd_volume_type",
    "extra_network_names", "fixed_subnet_cidr", "keystone_auth_enabled", "kube_dashboard_enabled",
    "master_lb_floating_ip_enabled", "max_node_count", "min_node_count", "monitoring_enabled",
    "octavia_lb_algorithm", "octavia_lb_healthcheck", "octavia_provider"})

CLUSTER_API_PACKAGE = "magnum-cluster-api"
CAPI_HELM_PACKAGE = "magnum-capi-helm"


def _capi(suffix: str, os_distro: str) -> Driver:
    return Driver(f"k8s_cluster_api_{suffix}", CLUSTER_API_PACKAGE, (Provides("vm", os_distro),),
                  CLUSTER_API_LABELS, "label", ("calico", "cilium"), rolling_image=True)


DRIVERS: dict[str, Driver] = {d.name: d for d in (
    _capi("ubuntu", "ubuntu"),
    _capi("ubuntu_focal", "ubuntu-focal"),
    _capi("debian", "debian"),
    _capi("flatcar", "flatcar"),
    _capi("rockylinux", "rockylinux"),
    Driver("k8s_capi_helm_v1", CAPI_HELM_PACKAGE, (Provides("vm", "ubuntu"), Provides("vm", "flatcar")),
           CAPI_HELM_LABELS, "image", None, rolling_image=True),
)}
PACKAGES = (CLUSTER_API_PACKAGE, CAPI_HELM_PACKAGE)


def get(name: str) -> Driver | None:
    return DRIVERS.get(name)


def serving(server_type: str, os_distro: str | None, coe: str = "kubernetes",
            package: str | None = None) -> list[Driver]:
    """Every known driver that serves the tuple (of ``package``, if given; empty when none does)."""
    return [d for d in DRIVERS.values() if os_distro and d.serves(server_type, os_distro, coe)
            and (package is None or d.package == package)]


def describe(server_type: str, os_distro: str | None, coe: str = "kubernetes") -> str:
    return f"({server_type}, {os_distro or '?'}, {coe})"
