"""Builds libgradagg.so with CMake from the checkout this package sits in (../../) and puts it
inside the package, so an installed `gradagg` loads its own library (gradagg/_lib.py) with no
environment variable. The rest of the metadata is in pyproject.toml.

    GRADAGG_CMAKE_ARGS   extra arguments for the CMake configure step (e.g. -DGA_WITH_CUDA=OFF)
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


class BuildWithLibrary(build_py):
    """build_py, then libgradagg.so built by CMake (target gradagg_shared) copied into the package."""

    def run(self) -> None:
        super().run()
        if not (REPO / "CMakeLists.txt").exists():
            raise RuntimeError(f"gradagg: {REPO} is not a gradagg checkout: the package builds its library from one")
        build = Path(self.build_lib).resolve().parent / "gradagg-cmake"
        configure = ["cmake", "-S", str(REPO), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                     "-DGA_BUILD_TESTS=OFF", "-DGA_BUILD_BENCH=OFF", *shlex.split(os.environ.get("GRADAGG_CMAKE_ARGS", ""))]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "gradagg_shared", "--parallel"], check=True)
        built = build / "client" / "libgradagg.so"
        target = Path(self.build_lib) / "gradagg" / "libgradagg.so"
        shutil.copyfile(built.resolve(), target)  # the real file, not the versioned symlink


class BinaryDistribution(Distribution):
    """The wheel holds a shared library: tagged for this platform, not pure Python."""

    def has_ext_modules(self) -> bool:
        return True


setup(cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
