"""Per-node enrollment report: table rows, JSON and JUnit XML, plus the exit code.

Every row names the node, the action taken on it, the stage it reached, its
final state, the last error (scrubbed) and a hint (:data:`HINTS`, keyed by
the bare-metal :class:`~nodeforge.ironic.errorkind.ErrorKind`). Exit code
(:func:`nodeforge.plan.exit_code`): 0 all good, :attr:`ExitCode.PARTIAL`
when some nodes failed, 1 when none succeeded.
"""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path

from nodeforge import plan as P
from nodeforge.errors import ExitCode
from nodeforge.ironic.errorkind import ErrorKind as K
from nodeforge.redact import scrub, scrub_obj

HINTS: dict[K, str] = {
    K.POWER_CREDENTIALS: "Ironic could not talk to the BMC: check the address and the credential reference; "
                         "run 'nodeforge baremetal preflight FILE'",
    K.CONFLICT: "the MAC or BMC is already enrolled under another node: remove the duplicate from the "
                "inventory or delete the stale Ironic node",
    K.DUPLICATE: "the name or MAC already exists in Ironic",
    K.SCOPE: "another inventory (another ownership scope) enrolled this node: enroll it from that inventory, or "
             "give this inventory the same 'scope:' (an inventory without one gets a scope derived from its path)",
    K.CLEAN_FAILED: "parked in maintenance (see maintenance_reason); fix the cause, unset maintenance, re-run",
    K.INSPECT_FAILED: "parked in maintenance (see maintenance_reason); fix the cause, unset maintenance, re-run",
    K.MANAGE_TIMEOUT: "the BMC did not answer in time; run 'nodeforge baremetal preflight FILE'",
    K.CLEAN_TIMEOUT: "cleaning did not finish: without a ramdisk use cleaning 'none' or manual with "
                     "disable_ramdisk (docs/inventory.md)",
    K.PROVIDE_TIMEOUT: "automated cleaning did not finish: without a ramdisk use cleaning 'none' "
                       "(docs/inventory.md)",
    K.TIMEOUT: "re-run: nodeforge resumes where each node stands",
}


@dataclasses.dataclass
class NodeReport:
    name: str
    uuid: str | None
    action: str
    stage: str
    state: str | None
    ok: bool
    error_type: str | None = None   # an ErrorKind's value
    error: str | None = None
    seconds: float | None = None
    # The node's newest events from Ironic's history (created_at, severity, event_type, event), oldest
    # first; None: not read (no node, nothing Ironic would have recorded: batch.history_worth_reading,
    # or the history could not be read).
    history: list[dict] | None = None

    def __post_init__(self):
        if self.error_type is not None:
            self.error_type = str(self.error_type)   # an ErrorKind: its value (JSON, YAML, JUnit)

    @property
    def hint(self) -> str | None:
        return HINTS.get(self.error_type or "") if not self.ok else None

    def result(self) -> P.Result:
        """This row as the shared :class:`nodeforge.plan.Result`."""
        kind = P.Kind(self.action) if self.action in P.Kind._value2member_map_ else P.Kind.NOOP
        return P.Result(self.name, kind, P.Status.DONE if self.ok else P.Status.FAILED, self.error,
                        self.error_type)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["error_type"] = str(self.error_type) if self.error_type is not None else None
        d["error"] = scrub(self.error) if self.error else None
        if self.history is not None:
            d["history"] = scrub_obj(self.history, free_text=True)
        d["hint"] = self.hint
        return d


@dataclasses.dataclass
class Report:
    command: str
    nodes: list[NodeReport]
    seconds: float = 0.0
    writes: int = 0
    retried: dict[str, int] = dataclasses.field(default_factory=dict)  # 409/503 answers retried
    pacing: dict | None = None      # the pacer's figures (pacing.Stats): calls, congestion, limits reached

    @property
    def failed(self) -> list[NodeReport]:
        return [n for n in self.nodes if not n.ok]

    def exit_code(self) -> ExitCode:
        return P.exit_code(n.result() for n in self.nodes)

    def to_dict(self) -> dict:
        return scrub_obj({"command": self.command, "ok": len(self.nodes) - len(self.failed),
                          "failed": len(self.failed), "seconds": round(self.seconds, 2), "writes": self.writes,
                          "retried": dict(self.retried), **({"pacing": self.pacing} if self.pacing else {}),
                          "exit_code": int(self.exit_code()), "nodes": [n.to_dict() for n in self.nodes]})

    def rows(self) -> list[dict]:
        return [{k: v for k, v in n.to_dict().items() if k in COLUMNS} for n in self.nodes]

    def junit(self) -> str:
        suite = ET.Element("testsuite", name=f"nodeforge-{self.command}", tests=str(len(self.nodes)),
                           failures=str(len(self.failed)), time=f"{self.seconds:.2f}")
        for n in self.nodes:
            case = ET.SubElement(suite, "testcase", classname=f"nodeforge.{self.command}", name=n.name,
                                 time=f"{n.seconds or 0:.2f}")
            if not n.ok:
                fail = ET.SubElement(case, "failure", type=str(n.error_type or "error"),
                                     message=scrub(n.error or "failed"))
                fail.text = scrub(f"stage: {n.stage}\nstate: {n.state}\nhint: {n.hint or ''}")
        return ET.tostring(suite, encoding="unicode", xml_declaration=True)

    def write(self, path: Path) -> None:
        import json

        path = Path(path)
        text = self.junit() if path.suffix == ".xml" else json.dumps(self.to_dict(), indent=2)
        path.write_text(text + "\n")


COLUMNS = ["name", "action", "stage", "state", "ok", "error_type", "error", "hint"]
