"""Reading Helm templates without Helm: a Go-template stripper and a `.Values` reference finder.

Helm is not installed on the development machines, so the chart's templates are checked here
approximately: directives are removed so that the YAML around them can be parsed, and the
`.Values` paths they use are collected so that they can be looked up in values.yaml.

The stripper keeps every branch of an `if`/`else` (so a mapping may get a key twice, which
PyYAML accepts: the last wins) and drops lines that hold nothing but directives (control flow,
variable assignments, `include ... | nindent N`). An action inside a line of YAML becomes the
placeholder scalar PLACEHOLDER.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

PLACEHOLDER = "PLACEHOLDER"

# {{/* comment */}} with optional trim markers; comments may span lines.
_COMMENT = re.compile(r"\{\{-?\s*/\*.*?\*/\s*-?\}\}", re.S)
# Any action. Actions never contain "}}" inside a string in this chart.
_ACTION = re.compile(r"\{\{-?(.*?)-?\}\}", re.S)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|`[^`]*`')
_ABSOLUTE = re.compile(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
# A field chain on the dot: ".foo.bar", not "$x.foo", "(...).foo", or the ".Values" above.
_RELATIVE = re.compile(r"(?<![\w$)\].])\.([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)")
_BUILTINS = {"Values", "Release", "Chart", "Capabilities", "Template", "Files", "Subcharts"}
_SIMPLE_VALUES_PIPELINE = re.compile(r"^\$?\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)$")


def strip_go_template(text: str) -> str:
    """The YAML left when every Go template action is removed or replaced by PLACEHOLDER."""
    text = _COMMENT.sub("", text)
    # An action spanning lines is put on one line, so it is dropped or replaced as a whole.
    text = _ACTION.sub(lambda m: m.group(0).replace("\n", " "), text)
    lines = []
    for line in text.splitlines():
        if "{{" not in line:
            lines.append(line)
        elif _ACTION.sub("", line).strip():
            lines.append(_ACTION.sub(PLACEHOLDER, line))
        # else: a line of directives only.
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ValuesRef:
    """A values path a template reads, e.g. ("brokers", "replicas"), and where."""

    path: tuple[str, ...]
    line: int
    resolved_from_with: bool = False


@dataclass
class _Frame:
    kind: str  # if, with, range, define, block
    values_path: tuple[str, ...] | None = None  # the dot inside `with .Values.x`, when known


def _code(action: str) -> str:
    """The action's text without string literals (".yaml" in a file name is not a field)."""
    return _STRING.sub('""', action).strip()


def values_references(text: str) -> list[ValuesRef]:
    """Every `.Values.a.b` path in a template, absolute ones (`.Values`, `$.Values`,
    `$ctx.Values`, which are all the root context in this chart) and, inside
    `with .Values.x` blocks, the relative `.field` references when the dot is simply x.
    Relative references inside `range`, `define` or an unresolvable `with` are not checked."""
    text = _COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    refs: list[ValuesRef] = []
    stack: list[_Frame] = []
    for match in _ACTION.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        code = _code(match.group(1))
        keyword = code.split(None, 1)[0] if code else ""
        pipeline = code[len(keyword) :].strip()

        for found in _ABSOLUTE.finditer(code):
            refs.append(ValuesRef(tuple(found.group(1).lstrip(".").split(".")), line))
        dot = _innermost_dot(stack)
        if dot is not None and keyword not in {"end", "define"}:
            # In `{{ with .Values.x }}` itself the pipeline is read in the outer context.
            for found in _RELATIVE.finditer(_ABSOLUTE.sub("", code)):
                first = found.group(1).split(".")[0]
                if first not in _BUILTINS:
                    path = dot + tuple(found.group(1).split("."))
                    refs.append(ValuesRef(path, line, resolved_from_with=True))

        if keyword in {"if", "range", "define", "block"}:
            stack.append(_Frame(keyword))
        elif keyword == "with":
            simple = _SIMPLE_VALUES_PIPELINE.match(pipeline)
            path = tuple(simple.group(1).lstrip(".").split(".")) if simple else None
            stack.append(_Frame("with", path))
        elif keyword == "else" and stack:
            rest = pipeline.split(None, 1)
            if stack[-1].kind == "with":
                # `else` of a with: the outer dot; `else with .Values.y`: y.
                simple = _SIMPLE_VALUES_PIPELINE.match(rest[1]) if len(rest) == 2 else None
                is_with = bool(rest) and rest[0] == "with"
                stack[-1].values_path = (
                    tuple(simple.group(1).lstrip(".").split(".")) if simple and is_with else None
                )
        elif keyword == "end" and stack:
            stack.pop()
    return refs


def _innermost_dot(stack: list[_Frame]) -> tuple[str, ...] | None:
    """The values path the dot stands for, if the innermost dot-changing block is a
    resolvable `with` (an `if` leaves the dot alone)."""
    for frame in reversed(stack):
        if frame.kind == "if":
            continue
        return frame.values_path if frame.kind == "with" else None
    return None


def lookup(values: Any, path: tuple[str, ...]) -> bool:
    """Whether `path` exists in `values`. An empty mapping ({}: annotations, nodeSelector,
    ...) is free-form, so anything below it is accepted."""
    node = values
    for key in path:
        if isinstance(node, dict):
            if not node:
                return True
            if key not in node:
                return False
            node = node[key]
        else:
            return False
    return True


def enclosing_blocks(text: str, index: int) -> list[str]:
    """The blocks (`if`, `with`, `range`, `define`) open at character `index` of a template,
    outermost first, as their actions read: "if .Values.connect.enabled". In an `else` branch
    the entry becomes "<opening action> / else" ("... / else if <pipeline>" for `else if`), so
    a test can tell the branches apart."""
    text = _COMMENT.sub(lambda m: " " * len(m.group(0)), text)
    stack: list[str] = []
    for match in _ACTION.finditer(text):
        if match.start() >= index:
            break
        action = " ".join(match.group(1).split())
        keyword = action.split(None, 1)[0] if action else ""
        if keyword in {"if", "with", "range", "define", "block"}:
            stack.append(action)
        elif keyword == "else" and stack:
            stack[-1] = f"{stack[-1].split(' / else', 1)[0]} / {action}"
        elif keyword == "end" and stack:
            stack.pop()
    return stack
