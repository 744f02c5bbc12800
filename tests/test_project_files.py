"""The project files agree with each other and with the README:
environment.yml names the same packages as pyproject.toml with all
its extras, jupyter-book is pinned below 2, the README opens with `make book`
and `make test`, and CI runs `make test`."""
from __future__ import annotations

import os
import re
import sys

import pytest

from conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

yaml = pytest.importorskip("yaml")


def _name(req: str) -> str:
    """The normalised distribution name of a requirement (PEP 503)."""
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req).group(1)
    return re.sub(r"[-_.]+", "-", name).lower()


def _spec(req: str) -> str:
    return re.sub(r"\s+", "", req[len(re.match(
        r"\s*[A-Za-z0-9][A-Za-z0-9._-]*", req).group(0)):])


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def pyproject_reqs(pyproject) -> dict[str, str]:
    project = pyproject["project"]
    reqs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    return {_name(r): _spec(r) for r in reqs}


@pytest.fixture(scope="module")
def conda_reqs() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "conda-forge" in env.get("channels", [])
    out = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):            # the pip: section
            assert set(dep) == {"pip"}
            assert any(p.replace(" ", "") in ("-e.", "--editable.")
                       for p in dep["pip"]), "environment.yml installs the package"
            continue
        out[_name(dep)] = _spec(dep)
    return out


def test_pyproject_has_the_required_extras(pyproject):
    project = pyproject["project"]
    assert project["name"] == "warmup_kit"
    assert project["requires-python"].replace(" ", "") == ">=3.10"
    extras = project["optional-dependencies"]
    assert {"mpi", "book", "test"} <= set(extras)
    assert {_name(r) for r in extras["mpi"]} >= {"mpi4py", "mpich"}
    assert {_name(r) for r in extras["test"]} >= {"pytest", "pytest-timeout"}
    assert pyproject["tool"]["setuptools"]["packages"]["find"]["where"] == \
        ["src"]


def test_environment_yml_names_the_same_packages(pyproject_reqs, conda_reqs):
    conda = set(conda_reqs) - {"python", "pip"}
    missing = sorted(set(pyproject_reqs) - conda)
    extra = sorted(conda - set(pyproject_reqs))
    assert not missing, f"in pyproject.toml, not in environment.yml: {missing}"
    assert not extra, f"in environment.yml, not in pyproject.toml: {extra}"


def test_environment_yml_uses_the_same_version_bounds(pyproject_reqs,
                                                      conda_reqs):
    differ = {name: (spec, conda_reqs[name])
              for name, spec in pyproject_reqs.items()
              if name in conda_reqs and spec != conda_reqs[name]}
    assert not differ, f"(pyproject, environment.yml) bounds differ: {differ}"


def test_python_floor_matches(pyproject, conda_reqs):
    assert conda_reqs["python"] == \
        pyproject["project"]["requires-python"].replace(" ", "")


def test_jupyter_book_is_pinned_below_2(pyproject_reqs, conda_reqs):
    for where, reqs in (("pyproject.toml", pyproject_reqs),
                        ("environment.yml", conda_reqs)):
        assert "jupyter-book" in reqs, where
        assert "<2" in reqs["jupyter-book"].split(","), (where, reqs)


def test_pytest_markers_are_declared(pyproject):
    markers = pyproject["tool"]["pytest"]["ini_options"]["markers"]
    names = {m.split(":")[0].strip() for m in markers}
    assert {"mpi", "multiproc"} <= names


def test_readme_opens_with_make_book_and_make_test():
    text = (ROOT / "README.md").read_text()
    head = "\n".join(text.splitlines()[:15])
    for command in ("make book", "make test"):
        assert re.search(rf"^\s*{command}\b", head, re.M), \
            f"the README does not open with `{command}`"


def test_readme_says_how_to_run_the_labs():
    text = (ROOT / "README.md").read_text()
    assert "labs/lab01.py" in text
    assert "--world" in text                      # without MPI
    assert re.search(r"mpi(run|exec) .*-n \d+", text)  # one host
    assert "-hostfile" in text                    # several hosts


def test_makefile_targets():
    text = (ROOT / "Makefile").read_text()
    for target in ("venv", "test", "book"):
        assert re.search(rf"^{target}:", text, re.M), target
    test_recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    assert "pytest" in test_recipe and "tests" in test_recipe
    assert re.search(r"^test:.*\bvenv\b", text, re.M)
    assert re.search(r"^book:.*\bvenv\b", text, re.M)
    assert "jupyter-book build" in text
    # make venv installs the project with every extra from its own files
    assert re.search(r"pip install .*-e \"?\.\[mpi,book,test\]", text)


def test_ci_runs_make_test():
    ci = ROOT / ".ci" / "run"
    assert ci.is_file() and os.access(ci, os.X_OK), ".ci/run is not executable"
    text = ci.read_text()
    assert text.startswith("#!"), ".ci/run needs a shebang line"
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith("#")]
    assert any(re.fullmatch(r"(exec\s+)?make test", line) for line in lines)
