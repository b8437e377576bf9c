#!/usr/bin/env python3
"""Generate the Requirements / Resources / Inputs / Outputs tables of a Terraform module README.

A small stand-in for terraform-docs (https://terraform-docs.io), which terraform-aws-modules
run from pre-commit: the tables are written between the markers

    <!-- BEGIN_TF_DOCS -->
    <!-- END_TF_DOCS -->

of each module's README.md from its *.tf files, so they cannot drift from variables.tf and
outputs.tf. Usage (from the repository root):

    python scripts/tf_module_docs.py                  # rewrite every terraform/modules/*/README.md
    python scripts/tf_module_docs.py --check          # exit 1 when a README is out of date
    python scripts/tf_module_docs.py terraform/modules/aws_gpu

HCL is read by a small parser of its structure (blocks, attributes, strings, heredocs,
comments): attribute values are kept as their source text, and only string literals are
decoded. Inputs and outputs are listed in file order (the files group them by topic).
Standard library only, so it runs before any dependency is installed.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

BEGIN = "<!-- BEGIN_TF_DOCS -->"
END = "<!-- END_TF_DOCS -->"
REPO = Path(__file__).resolve().parents[1]
MODULES = REPO / "terraform" / "modules"


class HclError(ValueError):
    """The text is not HCL this parser understands; carries a line number."""

    def __init__(self, message: str, line: int):
        super().__init__(f"line {line}: {message}")
        self.line = line


# ------------------------------------------------------------------------------ parsing


@dataclass
class Block:
    type: str
    labels: list[str]
    attributes: dict[str, str] = field(default_factory=dict)  # name -> expression source
    blocks: list[Block] = field(default_factory=list)
    line: int = 0


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_HEREDOC = re.compile(r"<<(-?)([A-Za-z_][A-Za-z0-9_]*)[ \t]*\n")
_CLOSERS = {"(": ")", "[": "]", "{": "}"}


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    # -- low level ----------------------------------------------------------------------

    def line(self, pos: int | None = None) -> int:
        return self.text.count("\n", 0, self.pos if pos is None else pos) + 1

    def error(self, message: str, pos: int | None = None) -> HclError:
        return HclError(message, self.line(pos))

    def peek(self, length: int = 1) -> str:
        return self.text[self.pos : self.pos + length]

    def skip_comment(self) -> bool:
        """Skip one comment at pos (`#`, `//` to end of line; `/* */`); True if there was one."""
        if self.peek() == "#" or self.peek(2) == "//":
            end = self.text.find("\n", self.pos)
            self.pos = len(self.text) if end < 0 else end
            return True
        if self.peek(2) == "/*":
            end = self.text.find("*/", self.pos + 2)
            if end < 0:
                raise self.error("unterminated /* comment")
            self.pos = end + 2
            return True
        return False

    def skip_space(self, newlines: bool = True) -> None:
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char in " \t\r" or (newlines and char == "\n"):
                self.pos += 1
            elif not self.skip_comment():
                return

    def skip_string(self) -> None:
        """pos at an opening quote: move past the closing one (escapes, ${...}, %{...})."""
        start = self.pos
        self.pos += 1
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "\\":
                self.pos += 2
            elif char == '"':
                self.pos += 1
                return
            elif char == "\n":
                raise self.error("newline in a quoted string", start)
            elif self.peek(3) in ("$${", "%%{"):
                self.pos += 3  # an escaped, literal ${ or %{
            elif self.peek(2) in ("${", "%{"):
                self.pos += 1
                self.skip_nested("{")
            else:
                self.pos += 1
        raise self.error("unterminated string", start)

    def skip_heredoc(self) -> None:
        match = _HEREDOC.match(self.text, self.pos)
        assert match is not None
        marker = match.group(2)
        closing = re.compile(rf"^[ \t]*{re.escape(marker)}[ \t]*$", re.M)
        end = closing.search(self.text, match.end())
        if end is None:
            raise self.error(f"heredoc <<{marker} is never closed")
        self.pos = end.end()

    def skip_nested(self, opener: str) -> None:
        """pos at an opening bracket: move past its matching closer."""
        start = self.pos
        stack = [_CLOSERS[opener]]
        self.pos += 1
        while stack:
            if self.pos >= len(self.text):
                raise self.error(f"unclosed {opener!r}", start)
            char = self.text[self.pos]
            if self.skip_comment():
                continue
            if char == '"':
                self.skip_string()
            elif _HEREDOC.match(self.text, self.pos):
                self.skip_heredoc()
            elif char in _CLOSERS:
                stack.append(_CLOSERS[char])
                self.pos += 1
            elif char in ")]}":
                if char != stack.pop():
                    raise self.error(f"unexpected {char!r}")
                self.pos += 1
            else:
                self.pos += 1

    # -- structure ----------------------------------------------------------------------

    def expression(self) -> str:
        """An attribute's value: up to the end of its line, brackets and strings balanced."""
        start = self.pos
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == "\n" or self.peek() == "#" or self.peek(2) in ("//", "/*"):
                break
            if char == "}":  # the enclosing block's end, on the same line (`{ a = 1 }`)
                break
            if char == '"':
                self.skip_string()
            elif _HEREDOC.match(self.text, self.pos):
                self.skip_heredoc()
            elif char in _CLOSERS:
                self.skip_nested(char)
            elif char in ")]":
                raise self.error(f"unexpected {char!r}")
            else:
                self.pos += 1
        value = self.text[start : self.pos].strip()
        if not value:
            raise self.error("attribute without a value", start)
        return value

    def body(self, closing: str | None, opened_at: int = 0) -> tuple[dict[str, str], list[Block]]:
        attributes: dict[str, str] = {}
        blocks: list[Block] = []
        while True:
            self.skip_space()
            if self.pos >= len(self.text):
                if closing is not None:
                    raise self.error("this block is never closed", opened_at)
                return attributes, blocks
            if closing is not None and self.peek() == closing:
                self.pos += 1
                return attributes, blocks
            start = self.pos
            match = _IDENT.match(self.text, self.pos)
            if match is None:
                raise self.error(f"expected a name, found {self.peek()!r}")
            name = match.group(0)
            self.pos = match.end()
            self.skip_space(newlines=False)
            if self.peek() == "=" and self.peek(2) != "==":
                self.pos += 1
                self.skip_space(newlines=False)
                if name in attributes:
                    raise self.error(f"attribute {name} is set twice", start)
                attributes[name] = self.expression()
                continue
            labels = []
            while True:  # block labels: quoted strings, or bare identifiers
                if self.peek() == '"':
                    label_start = self.pos
                    self.skip_string()
                    labels.append(decode_string(self.text[label_start : self.pos]))
                elif label := _IDENT.match(self.text, self.pos):
                    labels.append(label.group(0))
                    self.pos = label.end()
                else:
                    break
                self.skip_space(newlines=False)
            if self.peek() != "{":
                raise self.error(f"expected '=' or '{{' after {name}")
            self.pos += 1
            inner_attributes, inner_blocks = self.body("}", start)
            blocks.append(Block(name, labels, inner_attributes, inner_blocks, self.line(start)))


def parse(text: str) -> list[Block]:
    """The top-level blocks of an HCL file (top-level attributes are not valid Terraform)."""
    attributes, blocks = _Parser(text).body(None)
    if attributes:
        name = next(iter(attributes))
        raise HclError(f"attribute {name} outside a block", 1)
    return blocks


_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}


def decode_string(source: str) -> str:
    """The value of a quoted string or heredoc literal; template sequences are kept as text."""
    heredoc = _HEREDOC.match(source)
    if heredoc:
        lines = source[heredoc.end() :].splitlines()[:-1]  # without the closing marker
        if heredoc.group(1):  # <<- strips the common indentation
            indent = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
            lines = [x[indent:] for x in lines]
        return "\n".join(lines)
    if len(source) < 2 or source[0] != '"' or source[-1] != '"':
        raise ValueError(f"not a string literal: {source}")
    out, i, body = [], 0, source[1:-1]
    while i < len(body):
        char = body[i]
        if char == "\\":
            code = body[i + 1 : i + 2]
            if code in _ESCAPES:
                out.append(_ESCAPES[code])
                i += 2
            elif code == "u":
                out.append(chr(int(body[i + 2 : i + 6], 16)))
                i += 6
            elif code == "U":
                out.append(chr(int(body[i + 2 : i + 10], 16)))
                i += 10
            else:
                raise ValueError(f"unknown escape \\{code} in {source}")
        elif body.startswith(("$${", "%%{"), i):
            out.append(body[i] + "{")
            i += 3
        else:
            out.append(char)
            i += 1
    return "".join(out)


def is_string_literal(source: str) -> bool:
    if _HEREDOC.match(source):
        return True
    if not (len(source) >= 2 and source.startswith('"') and source.endswith('"')):
        return False
    parser = _Parser(source)
    try:
        parser.skip_string()
    except HclError:
        return False
    return parser.pos == len(source)


# ------------------------------------------------------------------------------ module model


@dataclass
class Variable:
    name: str
    description: str
    type: str
    default: str | None  # expression source; None when the input is required
    validations: int


@dataclass
class Output:
    name: str
    description: str
    sensitive: bool


@dataclass
class Module:
    path: Path
    required_version: str | None
    providers: list[tuple[str, str, str]]  # (name, source, version)
    resources: list[tuple[str, str, str]]  # (mode "resource"|"data", type, name)
    variables: list[Variable]
    outputs: list[Output]


def _description(block: Block) -> str:
    source = block.attributes.get("description")
    if source is None:
        return ""
    if not is_string_literal(source):
        raise HclError(f"the description of {block.labels[0]} is not a string literal", block.line)
    return decode_string(source)


def _provider_requirements(block: Block) -> list[tuple[str, str, str]]:
    found = []
    for name, source in block.attributes.items():
        fields = dict(re.findall(r'(\w+)\s*=\s*("(?:[^"\\]|\\.)*")', source))
        found.append(
            (
                name,
                decode_string(fields["source"]) if "source" in fields else "",
                decode_string(fields["version"]) if "version" in fields else "",
            )
        )
    return found


def read_module(path: Path) -> Module:
    """Everything the README tables show, from the module's *.tf files (sorted by name)."""
    module = Module(path, None, [], [], [], [])
    for tf_file in sorted(path.glob("*.tf")):
        try:
            blocks = parse(tf_file.read_text())
        except HclError as exc:
            raise HclError(f"{tf_file.name}: {exc}", exc.line) from None
        for block in blocks:
            if block.type == "terraform":
                if "required_version" in block.attributes:
                    module.required_version = decode_string(block.attributes["required_version"])
                for inner in block.blocks:
                    if inner.type == "required_providers":
                        module.providers += _provider_requirements(inner)
            elif block.type in ("resource", "data") and len(block.labels) == 2:
                module.resources.append((block.type, *block.labels))
            elif block.type == "variable" and len(block.labels) == 1:
                module.variables.append(
                    Variable(
                        name=block.labels[0],
                        description=_description(block),
                        type=block.attributes.get("type", "any"),
                        default=block.attributes.get("default"),
                        validations=sum(b.type == "validation" for b in block.blocks),
                    )
                )
            elif block.type == "output" and len(block.labels) == 1:
                module.outputs.append(
                    Output(
                        name=block.labels[0],
                        description=_description(block),
                        sensitive=block.attributes.get("sensitive") == "true",
                    )
                )
    return module


# ------------------------------------------------------------------------------ rendering


def _flat(text: str) -> str:
    """One line, with the pipes that would end a Markdown table cell escaped."""
    return re.sub(r"\s+", " ", text).strip().replace("|", "\\|")


def _cell(text: str) -> str:
    """Prose safe inside one Markdown table cell (`<name>` is text, not an HTML tag)."""
    return _flat(text).replace("<", "&lt;").replace(">", "&gt;")


def _code(text: str) -> str:
    text = _flat(text)
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def render_tables(module: Module) -> str:
    """The Markdown between the markers (without them)."""
    lines = ["## Requirements", "", "| Name | Version |", "|------|---------|"]
    if module.required_version:
        lines.append(f"| terraform | {_code(module.required_version)} |")
    for name, source, version in module.providers:
        lines.append(f"| {name} ({_cell(source)}) | {_code(version) if version else 'any'} |")

    lines += ["", "## Resources", "", "| Name | Type |", "|------|------|"]
    for mode, kind, name in module.resources:
        lines.append(f"| {_code(f'{kind}.{name}')} | {'data source' if mode == 'data' else mode} |")

    lines += [
        "",
        "## Inputs",
        "",
        "| Name | Description | Type | Default | Required |",
        "|------|-------------|------|---------|:--------:|",
    ]
    for var in module.variables:
        default = "n/a" if var.default is None else _code(var.default)
        required = "yes" if var.default is None else "no"
        lines.append(
            f"| {_code(var.name)} | {_cell(var.description)} | {_code(var.type)} | {default} "
            f"| {required} |"
        )
    if not module.variables:
        lines.append("| (none) | | | | |")

    lines += ["", "## Outputs", "", "| Name | Description |", "|------|-------------|"]
    for out in module.outputs:
        note = " (sensitive)" if out.sensitive else ""
        lines.append(f"| {_code(out.name)} | {_cell(out.description)}{note} |")
    if not module.outputs:
        lines.append("| (none) | |")
    return "\n".join(lines) + "\n"


def updated_readme(readme: str, tables: str) -> str:
    """`readme` with the text between the markers replaced by `tables`."""
    pairs = readme.count(BEGIN) == 1 and readme.count(END) == 1
    if not pairs or readme.index(BEGIN) > readme.index(END):
        raise ValueError(f"the README needs exactly one {BEGIN} ... {END} pair, in that order")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{tables}{END}{tail}"


def module_dirs(paths: list[str]) -> list[Path]:
    if paths:
        return [Path(p).resolve() for p in paths]
    return sorted(p for p in MODULES.iterdir() if p.is_dir() and any(p.glob("*.tf")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="module directories (default: all)")
    parser.add_argument("--check", action="store_true", help="fail if a README is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path in module_dirs(args.modules):
        readme_path = path / "README.md"
        try:
            readme = readme_path.read_text()
            wanted = updated_readme(readme, render_tables(read_module(path)))
        except (OSError, ValueError) as exc:
            print(f"tf_module_docs: error: {readme_path}: {exc}", file=sys.stderr)
            return 2
        if wanted == readme:
            continue
        if args.check:
            stale.append(readme_path)
        else:
            readme_path.write_text(wanted)
            print(f"updated {readme_path}")
    for path in stale:
        print(
            f"tf_module_docs: {path} is out of date; run python scripts/tf_module_docs.py",
            file=sys.stderr,
        )
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
