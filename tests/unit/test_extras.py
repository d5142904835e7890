"""Installable extras: the base install is the control plane, each framework is an extra named
after it, and whatever is missing is said with the extra that installs it.

A real fresh install (`pip install '.[onnxruntime]'` into a new virtualenv) is exercised in
tests/e2e/test_fresh_install.py; here the declarations are read and the error paths run with
the missing modules hidden from the importing process.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import setuptools
from packaging.requirements import Requirement

from services.workers.availability import not_installed
from shared.config import REPOSITORY_ROOT
from shared.errors import ConfigurationError
from shared.measurement import SingleStream
from shared.measurement.loadgen import run_loadgen
from shared.messages import FRAMEWORKS

PROJECT: dict[str, Any] = tomllib.loads((REPOSITORY_ROOT / "pyproject.toml").read_text())["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]

# The distribution that brings each framework's module.
FRAMEWORK_PACKAGES = {
    "onnxruntime": "onnxruntime",
    "pytorch": "torch",
    "tensorflow": "tensorflow-cpu",
    "opencl": "pyopencl",
    "tensorrt": "tensorrt",
    # A served model's worker: its tokenizer counts the tokens (HTTP is the base's).
    "endpoint": "tokenizers",
}
# What the control plane must not pull in: frameworks and what only workers use.
WORKER_ONLY = {
    *FRAMEWORK_PACKAGES.values(),
    "tensorflow",
    "onnx",
    "onnxscript",
    "pocl-binary-distribution",
    "mlcommons-loadgen",
    "scikit-learn",
    "scikit-image",
}
# Their modules, hidden from a process to show it does not import them.
WORKER_MODULES = (
    "torch",
    "tensorflow",
    "onnxruntime",
    "onnx",
    "onnxscript",
    "pyopencl",
    "tensorrt",
    "mlperf_loadgen",
    "sklearn",
    "skimage",
)


def names(requirements: list[str]) -> set[str]:
    return {Requirement(r).name.lower() for r in requirements}


def flattened(extra: str) -> set[str]:
    """The distributions ``dlscope[extra]`` installs beyond the base, self-references followed."""
    found: set[str] = set()
    for text in EXTRAS[extra]:
        requirement = Requirement(text)
        if requirement.name == "dlscope":
            for inner in requirement.extras:
                found |= flattened(inner)
        else:
            found.add(requirement.name.lower())
    return found


def test_the_base_install_is_the_control_plane_without_any_framework() -> None:
    assert not names(PROJECT["dependencies"]) & WORKER_ONLY


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_framework_has_an_extra_named_after_it(framework: str) -> None:
    assert FRAMEWORK_PACKAGES[framework] in flattened(framework)
    # What every worker needs besides its framework comes with it.
    assert {"scikit-learn", "scikit-image"} <= flattened(framework)


def test_frameworks_are_pinned_exactly_and_torch_as_this_machine_provides_it() -> None:
    for extra in FRAMEWORKS:
        for text in EXTRAS[extra]:
            requirement = Requirement(text)
            if requirement.name.lower() in FRAMEWORK_PACKAGES.values():
                assert str(requirement.specifier).startswith("=="), text
    # A plain or open-ended torch pulls several GB of CUDA packages (ENVIRONMENT.md).
    assert "torch==2.13.0" in EXTRAS["pytorch"]


def test_all_is_every_installable_framework_loadgen_and_the_zoo() -> None:
    everything = flattened("all")
    for extra in ("onnxruntime", "pytorch", "tensorflow", "opencl", "loadgen", "zoo"):
        assert flattened(extra) <= everything, extra
    # TensorRT downloads from NVIDIA's index at install time and needs CUDA: opt-in only.
    assert "tensorrt" not in everything


def images_requirements() -> Any:
    """deploy/requirements.py, what the images install before copying the source."""
    spec = importlib.util.spec_from_file_location(
        "images_requirements", REPOSITORY_ROOT / "deploy" / "requirements.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("extra", sorted(set(EXTRAS) - {"dev"}))
def test_the_images_install_exactly_what_pip_would_for_an_extra(extra: str) -> None:
    listed = images_requirements().requirements([extra], PROJECT)
    assert len(listed) == len(set(listed))
    assert names(listed) == names(PROJECT["dependencies"]) | flattened(extra)


def test_the_images_requirements_refuse_an_unknown_extra() -> None:
    with pytest.raises(SystemExit, match="no extra 'caffe'"):
        images_requirements().requirements(["caffe"], PROJECT)


def test_make_installs_everything_so_make_run_and_make_test_work() -> None:
    makefile = (REPOSITORY_ROOT / "Makefile").read_text()
    assert "pip install --quiet --disable-pip-version-check -e '.[all,dev]'" in makefile


def hiding(modules: tuple[str, ...]) -> str:
    """Python that makes ``modules`` absent for the rest of the process: ``find_spec`` finds
    nothing and ``import`` fails, as when they are not installed."""
    return f"import sys; sys.modules.update(dict.fromkeys({modules!r}))\n"


def python(code: str, *arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *arguments],
        capture_output=True,
        text=True,
        cwd=REPOSITORY_ROOT,
        timeout=120,
    )


def test_the_control_plane_and_the_cli_import_no_framework() -> None:
    result = python(
        hiding(WORKER_MODULES)
        + "import dlscope.cli, dlscope.embedded, services.workers.main\n"
        + "".join(
            f"import services.{name}.main\n"
            for name in ("gateway", "scheduler", "registry", "recorder", "analyzer")
        )
        + "from services.gateway import create_app\n"
    )
    assert result.returncode == 0, result.stderr


def hidden(monkeypatch: pytest.MonkeyPatch, *modules: str) -> Callable[[str, str | None], object]:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> object:
        return None if name in modules else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    return find_spec


def test_a_missing_framework_is_named_with_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hidden(monkeypatch, "tensorflow")
    assert not_installed("tensorflow") == (
        "framework 'tensorflow' is not installed here (no module 'tensorflow'): "
        "pip install 'dlscope[tensorflow]'"
    )


def test_a_worker_without_its_datasets_is_sent_to_its_framework_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hidden(monkeypatch, "sklearn")
    why = not_installed("pytorch")
    assert why is not None
    assert "no module 'sklearn'" in why
    assert why.endswith("pip install 'dlscope[pytorch]'")


def test_an_unknown_framework_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="no predictor for framework 'caffe'"):
        not_installed("caffe")


def test_the_loadgen_driver_without_loadgen_names_its_extra_before_any_query(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "mlperf_loadgen", None)
    queries: list[object] = []
    with pytest.raises(ConfigurationError, match=r"pip install 'dlscope\[loadgen\]'"):
        run_loadgen(SingleStream(), queries.append, output_dir=tmp_path)
    assert not queries


def test_building_the_zoo_without_torch_names_the_zoo_extra(tmp_path: Path) -> None:
    result = python(
        hiding(("torch",))
        + "from dlscope.cli import main; sys.argv = ['dlscope', *sys.argv[1:]]; main()\n",
        "zoo",
        "build",
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 1
    assert "torch is not installed here: pip install 'dlscope[zoo]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_wheel_ships_the_product_and_not_its_test_harness() -> None:
    found = tomllib.loads((REPOSITORY_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = setuptools.find_packages(
        str(REPOSITORY_ROOT), include=found["packages"]["find"]["include"]
    )
    assert {"dlscope", "services", "shared"} <= set(packages)
    assert not [name for name in packages if name.split(".")[0] in ("harness", "tests", "bench")]
