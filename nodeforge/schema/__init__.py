"""The declared-schema layer: every file a person writes is read by one safe
loader and validated against one declaration, with problems in one shape.

A base package: it imports no feature package (imagebuild, ironic, compute,
magnum, devcloud, commands); they import it. API (stable; import from
``nodeforge.schema``):

Loading (:mod:`nodeforge.schema.loader`)
    ``load(path, text=None, *, format=None, limits=DEFAULT_LIMITS) -> Document``
        YAML (ruamel round-trip, positions kept), JSON or CSV (``format``
        "yaml"/"json"/"csv", default from the suffix). Limits enforced before
        or while parsing: ``Limits(max_bytes=4 MiB, max_depth=64,
        max_nodes=200_000 (values added by expanding aliases),
        max_aliases=1000, max_values=80_000 (values as written, counted by
        libyaml before the slow round-trip parse))``; non-UTF-8 or binary text, complex keys
        (``? [a]``), YAML tags (``!!binary``, ``!name``) and unconstructible
        scalars refused; JSON: duplicate keys and NaN/Infinity refused; CSV:
        empty, duplicate headers, rows longer than the header refused. A
        refusal is a ``ConfigError`` (exit 2) naming ``file:line``.
    ``Document``: ``.path``, ``.format``, ``.doc`` (round-trip tree, for
        edits), ``.data`` (plain dict/list/str/int/float/bool/None, what is
        validated), ``.line(keypath) -> int | None`` (a missing key: its
        nearest ancestor's line), ``.problem(keypath, detail) -> Problem``,
        ``.source_text(keypath, key=False)`` (a scalar, or with ``key`` the
        last key, as written: ``1.30``).
        CSV: ``.data`` is a list of row dicts; ``.line((i,))`` is row i's line.
    ``plain(tree)`` (round-trip tree -> plain data), ``check_tree``,
    ``read_text(path, limits)``, ``read_bytes``, ``decode(path, data)``,
    ``dumps(tree)`` (written atomically by :func:`nodeforge.base.fs.atomic_write`), ``line_of(node, key)``,
    ``tree_line(tree, keypath)``, ``MAX_DEPTH``.

Problems (:mod:`nodeforge.schema.problems`)
    ``Problem(file, line, keypath, detail)``: ``str()`` is
        ``file:line: key.path: detail``; ``.key`` the dotted path
        (``nodes[3].driver_info.ipmi_port``); ``.to_dict()``.
    ``SchemaError(file, problems, hint=None)`` (a ``ConfigError``, exit 2):
        ``str()`` is one problem per line; ``.problems``; ``.details`` /
        ``.to_dict()`` give ``{"file", "problems": [...]}`` (the CLI puts
        ``details`` in the ``--output json`` error document).
    ``keypath_str(keypath)``.

Declarations (:mod:`nodeforge.schema.declare`, pydantic v2)
    ``Declared``: base model, ``extra="forbid"`` (the unknown key named, with
        the allowed ones), ``strict=True`` (no coercion: an unquoted ``1.30``
        or ``yes`` or a port written as a string is an error that says what
        to write), frozen.
    ``validate(document, Model, *, context=None, hint=None, checks=None)
        -> instance``: every pydantic error as a Problem with its line, all
        in one SchemaError; ``checks(document, instance)`` yields Problems
        for rules across entries (uniqueness, a value against its key), run
        once the declaration holds. ``context`` reaches validators
        (``ValidationInfo.context``). A bad value of a secret field is never
        echoed. ``problems_of(ValidationError, document, Model)`` for callers
        that merge their own problems; ``kind_of(value)`` describes a value
        as errors do ("the number 1.3"). ``validate_data(label, data, Model)`` for data that is
        not a file (environment). ``load_file(path, Model, text=None) ->
        (document, instance)`` (limits of the registered kind).
    A field is a secret when its type carries ``SECRET`` (``Annotated[str,
        SECRET]``; ``vocab.SecretRef`` does) or is declared with
        ``secret_field(...)``; ``is_secret(field_info)``,
        ``secret_fields(Model)`` (key paths, ``*`` for any key/index).
    ``Rule(text)``: a constraint in words in ``Annotated`` metadata (docs).
    Registry: ``register(name, Model, *, title, path="", description="",
        formats=("yaml",), limits=DEFAULT_LIMITS) -> FileKind``;
        ``kinds()``, ``kind(name)``. ``python -m nodeforge.schema.docs``
        writes every registered kind to ``docs/schemas.md`` (the modules it
        imports to find them: ``docs.DOCUMENTED_MODULES``).

Vocabulary (:mod:`nodeforge.schema.vocab`): ``Name``, ``Slug``/``ScopeName``,
``DisplayName``, ``ResourceClass``, ``PlacementResourceClass``
(+ ``placement_resource_class()``), ``Trait``, ``CustomTrait``,
``MacAddress`` (normalised aa:bb:..), ``IPAddress``, ``Hostname``, ``Host``,
``Port`` (1-65535), ``HttpUrl``, ``BaseUrl`` (credentials refused, never
echoed), ``SemVer``, ``ReleaseVersion``, ``VersionTag``, ``KubeMinor``, ``DottedVersion``,
``Sha256``, ``Sha512``, ``FiniteFloat``, ``bounded(low, high, integer=)``,
``PositiveInt``, ``NonNegativeInt``, ``SecretRef`` (env:/file:/fernet:, a
secret), ``DateString``, ``text(max_length)``; each also as a ``check_*``
function raising ``ValueError``.
"""

from nodeforge.schema.declare import (SECRET, Declared, FileKind, Rule, is_secret, kind, kind_of, kind_word,
                                      kinds, load_file, problems_of, register, secret_field, secret_fields, validate,
                                      validate_data)
from nodeforge.schema.loader import (DEFAULT_LIMITS, MAX_DEPTH, Document, Limits, check_tree, collector_paused,
                                     decode, dumps, line_of, load, parse_json, plain, read_bytes, read_json,
                                     read_text, tree_line)
from nodeforge.schema.problems import Problem, SchemaError, keypath_str

__all__ = ["SECRET", "Declared", "FileKind", "Rule", "is_secret", "kind", "kind_of", "kind_word", "kinds", "load_file",
           "problems_of", "register", "secret_field", "secret_fields", "validate", "validate_data",
           "DEFAULT_LIMITS", "MAX_DEPTH", "Document", "Limits", "check_tree", "collector_paused", "decode", "dumps",
           "line_of", "load", "parse_json", "plain", "read_bytes", "read_json", "read_text", "tree_line", "Problem",
           "SchemaError", "keypath_str"]
