"""docs/schemas.md is generated from the declarations and cannot drift from them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from nodeforge.schema import SECRET, Declared, FileKind, Limits, vocab
from nodeforge.schema import docs

REPO = Path(__file__).resolve().parents[2]
REGENERATE = ".venv/bin/python -m nodeforge.schema.docs > docs/schemas.md"


def test_committed_schema_docs_equal_what_the_declarations_generate():
    committed = (REPO / "docs" / "schemas.md").read_text(encoding="utf-8")
    generated = docs.generate()
    assert committed == generated, f"docs/schemas.md differs from the declarations; regenerate it: {REGENERATE}"


def test_every_registered_nodeforge_kind_is_documented_with_every_field():
    text = docs.generate()
    documented = [k for k in docs.kinds() if k.model.__module__.startswith("nodeforge.")]
    assert {"lockfile", "sources", "retention", "manifest"} <= {k.name for k in documented}
    for kind in documented:
        assert f"## {kind.title}\n" in text
        for model in docs._models(kind.model):
            assert f"### {model.__name__}\n" in text
            for name, field in model.model_fields.items():
                assert f"| `{field.alias or name}` |" in text


class _Bmc(Declared):
    """A BMC."""

    address: vocab.Host
    port: vocab.Port = 623
    password: vocab.SecretRef
    kg_key: Annotated[str | None, SECRET] = None


class _File(Declared):
    """A test file."""

    name: vocab.Name
    bmcs: dict[vocab.Slug, _Bmc] = {}


def test_a_kind_renders_type_required_default_constraint_and_secret():
    text = docs.render([FileKind("test", _File, "Test file", "x.yaml", "What it is.", ("yaml",),
                                 Limits(max_bytes=1 << 20))])
    assert "Kind `test`; usually `x.yaml`; format yaml; at most 1 MiB." in text
    assert "| `name` | string | yes |  | 1-255 characters of A-Z a-z 0-9 . _ ~ - |  |" in text
    assert "| `bmcs` | mapping of string to [_Bmc](#_bmc) | no | `{}` | keys: 1-63 characters" in text
    assert "| `port` | integer | no | `623` | a port number 1-65535 |  |" in text
    assert "| `password` | string | yes |  | a reference to a secret: env:VAR" in text
    assert text.count("| **secret** |") == 2
    assert "Other keys: refused (named in the error)." in text
