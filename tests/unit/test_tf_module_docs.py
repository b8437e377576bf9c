"""scripts/tf_module_docs.py: README tables generated from the modules, and the modules' shape.

The first test is the one that fails when someone edits variables.tf or outputs.tf without
regenerating the README (`python scripts/tf_module_docs.py`).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "tf_module_docs.py"
MODULES = ("aws_gpu", "aliyun_gpu")

_spec = importlib.util.spec_from_file_location("tf_module_docs", SCRIPT)
assert _spec is not None and _spec.loader is not None
docs = importlib.util.module_from_spec(_spec)
sys.modules["tf_module_docs"] = docs  # dataclasses look their module up by name
_spec.loader.exec_module(docs)

# Inputs that mean the same thing in both modules, so they carry the same name (issue 8).
SHARED_INPUTS = {
    "name",
    "owner",
    "expires_at",
    "tags",
    "instance_type",
    "user_data",
    "image_id",
    "image_name_regex",
    "image_owners",
    "root_volume_size",
    "root_volume_type",
    "root_volume_encrypted",
    "create_spot_instance",
    "spot_price",
    "ssh_public_key",
    "ssh_user",
    "ssh_ingress_cidrs",
    "allow_world_ssh",
    "zone_id",
}
SHARED_OUTPUTS = {
    "instance_id",
    "instance_type",
    "public_ip",
    "private_ip",
    "availability_zone",
    "image_id",
    "ssh_user",
    "security_group_id",
    "key_name",
    "vpc_id",
}


def module_path(name: str) -> Path:
    return REPO / "terraform" / "modules" / name


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )


# ------------------------------------------------------------------------------ READMEs


@pytest.mark.parametrize("name", MODULES)
def test_readme_tables_match_the_module(name):
    path = module_path(name)
    readme = (path / "README.md").read_text()
    wanted = docs.updated_readme(readme, docs.render_tables(docs.read_module(path)))
    assert readme == wanted, f"{name}/README.md is stale: run python scripts/tf_module_docs.py"


def test_check_fails_on_a_stale_readme_and_passes_once_regenerated(tmp_path):
    module = tmp_path / "aws_gpu"
    shutil.copytree(module_path("aws_gpu"), module, ignore=shutil.ignore_patterns(".terraform*"))
    assert run_script("--check", str(module)).returncode == 0

    with (module / "variables.tf").open("a") as handle:
        handle.write(
            '\nvariable "extra_knob" {\n  description = "Added without docs."\n'
            "  type        = number\n  default     = 3\n}\n"
        )
    stale = run_script("--check", str(module))
    assert stale.returncode == 1
    assert "README.md is out of date" in stale.stderr

    assert run_script(str(module)).returncode == 0  # regenerate
    assert run_script("--check", str(module)).returncode == 0
    readme = (module / "README.md").read_text()
    assert "| `extra_knob` | Added without docs. | `number` | `3` | no |" in readme
    assert readme.startswith("# aws_gpu")  # the prose outside the markers is kept


def test_a_readme_without_markers_is_an_error(tmp_path):
    module = tmp_path / "m"
    module.mkdir()
    (module / "variables.tf").write_text('variable "a" {\n  type = string\n}\n')
    (module / "README.md").write_text("# m\n")
    result = run_script("--check", str(module))
    assert result.returncode == 2
    assert "BEGIN_TF_DOCS" in result.stderr


# ------------------------------------------------------------------------------ the parser


def test_parser_reads_blocks_attributes_and_nested_blocks():
    text = """
# a comment
variable "cidrs" {
  description = "Blocks {like} \\"these\\" # not a comment"
  type        = list(string) // trailing comment
  default     = [
    "10.0.0.0/8", # inside a list
    "${local.a}/32",
  ]

  validation {
    condition     = alltrue([for c in var.cidrs : can(cidrhost(c, 0))])
    error_message = "bad } brace"
  }
  /* a block
     comment */
  validation { condition = true }
}

resource aws_instance this {
  tags = { "a" = "b", c = "${var.x}-{y}" }
}
"""
    first, second = docs.parse(text)
    assert (first.type, first.labels) == ("variable", ["cidrs"])
    assert docs.decode_string(first.attributes["description"]) == (
        'Blocks {like} "these" # not a comment'
    )
    assert first.attributes["type"] == "list(string)"
    assert (
        first.attributes["default"].startswith("[")
        and "${local.a}/32" in (first.attributes["default"])
    )
    assert [b.type for b in first.blocks] == ["validation", "validation"]
    assert first.blocks[1].attributes == {"condition": "true"}
    assert (second.type, second.labels) == ("resource", ["aws_instance", "this"])
    assert second.attributes["tags"] == '{ "a" = "b", c = "${var.x}-{y}" }'


def test_strings_heredocs_and_escapes_decode_like_terraform():
    (block,) = docs.parse(
        'output "x" {\n'
        "  description = <<-EOT\n"
        "    First line,\n"
        "      indented.\n"
        "    EOT\n"
        '  value = "a"\n'
        "}\n"
    )
    assert docs.decode_string(block.attributes["description"]) == "First line,\n  indented."
    assert docs.decode_string('"tab\\there \\u00e9 $${literal}"') == "tab\there é ${literal}"
    assert docs.is_string_literal('"plain"')
    assert not docs.is_string_literal('"a" == "b"')
    assert not docs.is_string_literal("var.x")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('variable "a" {\n  type = string\n', 1),  # never closed
        ('variable "a" {\n  description = "open\n}\n', 2),  # newline in a string
        ('variable "a" {\n  default = [1, 2\n}\n', 3),  # unbalanced bracket
        ('variable "a" {\n  default =\n}\n', 2),  # no value
        ('variable "a" {\n  type = string\n  type = number\n}\n', 3),  # set twice
        ("a = 1\n", 1),  # attribute outside a block
    ],
)
def test_parser_rejects_broken_hcl_with_a_line_number(text, line):
    with pytest.raises(docs.HclError) as caught:
        docs.parse(text)
    assert caught.value.line == line


def test_a_description_that_is_not_a_literal_is_refused(tmp_path):
    (tmp_path / "variables.tf").write_text('variable "a" {\n  description = var.b\n}\n')
    with pytest.raises(docs.HclError, match="not a string literal"):
        docs.read_module(tmp_path)


def test_table_cells_escape_pipes_and_angle_brackets():
    module = docs.Module(
        Path("."),
        None,
        [],
        [],
        [docs.Variable("a", "x | y <name>", "string", '"|"', 0)],
        [],
    )
    row = next(line for line in docs.render_tables(module).splitlines() if "`a`" in line)
    assert row == '| `a` | x \\| y &lt;name&gt; | `string` | `"\\|"` | no |'


# ------------------------------------------------------------------------------ the modules


@pytest.mark.parametrize("name", MODULES)
def test_every_input_and_output_is_described_and_inputs_are_validated(name):
    module = docs.read_module(module_path(name))
    assert [v.name for v in module.variables if not v.description.strip()] == []
    assert [o.name for o in module.outputs if not o.description.strip()] == []
    # Free-form strings and pure switches need no rule; everything else is checked.
    unchecked = {v.name for v in module.variables if v.validations == 0 and v.type not in ("bool",)}
    assert unchecked <= {"owner", "image_name_filter"}, unchecked
    assert (module_path(name) / "versions.tf").is_file()
    assert module.required_version == ">= 1.9"


def test_shared_knobs_have_one_name_and_one_type_in_both_modules():
    aws = docs.read_module(module_path("aws_gpu"))
    aliyun = docs.read_module(module_path("aliyun_gpu"))
    aws_vars = {v.name: v for v in aws.variables}
    aliyun_vars = {v.name: v for v in aliyun.variables}
    assert set(aws_vars) & set(aliyun_vars) >= SHARED_INPUTS
    for name in SHARED_INPUTS - {"image_owners"}:  # AWS: owner accounts; ECS: one alias
        assert aws_vars[name].type == aliyun_vars[name].type, name
    assert {o.name for o in aws.outputs} & {o.name for o in aliyun.outputs} >= SHARED_OUTPUTS


@pytest.mark.parametrize("name", MODULES)
def test_one_resource_of_a_kind_is_named_this(name):
    module = docs.read_module(module_path(name))
    kinds = [kind for _, kind, _ in module.resources]
    for mode, kind, label in module.resources:
        if kinds.count(kind) == 1 and kind != "alicloud_security_group_rule":
            assert label == "this", f"{mode} {kind}.{label}"


def test_renamed_aws_resources_have_moved_blocks():
    blocks = docs.parse((module_path("aws_gpu") / "migrations.tf").read_text())
    moves = {(b.attributes["from"], b.attributes["to"]) for b in blocks if b.type == "moved"}
    assert moves == {
        ("aws_security_group.box", "aws_security_group.this"),
        ("aws_key_pair.box", "aws_key_pair.this"),
        ("aws_instance.box", "aws_instance.this"),
        ("aws_instance.this", "aws_instance.this[0]"),  # node_count: one box is node 0
    }


@pytest.mark.parametrize("name", MODULES)
def test_each_module_has_examples_calling_it(name):
    examples = sorted((module_path(name) / "examples").glob("*/main.tf"))
    assert len(examples) >= 2
    for main in examples:
        (call,) = [b for b in docs.parse(main.read_text()) if b.type == "module"]
        assert docs.decode_string(call.attributes["source"]) == "../.."
