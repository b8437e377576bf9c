"""Build hook: ship the Terraform modules and the driver script inside the wheel.

In a source checkout they are read from the repository root; a wheel carries a copy under
`orchestrator/resources/` (see orchestrator/resources.py). Metadata lives in pyproject.toml.
"""

from pathlib import Path
from shutil import copytree, ignore_patterns

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("terraform/modules", "scripts")


class BuildWithResources(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "orchestrator" / "resources"
        for relative in SHIPPED:
            source = Path(relative)
            if source.is_dir():
                copytree(
                    source,
                    target / relative,
                    dirs_exist_ok=True,
                    ignore=ignore_patterns(".terraform*", "*.tfstate*"),
                )


setup(cmdclass={"build_py": BuildWithResources})
