"""The base layer: what every feature package uses, one implementation each.

It imports nothing above it (only :mod:`nodeforge.errors`,
:mod:`nodeforge.redact` and the standard library / third-party packages);
``tests/test_import_graph.py`` enforces it, and fails on a second
implementation of any of these elsewhere in ``nodeforge/``.

* :mod:`nodeforge.base.runner`: running a host tool (argv, scrubbed logging,
  timeout, one error class :class:`~nodeforge.base.runner.CommandError` with
  tool, exit status and output tail, ``sudo`` when not root, output to a log
  file) and finding one (:func:`~nodeforge.base.runner.require` names the
  Debian package to install);
* :mod:`nodeforge.base.fs`: atomic writes and renames into place, an advisory lock;
* :mod:`nodeforge.base.sums`: SHA256SUMS / SHA512SUMS read and write;
* :mod:`nodeforge.base.qemuimg`: ``qemu-img`` info, convert, overlay;
* :mod:`nodeforge.base.ipmitool`: ``ipmitool -I lanplus`` with the password in the environment;
* :mod:`nodeforge.base.secrets`: secret references (``env:``, ``file:``, ``fernet:``).

YAML and JSON input files are read through :mod:`nodeforge.schema.loader`,
redaction is :mod:`nodeforge.redact`, errors :mod:`nodeforge.errors`, the
OpenStack HTTP transport :mod:`nodeforge.transport`: the rest of the base layer.
"""
