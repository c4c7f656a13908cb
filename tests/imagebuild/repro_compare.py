"""Comparing two real builds of the same inputs (tests of reproducible content).

:func:`report` prints what differs between two build directories: the
per-file manifests (``files.jsonl``), each disk image's bytes and 4 KiB
blocks, and for a raw disk which files and metadata the differing blocks of
the root filesystem hold (``debugfs icheck``/``ncheck``). :func:`assert_same_content`
asserts what reproducible content promises of two builds from the same lockfile and OS
package lock: the same per-file manifest and SBOM, the same epoch and
inputs, and an ``image diff`` that finds only the build identity.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from nodeforge.imagebuild import contents
from nodeforge.publish import diff as imgdiff
from tests.imagebuild.image_files import root_fs as _root_fs


def _gpt(raw: Path) -> list[tuple[str, int, int]]:
    """[(region, start byte, end byte)] of a raw disk: the GPT areas and the three partitions."""
    out = subprocess.run(["sgdisk", "-p", str(raw)], capture_output=True, text=True, check=True).stdout
    names = {1: "bios-boot", 2: "esp", 3: "root"}
    regions = [("mbr+gpt", 0, 1 << 20)]
    for line in out.splitlines():
        m = re.match(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s", line)
        if m and int(m[1]) in names:
            regions.append((names[int(m[1])], int(m[2]) * 512, (int(m[3]) + 1) * 512))
    size = raw.stat().st_size
    regions.append(("backup-gpt", size - (1 << 20), size))
    return regions


def _why(raw_a: Path, raw_b: Path, tmp: Path) -> dict:
    """Which files and metadata the differing blocks of two raw disks' root filesystems hold."""
    regions = _gpt(raw_a)
    cmp = imgdiff.compare_bytes(raw_a, raw_b, regions=regions, keep=100000)
    root = next(r for r in regions if r[0] == "root")
    fs_blocks = sorted({(blk * cmp["block"] - root[1]) // 4096 for blk in cmp["first_blocks"]
                        if root[1] <= blk * cmp["block"] < root[2]})
    owners: dict[str, int] = {}
    if fs_blocks:
        part = _root_fs(raw_a, tmp)
        icheck = subprocess.run(["debugfs", "-R", "icheck " + " ".join(map(str, fs_blocks[:2000])), str(part)],
                                capture_output=True, text=True).stdout
        inodes: dict[str, int] = {}
        for line in icheck.splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 2:
                key = parts[1] if parts[1].isdigit() else "metadata (no inode: superblock, group descriptors, "\
                                                          "bitmaps, inode tables, journal)"
                inodes[key] = inodes.get(key, 0) + 1
        numbered = [i for i in inodes if i.isdigit()]
        names = {}
        if numbered:
            ncheck = subprocess.run(["debugfs", "-R", "ncheck " + " ".join(numbered), str(part)],
                                    capture_output=True, text=True).stdout
            for line in ncheck.splitlines()[1:]:
                parts = line.split(None, 1)
                if len(parts) == 2:
                    names[parts[0]] = parts[1].strip()
        for key, count in inodes.items():
            owners[names.get(key, f"inode {key}") if key.isdigit() else key] = count
        part.unlink()
    return {"regions": cmp["regions"], "root_fs_blocks": len(fs_blocks), "owners": owners,
            "differing_bytes": cmp["differing_bytes"], "differing_blocks": cmp["differing_blocks"]}


def report(name: str, a: Path, b: Path, tmp: Path) -> dict:
    files = contents.diff(contents.load(a / contents.FILENAME), contents.load(b / contents.FILENAME))
    print(f"\n== {name}: per-file manifests: {len(files.added)} added, {len(files.removed)} removed, "
          f"{len(files.changed)} changed")
    for path in files.added[:50]:
        print(f"  + {path}")
    for path in files.removed[:50]:
        print(f"  - {path}")
    for item in files.changed[:50]:
        print(f"  ~ {item['path']}: {', '.join(item['fields'])}")
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    out = {"files": files.to_dict(limit=50), "images": {}}
    for variant, image in ma["images"].items():
        cmp = imgdiff.compare_bytes(a / image, b / mb["images"][variant])
        out["images"][variant] = cmp
        print(f"== {name}: {image}: {cmp['differing_bytes']} bytes differ in {cmp['differing_blocks']} of "
              f"{cmp['blocks']} 4 KiB blocks (sizes {cmp['size_a']} / {cmp['size_b']}); "
              f"first differing blocks: {cmp['first_blocks'][:12]}")
        if image.endswith(".raw") and not cmp["identical"]:
            why = _why(a / image, b / mb["images"][variant], tmp)
            out["why"] = why
            print(f"== {name}: {image}: differing 4 KiB blocks per region: {why['regions']}")
            for owner, count in sorted(why["owners"].items(), key=lambda kv: -kv[1])[:40]:
                print(f"     {count:6d} block(s): {owner}")
    for d in (a, b):
        line = next((x for x in (d / "build.log").read_text().splitlines() if "per-file manifest:" in x), "")
        print(f"== {d.name}: {line.partition('per-file manifest: ')[2]}")
    return out


def assert_same_content(a: Path, b: Path, result: dict) -> None:
    """``result`` is :func:`report`'s for ``a`` and ``b``."""
    for d in (a, b):
        log = (d / "build.log").read_text()
        assert "per-file manifest:" in log and "SOURCE_DATE_EPOCH" in log
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    assert ma["reproducible"]["source_date_epoch"] == mb["reproducible"]["source_date_epoch"]
    assert ma["reproducible"]["inputs_sha256"] == mb["reproducible"]["inputs_sha256"]
    assert result["files"]["identical"], f"the per-file manifests differ: {json.dumps(result['files'])[:3000]}"
    assert ma["files"]["sha256"] == mb["files"]["sha256"]
    assert (a / "sbom.cdx.json").read_bytes() == (b / "sbom.cdx.json").read_bytes()
    # image diff: the same content; only the build identity differs.
    d = imgdiff.diff_builds(a, b)
    assert d.packages.identical and d.files is not None and d.files.identical
    assert not d.content_differs, d.to_dict()
    assert d.identity_changed["build_id"][0] != d.identity_changed["build_id"][1]
