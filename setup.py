"""Ship the top-level `recipes/`, `templates/` and `launchers/` inside the wheel.

They live at the top of the repository (where people look for them) and are copied into
`packcfg/_bundled/` when a wheel is built; `packcfg.resources` finds either location.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUNDLED = ("recipes", "templates", "launchers")


class BuildPyWithBundled(build_py):
    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent
        target = Path(self.build_lib) / "packcfg" / "_bundled"
        for name in BUNDLED:
            src = root / name
            if src.is_dir():
                shutil.copytree(
                    src, target / name, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
                )


setup(cmdclass={"build_py": BuildPyWithBundled})
