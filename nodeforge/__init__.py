"""nodeforge: Kubernetes node images and bare-metal pools for OpenStack."""

__version__ = "0.1.0"
