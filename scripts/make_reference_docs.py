"""Write the reference pages from the code, so that they say what the code does:

    python scripts/make_reference_docs.py     # rewrites docs/cli.md and docs/config.md

docs/cli.md: every `ets` command, read from the argparse parsers of ets/app/cli.py (usage,
arguments, options, defaults, help). docs/config.md: every config key, its default and type
read from the dataclasses of ets/config/sections.py, its allowed values from the checks
that enforce them, and its description from ets/config/key_docs.py.
tests/test_reference_docs.py checks that the committed pages equal what this writes.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Iterable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from ets.app.cli import build_parser  # noqa: E402
from ets.config import (ETS_KEY_ALIASES, METHOD_ALIASES, PRESETS, VLLM_OPTIONS, ConfigError, RunConfig,  # noqa: E402
                        read_yaml)
from ets.config.checks import field_types  # noqa: E402
from ets.config.key_docs import KEY_DOCS, NESTED_DOCS, RECIPE_KEY_DOCS, SECTION_DOCS  # noqa: E402
from ets.config.loading import NESTED, SECTIONS  # noqa: E402

REGENERATE = "python scripts/make_reference_docs.py"
USAGE_WIDTH = 88  # columns of a usage block before it wraps
RUN = "run"  # KEY_DOCS's name for RunConfig's own (top-level) keys


def generated_note(sources: str) -> str:
    return f"<!-- Written by `{REGENERATE}` from {sources}; edit those, then rerun it. -->"


# ------------------------------------------------------------------ Markdown
_CODE_SPAN = re.compile(r"(`[^`]*`)")
_DOCS_PAGE = re.compile(r"\bdocs/([\w.-]+\.md)\b")  # a page beside the generated ones: linked


def md(text: str) -> str:
    """Text for a Markdown table cell or paragraph: one line, a `|` escaped everywhere (a
    table would split there, code spans included), and `<`, `>` escaped outside code spans
    (GitHub would read `<seed>` as an HTML tag and drop it); docs/NAME.md as a link."""
    parts = _CODE_SPAN.split(" ".join(text.split()))
    for i in range(0, len(parts), 2):  # the even parts lie outside code spans
        parts[i] = _DOCS_PAGE.sub(r"[\1](\1)", parts[i].replace("<", r"\<").replace(">", r"\>"))
    return "".join(parts).replace("|", r"\|")


def code(value: str) -> str:
    """`value` as a code span (a longer fence where the value holds a backtick)."""
    fence = "``" if "`" in value else "`"
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def sentence(text: str) -> str:
    """A help fragment as a sentence: capitalised, ending in a full stop."""
    text = " ".join(text.split())
    if not text:
        return text
    return text[0].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


# ------------------------------------------------------------------ docs/cli.md
def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand, in the order they were added."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: _help(choice, parser.prog) for choice in action._choices_actions}
    seen, out = set(), []
    for name, sub in action.choices.items():
        if id(sub) not in seen:  # an alias names a parser twice
            seen.add(id(sub))
            out.append((name, helps.get(name, ""), sub))
    return out


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """What a parser takes, in argparse's order (optionals, then positionals), without
    -h/--help (every command has it) and the subcommand chooser."""
    actions = [a for a in parser._actions
               if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]
    return [a for a in actions if a.option_strings] + [a for a in actions if not a.option_strings]


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _metavar(action: argparse.Action) -> str:
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "{" + ",".join(map(str, action.choices)) + "}"
    return action.dest if not action.option_strings else action.dest.upper()


def _positional_usage(action: argparse.Action) -> str:
    name = _metavar(action)
    return {"?": f"[{name}]", "*": f"[{name} ...]", "+": f"{name} [{name} ...]"}.get(action.nargs, name)


def _usage_part(action: argparse.Action) -> str:
    if not action.option_strings:
        return _positional_usage(action)
    text = action.option_strings[-1] + (f" {_metavar(action)}" if _takes_value(action) else "")
    return text if _required(action) else f"[{text}]"


def _usage(prog: str, parts: list[str]) -> list[str]:
    """A usage line as argparse writes it, wrapped at USAGE_WIDTH with the later lines
    indented under the first argument."""
    lines, line = [], prog
    indent = " " * (len(prog) + 1)
    for part in parts:
        if len(line) + 1 + len(part) > USAGE_WIDTH and line.strip() != prog:
            lines.append(line)
            line = indent + part
        else:
            line += " " + part
    return lines + [line]


def _help(action: argparse.Action, prog: str) -> str:
    """The help text as `--help` shows it (argparse's %(default)s and %% expanded)."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    params = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    if params.get("choices") is not None:
        params["choices"] = ", ".join(map(str, params["choices"]))
    return action.help % dict(params, prog=prog)


def _required(action: argparse.Action) -> bool:
    """Whether the command needs it (argparse marks a positional of nargs='*' required,
    though none is needed)."""
    return action.required if action.option_strings else action.nargs not in ("?", "*")


def _cli_default(action: argparse.Action) -> str:
    if _required(action):
        return "required"
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return "off"
    if action.default in (None, argparse.SUPPRESS) or action.nargs in ("*", "?"):
        return ""
    return code(str(action.default))


def _argument_rows(actions: list[argparse.Action], prog: str) -> list[list[str]]:
    rows = []
    for a in actions:
        if a.option_strings:
            name, value = ", ".join(map(code, a.option_strings)), code(_metavar(a)) if _takes_value(a) else ""
        else:
            name, value = code(_positional_usage(a)), ""
        rows.append([name, value, _cli_default(a), md(sentence(_help(a, prog)))])
    return rows


def _option_key(action: argparse.Action) -> tuple[str, ...]:
    return tuple(action.option_strings)


def cli_page(parser: argparse.ArgumentParser | None = None) -> str:
    """docs/cli.md: the top-level options, then one section per command."""
    parser = parser or build_parser()
    commands = _subcommands(parser)
    top = _arguments(parser)
    # Options every command takes, after its name as before it: listed once, with `ets`.
    shared = {_option_key(a) for a in top if a.option_strings}
    for _, _, sub in commands:
        shared &= {_option_key(a) for a in _arguments(sub) if a.option_strings}
    first_sub = commands[0][2] if commands else parser
    shared_actions = [a for a in _arguments(first_sub) if _option_key(a) in shared]

    out = ["# Command-line reference", "", generated_note("the parsers of ets/app/cli.py"), ""]
    if parser.description:
        out += [md(parser.description), ""]
    out += table(["command", "what it does"],
                 [[f"[{code(f'{parser.prog} {name}')}](#{parser.prog}-{name})", md(sentence(help_))]
                  for name, help_, _ in commands])
    out += ["", f"## {code(parser.prog)}", "", "```",
            *_usage(parser.prog, [_usage_part(a) for a in top] + ["COMMAND ..."]), "```", ""]
    names = " and ".join(", ".join(map(code, a.option_strings)) for a in shared_actions)
    out += [f"Every command takes {names} after its name as well as before it, and `-h`/`--help`.", ""]
    own_top = [a for a in top if _option_key(a) not in shared]
    out += table(["option", "value", "default", "description"], _argument_rows(shared_actions + own_top, parser.prog))
    for name, help_, sub in commands:
        actions = [a for a in _arguments(sub) if _option_key(a) not in shared or not a.option_strings]
        usage = _usage(sub.prog, [_usage_part(a) for a in actions if a.option_strings]
                       + ["[options of every command]"]
                       + [_usage_part(a) for a in actions if not a.option_strings])
        out += ["", f"## {code(sub.prog)}", "", md(sentence(sub.description or help_)), "",
                "```", *usage, "```", ""]
        out += table(["argument", "value", "default", "description"], _argument_rows(actions, sub.prog))
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ docs/config.md
def section_classes() -> dict[str, type]:
    """KEY_DOCS's sections and the dataclass of each: the config file's sections, then
    RunConfig for the top-level keys."""
    return {**SECTIONS, RUN: RunConfig}


def section_keys(name: str, cls: type) -> list[dataclasses.Field]:
    """The keys of a section: its fields (RunConfig's without the sections it holds)."""
    return [f for f in dataclasses.fields(cls) if not (name == RUN and f.name in SECTIONS)]


def description_problems() -> list[str]:
    """What ets/config/key_docs.py lacks or holds too many, one line each: a field with no
    description, a description of no field, a recipe key that is a field."""
    problems = []
    classes = section_classes()
    for name, cls in classes.items():
        documented = KEY_DOCS.get(name, {})
        keys = [f.name for f in section_keys(name, cls)]
        problems += [f"{_dotted(name, k)} has no description in KEY_DOCS[{name!r}]" for k in keys
                     if not documented.get(k, "").strip()]
        problems += [f"KEY_DOCS[{name!r}][{k!r}] describes no key ({cls.__name__} has no field {k!r})"
                     for k in documented if k not in keys]
    for docs_name, docs in (("KEY_DOCS", KEY_DOCS), ("SECTION_DOCS", SECTION_DOCS)):
        problems += [f"{docs_name}[{name!r}] names no section (sections: {', '.join(classes)})"
                     for name in docs if name not in classes]
    problems += [f"section {name!r} has no description in SECTION_DOCS" for name in classes
                 if not SECTION_DOCS.get(name, "").strip()]
    fields_top = {f.name for f in dataclasses.fields(RunConfig)}
    problems += [f"RECIPE_KEY_DOCS[{k!r}] is a field of RunConfig; describe it in KEY_DOCS[{RUN!r}]"
                 for k in RECIPE_KEY_DOCS if k in fields_top]
    return problems


def _dotted(section: str, key: str) -> str:
    return key if section == RUN else f"{section}.{key}"


def _type_words(kind: Any) -> str:
    """An annotation in words: `int | None` -> integer or null."""
    if len(members := _members(kind)) > 1:
        words = [_type_words(m) for m in members if m is not type(None)]
        return " or ".join(words + (["null"] if type(None) in members else []))
    if typing.get_origin(kind) is typing.Literal:
        return "one of " + ", ".join(code(_yaml(v)) for v in typing.get_args(kind))
    if typing.get_origin(kind) is list:
        (item,) = typing.get_args(kind) or (Any,)
        return f"list of {_type_words(item)}"
    if typing.get_origin(kind) in (dict, Mapping) or kind in (dict, Mapping):
        return "mapping"
    return {bool: "true/false", int: "integer", float: "number", str: "text", Any: "any"}.get(
        kind, getattr(kind, "__name__", str(kind)))


def _yaml(value: Any) -> str:
    """A value as a config file writes it: null, true/false, text bare where a config file
    reads it back as the same text (else quoted), a list or mapping in JSON's flow style."""
    if isinstance(value, str):
        try:
            plain = value.isprintable() and read_yaml(value) == value
        except yaml.YAMLError:
            plain = False
        if plain:
            return value
    return json.dumps(value, ensure_ascii=False)


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


_PROBE = "\x00 not a value"  # text no check accepts as a choice
_CHOOSE = "; choose one of: "  # how `checks.choice` lists the allowed values


def _members(kind: Any) -> tuple:
    """A union's types; any other annotation alone."""
    return typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, types.UnionType) else (kind,)


def _text_list(kind: Any) -> bool:
    """Whether the annotation takes a list of text (`list[str]`, `list[str] | None`)."""
    return any(typing.get_origin(m) is list and typing.get_args(m) == (str,) for m in _members(kind))


def probed_choices(cls: type, f: dataclasses.Field) -> list[str] | None:
    """The values a dataclass's own check allows for a text field (or a list of text), read
    by giving it one that no check allows: `checks.choice` names every allowed value. None
    where the field takes any text. Asking the check itself keeps the page true to it,
    whether the choices are a constant or written inline."""
    kind = field_types(cls)[f.name]
    is_list = _text_list(kind)
    if not (is_list or str in _members(kind)):
        return None
    try:
        cls(**{f.name: [_PROBE] if is_list else _PROBE})
    except ValueError as exc:  # ConfigError, or a reward's options' own check
        said, _, allowed = str(exc).partition(_CHOOSE)
        # the message must be about this key: `name: ...`, `section.name: ...` or `option 'name' ...`
        if allowed and re.match(rf"(?:[\w.]*\.)?{f.name}:|option '{f.name}'", said):
            return allowed.split(", ")
    return None


def registry_values() -> dict[tuple[str, str], tuple[str, list[str]]]:
    """Keys whose values are names looked up elsewhere than in the section's checks:
    (how the list reads, the names). Built-ins only: what a user registers is theirs."""
    import ets.strategies as search
    from ets.rewards.registry import BUILTINS

    return {
        ("search", "method"): ("built in", search.available()),
        ("reward", "name"): ("built in", list(BUILTINS)),
        (RUN, "policy_model_type"): ("one of", list(PRESETS)),
        (RUN, "reward_model_type"): ("one of", list(PRESETS)),
    }


def values_text(cls: type, f: dataclasses.Field, names: tuple[str, list[str]] | None = None) -> str:
    """What a field takes, in words: its type, or the values allowed (`names`: a registry's)."""
    kind = field_types(cls)[f.name]
    null = " or null" if type(None) in _members(kind) else ""
    if names is not None:
        how, listed = names[0], ", ".join(map(code, names[1]))
        return (f"one of {listed}" if how == "one of" else f"text ({how}: {listed})") + null
    choices = probed_choices(cls, f)
    if choices is None:
        return _type_words(kind)
    listed = ", ".join(map(code, choices))
    if _text_list(kind):
        return f"list of {listed}{null}"
    others = "".join(f" or {_type_words(m)}" for m in _members(kind) if m not in (str, type(None)))
    return f"one of {listed}{others}{null}"


def _key_rows(name: str, cls: type, registries: dict) -> list[list[str]]:
    return [[code(f.name), code(_yaml(_default(f))), md(values_text(cls, f, registries.get((name, f.name)))),
             md(KEY_DOCS[name][f.name])] for f in section_keys(name, cls)]


def _option_rows(obj: Any) -> list[list[str]]:
    """A reward's options (name, default, type): the fields of its `Options` dataclass, or
    its constructor's keyword arguments (a plug-in-style reward)."""
    options = getattr(obj, "Options", None)
    if options is not None and dataclasses.is_dataclass(options):
        return [[code(f.name), code(_yaml(_default(f))), md(values_text(options, f))]
                for f in dataclasses.fields(options) if f.name not in getattr(options, "not_options", ())]
    hints = typing.get_type_hints(obj.__init__ if inspect.isclass(obj) else obj)
    return [[code(p.name), code(_yaml(None if p.default is p.empty else p.default)), md(_type_words(hints.get(p.name, Any)))]
            for p in inspect.signature(obj).parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _reward_options() -> list[str]:
    from ets.rewards.registry import BUILTINS, import_attr

    out = []
    for name, spec in BUILTINS.items():
        rows = _option_rows(import_attr(spec, name))
        out += ["", f"#### {code(name)}", ""]
        out += table(["option", "default", "type / values"], rows) if rows else ["No options."]
    return out


def config_page() -> str:
    """docs/config.md: each section's keys, the nested options, and the recipes' keys."""
    problems = description_problems()
    if problems:
        raise ConfigError("; ".join(problems) + "; fix ets/config/key_docs.py")
    registries = registry_values()
    nested = ", ".join(code(".".join(path)) for path in sorted(NESTED))
    out = [
        "# Config reference", "",
        generated_note("ets/config/sections.py (defaults, types, allowed values) and ets/config/key_docs.py "
                       "(descriptions)"), "",
        f"A config is a YAML file with the sections {', '.join(code(s) for s in SECTIONS)} and the top-level keys "
        f"below; the search keys may also sit at the top level. On the command line, `key=value` sets a search or "
        f"top-level key, `SECTION.key=value` another section's, and `SECTION.KEY.NAME=value` a key of the mappings "
        f"{nested}. Values are YAML. An unknown key or a bad value is a one-line error naming the key and what is "
        f"allowed; `ets run --config FILE --check` prints the resolved settings without running anything.",
        "",
        "A default of null means the key is unset; its description says what that does.",
        "",
        "Paths: in a config file, `data.path`, `policy.model` and `reward.model` written from `./` or `../` "
        "are relative to the file (a config and its data travel together); every other path, and every path "
        "on the command line or in a dict given to `ets.search`, is relative to the working folder.",
    ]
    for name, cls in section_classes().items():
        title = "Top-level keys" if name == RUN else code(name)
        out += ["", f"## {title}", "", md(SECTION_DOCS[name]), ""]
        out += table(["key", "default", "type / values", "description"], _key_rows(name, cls, registries))
        if name == "policy":
            out += ["", "### `policy.vllm` options", "", md(NESTED_DOCS["policy.vllm"]), ""]
            out += table(["option", "type"], [[code(k), md(_type_words(v))] for k, v in VLLM_OPTIONS.items()])
        if name == "reward":
            out += ["", "### `reward.options` of the built-in rewards", "", md(NESTED_DOCS["reward.options"])]
            out += _reward_options()
    out += ["", "## Recipe keys", "",
            md("The ETS public code's hyperparameter files run unchanged (docs/FIDELITY.md). Besides the top-level "
               "keys `num_threads`, `policy_model_type` and `reward_model_type` above, they may hold:"), ""]
    out += table(["key", "description"], [[code(k), md(v)] for k, v in RECIPE_KEY_DOCS.items()])
    out += ["", "Their names for search keys, accepted at the top level and in `search`:", ""]
    out += table(["ETS code's key", "key"], [[code(k), code(f"search.{v}")] for k, v in ETS_KEY_ALIASES.items()])
    out += ["", "Their names for methods, accepted as `search.method`:", ""]
    out += table(["ETS code's method", "method"], [[code(k), code(v)] for k, v in METHOD_ALIASES.items()])
    out += ["", "search-and-learn's recipes (`approach`, `n`, `model_path`, ...) are read as they are too: "
                "[search_and_learn.md](search_and_learn.md) maps each of their keys onto these."]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ the pages
PAGES: dict[str, Callable[[], str]] = {"docs/cli.md": cli_page, "docs/config.md": config_page}


def main() -> int:
    try:
        pages = {path: make() for path, make in PAGES.items()}
    except ConfigError as exc:
        print(f"make_reference_docs: {exc}", file=sys.stderr)
        return 2
    for path, text in pages.items():
        target = ROOT / path
        old = target.read_text(encoding="utf-8") if target.exists() else None
        if old != text:
            target.write_text(text, encoding="utf-8")
        print(f"{path}: {'unchanged' if old == text else 'written'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
