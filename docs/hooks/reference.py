"""mkdocs hook: the reference pages, generated from the code at every build so they cannot drift.

- reference/config.md: the settings models (`RunConfig`, `MatrixConfig`, and every `*Settings`
  and `*Options` model `bias_discovery.api` exports), field by field: key, type, default,
  bounds and the field's docstring. A field without a docstring is a warning, which fails
  `mkdocs build --strict`.
- reference/cli.md: every command and option of the typer app, as `--help` shows them.
- reference/api.md: the Python API through mkdocstrings (`::: bias_discovery.api.NAME`), and
  the columns of each result's table from its row model.
- reference/run-directory.md: every file of a run directory with its schema, from
  `bias_discovery.run.layout`, which walks the run record's own artifacts.
- reference/exit-codes.md: every exit code of the command line, from
  `bias_discovery.cli._exit_codes.EXIT_CODES`.

The pages exist only in the build (`File.generated`): nothing generated is committed. The
package is imported from this checkout (the directory of mkdocs.yml), not from wherever it is
installed.
"""

from __future__ import annotations

import ast
import inspect
import logging
import re
import sys
import textwrap
import types
import typing
from collections import abc
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Union

import annotated_types
from mkdocs.structure.files import File, Files
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

log = logging.getLogger("mkdocs.hooks.reference")

GENERATED_NOTE = (
    '!!! note "Generated"\n    This page is generated at every build of the site (`docs/hooks/reference.py`){source}. '
    "To change what it says, change the code's docstrings.\n"
)


def on_config(config: Any) -> Any:
    """Import `bias_discovery` from this checkout, whatever is installed."""
    root = str(Path(config.config_file_path).resolve().parent)
    if sys.path[0] != root:
        sys.path.insert(0, root)
    for name in [m for m in sys.modules if m == "bias_discovery" or m.startswith("bias_discovery.")]:
        if not (getattr(sys.modules[name], "__file__", None) or "").startswith(root):
            del sys.modules[name]  # an installed copy imported earlier in this process
    return config


def on_files(files: Files, config: Any) -> Files:
    """Add the generated reference pages to the site."""
    for uri, make in (
        ("reference/config.md", config_page),
        ("reference/cli.md", cli_page),
        ("reference/api.md", api_page),
        ("reference/run-directory.md", run_directory_page),
        ("reference/exit-codes.md", exit_codes_page),
    ):
        existing = files.get_file_from_path(uri)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, uri, content=make()))
    return files


# --- pydantic models as text ------------------------------------------------------------------


def field_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """The docstring written under each field (`x: int = 1` then `\"\"\"...\"\"\"`), inherited too."""
    found: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if not (isinstance(klass, type) and issubclass(klass, BaseModel)) or klass is BaseModel:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
        for statement, following in zip(body, [*body[1:], None]):
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                found[statement.target.id] = inspect.cleandoc(following.value.value)
    return found


def one_paragraph(text: str) -> str:
    """A docstring as one markdown paragraph (its line breaks are wrapping, not structure)."""
    return " ".join(text.split())


def first_sentence(text: str | None) -> str:
    paragraph = (inspect.cleandoc(text or "").split("\n\n") or [""])[0]
    return one_paragraph(paragraph)


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (`X`, `X | None`, `list[X]`, `dict[str, X]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in models_in(arg)]


def type_text(annotation: Any, link: Callable[[type[BaseModel]], str]) -> str:
    """A field's type as a reader wants it: `int`, `"a" | "b"`, `list of float`, `X | null`."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_text(args[0], link)
    if annotation is type(None):
        return "null"
    if origin is Literal:
        return " \\| ".join(f"`{yaml_value(value)}`" for value in args)
    if origin in (Union, types.UnionType):
        parts = [type_text(a, link) for a in args if a is not type(None)]
        return " \\| ".join(parts + (["null"] if type(None) in args else []))
    if origin in (list, tuple, set, frozenset, abc.Sequence):
        inner = [a for a in args if a is not Ellipsis]
        return f"list of {type_text(inner[0], link)}" if inner else "list"
    if origin is dict:
        return f"mapping of {type_text(args[0], link)} to {type_text(args[1], link)}" if args else "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return link(annotation)
    if annotation is Any:
        return "any"
    if annotation is Path:
        return "path"
    if isinstance(annotation, type):
        return f"`{annotation.__name__}`"
    return f"`{annotation}`"


BOUNDS = (
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Le, "le", "≤"),
    (annotated_types.Lt, "lt", "<"),
)
"""A field's bound kinds: the annotated-types class, its attribute, and how the page writes it."""


def bounds_text(info: FieldInfo) -> str:
    """The field's bounds (`≥ 1`, `> 0`, `< 1`, `at least 1 item`), from its annotated metadata."""
    parts = []
    for item in info.metadata:
        parts += [
            f"{symbol} {getattr(item, attribute)}" for kind, attribute, symbol in BOUNDS if isinstance(item, kind)
        ]
        if isinstance(item, annotated_types.MinLen):
            parts.append(f"at least {item.min_length} item{'s' if item.min_length != 1 else ''}")
        elif isinstance(item, annotated_types.MaxLen):
            parts.append(f"at most {item.max_length} items")
    return ", ".join(parts)


def yaml_value(value: Any) -> str:
    """A default as it is written in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def default_text(info: FieldInfo) -> str:
    """A field's default as YAML in backticks, or `required`."""
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    return "required" if value is PydanticUndefined else f"`{yaml_value(value)}`"


def group_default_text(value: BaseModel) -> list[str]:
    """A group's default where it is not its model's own: a model spec (`hf/smollm2`), or
    the settings that differ (`positions: swap`); nothing when it is the model's defaults."""
    if hasattr(value, "spec"):
        return [f"default `{value.spec}`"]
    try:
        plain = type(value)().model_dump()
    except ValueError:  # a model with required fields has no defaults of its own to differ from
        return []

    def differences(mine: dict[str, Any], theirs: dict[str, Any], prefix: str = "") -> list[str]:
        found = []
        for key, v in mine.items():
            if isinstance(v, dict) and isinstance(theirs.get(key), dict):
                found += differences(v, theirs[key], f"{prefix}{key}.")
            elif theirs.get(key) != v:
                found.append(f"`{prefix}{key}: {yaml_value(v)}`")
        return found

    changed = differences(value.model_dump(), plain)
    return [f"default: its settings' defaults, but {', '.join(changed)}"] if changed else []


def anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower()


# --- reference/config.md ------------------------------------------------------------------------


def settings_models() -> list[tuple[str, type[BaseModel], str]]:
    """The documented settings: (title, model, where it is used), the run config first."""
    from bias_discovery import api

    chosen: list[tuple[str, type[BaseModel], str]] = [
        (
            "Run config",
            api.RunConfig,
            "The YAML file of `bias-discovery run CONFIG.yaml` and `check`, and `discover(config)`; "
            "`--set key.sub=value` overrides any key. Examples: `experiments/*.yaml`.",
        ),
        (
            "Matrix config",
            api.MatrixConfig,
            "The YAML file of `bias-discovery matrix CONFIG`, and `matrix(config)`; its flags replace its parts. "
            "Example: `experiments/matrix-cpu.yaml`.",
        ),
    ]
    for name in sorted(api.__all__, key=lambda n: (n.endswith("Options"), n)):  # settings, then options
        value = getattr(api, name)
        if (
            isinstance(value, type)
            and issubclass(value, BaseModel)
            and value not in [m for _, m, _ in chosen]
            and (name.endswith("Settings") or name.endswith("Options"))
        ):
            chosen.append((name, value, f"`bias_discovery.api.{name}`: {first_sentence(value.__doc__)}"))
    return chosen


def model_paths(roots: list[tuple[str, type[BaseModel], str]]) -> dict[type[BaseModel], list[tuple[str, str]]]:
    """Where each settings model is used: (root title, dotted key) for every occurrence."""
    found: dict[type[BaseModel], list[tuple[str, str]]] = {}

    def visit(model: type[BaseModel], title: str, prefix: str, seen: tuple[type[BaseModel], ...]) -> None:
        for name, info in model.model_fields.items():
            key = f"{prefix}{info.alias or name}"
            for inner in models_in(info.annotation):
                found.setdefault(inner, []).append((title, key))
                if inner not in seen:
                    visit(inner, title, key + ".", (*seen, inner))

    for title, model, _ in roots:
        visit(model, title, "", (model,))
    return found


def config_page() -> str:
    """Every settings model, group by group, each field with its type, default, bounds and docstring.

    A group used at one key of the first config that has it shows its keys in full
    (`validate.sequential.looks`); a model used at several keys of one config (`ModelConfig`:
    `target`, `teacher`, `validate.checker`) shows them relative to the group. Each model is
    written once; every other use links to it."""
    roots = settings_models()
    paths = model_paths(roots)
    documented: dict[type[BaseModel], str] = {}  # model -> the anchor of its section
    sections: list[str] = []
    missing: list[str] = []

    def link(model: type[BaseModel]) -> str:
        return f"[{model.__name__}](#{documented[model]})" if model in documented else f"`{model.__name__}`"

    def placement(model: type[BaseModel], root: str) -> tuple[str, str]:
        """(key prefix of its fields, anchor) for a nested model first written under `root`."""
        here = [key for title, key in paths.get(model, []) if title == root]
        namespace = "" if root == roots[0][0] else f"{anchor(next(m for t, m, _ in roots if t == root))}-"
        if len(here) == 1:
            return here[0], namespace + here[0]
        return "", model.__name__.lower()

    def section(model: type[BaseModel], key: str, slug: str, depth: int, title: str, intro: str, root: str) -> None:
        documented[model] = slug
        nested: list[type[BaseModel]] = []
        docs = field_docstrings(model)
        lines = [f"{'#' * depth} {title} {{#{slug}}}", ""]
        if intro:
            lines += [intro, ""]
        for name, info in model.model_fields.items():
            yaml_key = info.alias or name
            full_key = f"{key}.{yaml_key}" if key else yaml_key
            for inner in models_in(info.annotation):
                if inner not in documented:
                    nested.append(inner)
                    documented[inner] = placement(inner, root)[1]  # linked before its section is written
            default = default_text(info)
            facts = [type_text(info.annotation, link)]
            if default == "required":
                facts.append("**required**")
            elif isinstance(info.get_default(call_default_factory=True), BaseModel):
                facts += group_default_text(info.get_default(call_default_factory=True))
            else:
                facts.append(f"default {default}")
            if bounds_text(info):
                facts.append(bounds_text(info))
            doc = docs.get(name) or first_sentence(info.description)
            if not doc and models_in(info.annotation):
                doc = first_sentence(models_in(info.annotation)[0].__doc__)
            if not doc:
                missing.append(f"{model.__module__}.{model.__name__}.{name}")
            lines += [f"**`{full_key}`** · {' · '.join(facts)}", f":   {one_paragraph(doc) or '(undocumented)'}", ""]
        sections.append("\n".join(lines))
        for inner in nested:
            prefix, inner_slug = placement(inner, root)
            used = "; ".join(f"`{k}` ({t.lower()})" for t, k in paths[inner])
            heading = f"`{prefix}`: {inner.__name__}" if prefix else inner.__name__
            intro_text = one_paragraph(inspect.cleandoc(inner.__doc__)) if inner.__doc__ else ""
            where = f"Used at {used}." if len(paths[inner]) > 1 else ""
            section(inner, prefix, inner_slug, min(depth + 1, 4), heading, f"{intro_text} {where}".strip(), root)

    for title, model, where in roots:
        if model in documented:
            sections.append(
                f"## {title} {{#{anchor(model)}-settings}}\n\n{where} Its fields are those of "
                f"[{model.__name__}](#{documented[model]}).\n"
            )
            continue
        doc = one_paragraph(inspect.cleandoc(model.__doc__ or "")) if model.__doc__ else ""
        heading = f"{title}: {model.__name__}" if title != model.__name__ else model.__name__
        section(
            model,
            "",
            anchor(model),
            2,
            heading,
            f"{where}\n\n{doc}".strip() if doc and doc not in where else where,
            title,
        )
    for name in missing:
        log.warning("config reference: %s has no docstring (write one under the field)", name)
    head = (
        "# Configuration reference\n\n"
        + GENERATED_NOTE.format(source=" from the pydantic models of the settings")
        + "\nEvery key below is a YAML key (`validate.sequential.looks` is `looks:` under `sequential:` under "
        "`validate:`) and a `--set` override (`--set validate.sequential.looks=[0.5,1.0]`). Unknown keys and "
        "values out of bounds are errors that name the key and the file. The `...Settings` and `...Options` "
        "models at the end are what the Python API takes (a model or a dict of its fields); the commands build "
        "them from their flags.\n"
    )
    return head + "\n" + "\n".join(sections)


# --- reference/cli.md ---------------------------------------------------------------------------

_HELP_TAIL = re.compile(r"\s*\[([^\[\]]*)\]\s*$")


def split_help(text: str) -> tuple[str, str, str]:
    """click's help line -> (meaning, default, bounds); its tail `[default: X; 1<=x<=5]` split out."""
    default = bounds = ""
    match = _HELP_TAIL.search(text)
    if match and any(key in match.group(1) for key in ("default:", "required", "x>", "x<", "<=x", "<x")):
        text = text[: match.start()]
        for part in match.group(1).split(";"):
            part = part.strip()
            if part.startswith("default:"):
                default = part.removeprefix("default:").strip()
            elif part == "required":
                default = "required"
            elif part:
                bounds = part.replace("<=", " ≤ ").replace(">=", " ≥ ").replace("  ", " ").strip()
    return text.strip(), default, bounds


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def cli_page() -> str:
    """Every command of the `bias-discovery` app with its usage, help and options."""
    import typer

    from bias_discovery.cli import app

    root = typer.main.get_command(app)
    out = [
        "# Command-line reference",
        "",
        GENERATED_NOTE.format(source=" from the typer app (`bias_discovery.cli`): what `--help` prints"),
        "Every command exits 0 on success, 1 when `check` finds a problem, 2 on a usage or input error (with a "
        "one-line message naming the file, line, field or server) and 130 when a run is interrupted with Ctrl-C "
        "(it says how to continue).",
        "",
    ]

    def walk(command: Any, ctx: Any, depth: int) -> None:
        if getattr(command, "hidden", False):
            return
        path = ctx.command_path
        help_text = inspect.cleandoc(command.help or "")
        out.extend([f"{'#' * min(max(depth, 1) + 1, 4)} `{path}` {{#{path.replace(' ', '-')}}}", ""])
        if help_text:
            out.extend([help_text.replace("\b\n", ""), ""])
        out.extend(["```text", command.get_usage(ctx), "```", ""])
        rows = []
        for param in command.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None or param.name == "help":
                continue
            names, text = record
            meaning, default, bounds = split_help(text)
            rows.append(f"| `{cell(names)}` | {cell(meaning)} | {cell(default)} | {cell(bounds)} |")
        if rows:
            out.extend(["| option or argument | meaning | default | bounds |", "| --- | --- | --- | --- |", *rows, ""])
        if hasattr(command, "list_commands"):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                walk(sub, sub.make_context(name, [], parent=ctx, resilient_parsing=True), depth + 1)

    walk(root, root.make_context("bias-discovery", [], resilient_parsing=True), 0)
    return "\n".join(out)


# --- reference/api.md ---------------------------------------------------------------------------

API_FUNCTIONS = ("discover", "load_run", "judge", "audit", "matrix", "replicate")
MORE_API_FUNCTIONS = (
    "report",
    "resolve_library",
    "export_judgebench_pro",
    "apply_annotations",
    "export_dpo",
    "export_harness",
    "run_preflight",
    "validate_family",
)
"""The functions of `bias_discovery.api` beyond the six `bias_discovery` hands out: reports, libraries, exports, checks."""


def api_page() -> str:
    """The functions and results of `bias_discovery.api` (mkdocstrings), and each result's columns."""
    from bias_discovery import api
    from bias_discovery.tables import Tabular

    results = [
        getattr(api, name)
        for name in api.__all__
        if isinstance(getattr(api, name), type) and issubclass(getattr(api, name), Tabular)
    ]
    out = [
        "# Python API reference",
        "",
        GENERATED_NOTE.format(source=" from `bias_discovery.api` (mkdocstrings) and the results' row models"),
        "```python",
        f"from bias_discovery import {', '.join(sorted(API_FUNCTIONS))}",
        "```",
        "",
        "How to use them together: the [Python API guide](../guides/python-api.md).",
        "",
        "## Functions",
        "",
    ]
    for name in API_FUNCTIONS:
        out += [f"::: bias_discovery.api.{name}", "    options:", "      heading_level: 3", ""]
    out += [
        "## Reports, libraries, exports and checks",
        "",
        "```python",
        f"from bias_discovery.api import {', '.join(sorted(MORE_API_FUNCTIONS))}",
        "```",
        "",
    ]
    for name in MORE_API_FUNCTIONS:
        out += [f"::: bias_discovery.api.{name}", "    options:", "      heading_level: 3", ""]
    out += ["## Results", ""]
    for result in results:
        out += [
            f"::: bias_discovery.api.{result.__name__}",
            "    options:",
            "      heading_level: 3",
            '      filters: ["!^_", "!^model_", "!^row_model$"]',
            "      show_if_no_docstring: false",
            "",
        ]
    out += [
        "## Result tables",
        "",
        "Every result has `.to_pandas()`, `.to_dataset()` (a `datasets.Dataset`) and `.columns()`. The columns are "
        "the fields of the result's row model, in order, with their types (integers and booleans as pandas' "
        "nullable `Int64` and `boolean`): an empty result, or a column that is None in every row, keeps its name "
        "and type, so tables of several runs concatenate.",
        "",
    ]
    for result in results:
        row_model = result.row_model
        docs = field_docstrings(row_model)
        columns = result.columns()
        out += [
            f"### {result.__name__} {{#columns-{result.__name__.lower()}}}",
            "",
            f"Row model `{row_model.__name__}`: {first_sentence(row_model.__doc__)}",
            "",
            "Columns: " + ", ".join(f"`{c}`" for c in columns) + ".",
            "",
            "| column | type | meaning |",
            "| --- | --- | --- |",
        ]
        for column in columns:
            info = row_model.model_fields[column]
            out.append(
                f"| `{column}` | {cell(type_text(info.annotation, lambda m: f'`{m.__name__}`'))} | "
                f"{cell(one_paragraph(docs.get(column) or info.description or ''))} |"
            )
        out.append("")
    return "\n".join(out)


# --- reference/run-directory.md -----------------------------------------------------------------


def exit_codes_page() -> str:
    """Every exit code with the commands that use it and what it means (`cli._exit_codes`)."""
    from bias_discovery.cli._exit_codes import exit_codes_markdown
    from bias_discovery.cli._findings import __doc__ as fail_on_doc

    conditions = inspect.cleandoc(fail_on_doc or "").split("\n\n", 1)[-1]
    return "\n".join(
        [
            "# Exit codes",
            "",
            GENERATED_NOTE.format(source=" from `bias_discovery/cli/_exit_codes.py`"),
            "",
            "A command exits with one of these codes and no other; a CI job can tell a finding from an error "
            "and from a run stopped at its budget.",
            "",
            exit_codes_markdown(),
            "## `--fail-on` conditions",
            "",
            conditions,
            "",
        ]
    )


def run_directory_page() -> str:
    """Every file of a run directory with its form and schema, the schemas' models below."""
    from bias_discovery.run.layout import run_files

    files = run_files()
    schemas: list[type[BaseModel]] = []

    def collect(model: type[BaseModel]) -> None:
        if model in schemas:
            return
        schemas.append(model)
        for info in model.model_fields.values():
            for inner in models_in(info.annotation):
                collect(inner)

    for item in files:
        if item.schema is not None and item.schema.__name__ != "RunConfig":
            collect(item.schema)

    def link(model: type[BaseModel]) -> str:
        if model.__name__ == "RunConfig":
            return "[RunConfig](config.md#runconfig)"
        return f"[{model.__name__}](#{anchor(model)})"

    tree = "\n".join(f"RUN_DIR/{item.path}" for item in files)
    out = [
        "# Run directory reference",
        "",
        GENERATED_NOTE.format(source=" from `bias_discovery.run.layout`, which walks the run record's own artifacts"),
        "A run is a directory of plain files. `bias_discovery.run.RunDir` is the only code that knows this layout; "
        "every JSON file is read and written as the pydantic model named here, so a file that does not match is an "
        "error naming the file, the line and the field. `NNN` is an iteration number (`iter_001`, `iter_002` ...; "
        "`iter_000` holds the seed library's validation when `validate.seeds` is on).",
        "",
        "```text",
        tree,
        "```",
        "",
        "`bias-discovery replicate` also writes into the run directory by default: "
        "`replications/seed-S/replication.json` (`-DATA` appended for other data), the "
        "[Replication](api.md#columns-replication) result, next to the run's own files.",
        "",
        "## Files",
        "",
    ]
    for item in files:
        schema = link(item.schema) if item.schema is not None else "none"
        out += [f"### `{item.path}`", "", item.what, "", f"Form: {item.form}. Schema: {schema}.", ""]
    out += ["## Schemas", "", "Each model once; a field whose type is another model links to it.", ""]
    for model in schemas:
        docs = field_docstrings(model)
        out += [f"### {model.__name__} {{#{anchor(model)}}}", ""]
        if model.__doc__ and model.__doc__ is not BaseModel.__doc__:
            out += [one_paragraph(inspect.cleandoc(model.__doc__)), ""]
        out += ["| field | type | meaning |", "| --- | --- | --- |"]
        for name, info in model.model_fields.items():
            key = info.alias or name
            out.append(
                f"| `{key}` | {cell(type_text(info.annotation, link))} | "
                f"{cell(one_paragraph(docs.get(name) or info.description or ''))} |"
            )
        out.append("")
    return "\n".join(out)
