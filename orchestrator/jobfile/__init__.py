"""The job file, `orch.yaml`: a job declared once for `orch plan`, `orch up` and `orch run`.

- layout.py: every key of the file, the command option it stands for, and its JSON Schema
  (built from the same `Option` declarations the command line uses; docs/orch.schema.json
  is the published copy, kept current by scripts/gen_docs.py).
- load.py: read the YAML, validate it (errors name the key and its line), and turn it into
  each command's option defaults (click's default_map), so command-line flags override it.
- command.py: the click command class of plan/up/run that finds the file (`-f FILE`, else
  ./orch.yaml) before the command line is parsed.
- pairs.py: the rules joining two keys that a typed flag may give instead (one model source,
  checkpoint.dir with its store, ...), judged once the command line is read.
- source.py: which file and revision a plan came from (sha256, git commit).
- example.py: the commented example `orch init` writes.

PyYAML and jsonschema are imported only when a job file is present: `orch plan` without one
pays nothing for them.
"""

from orchestrator.commands.registry import JOB_FILE

__all__ = ["JOB_FILE"]
