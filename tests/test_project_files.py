"""The project files agree with each other and with the README: the lock
pins every requirement of pyproject.toml within its bounds, `make venv` and
environment.yml both install from it, jupyter-book stays below 2, the README
opens with `make book` and `make test`, and CI runs `make test`."""
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
def conda_env() -> dict:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "conda-forge" in env.get("channels", [])
    return env


@pytest.fixture(scope="module")
def lock() -> dict[str, str]:
    """requirements.lock: normalised name -> pinned version."""
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and version, f"not a pin: {line!r}"
        pins[_name(name)] = version
    return pins


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


def test_lock_pins_every_requirement_within_its_bounds(pyproject_reqs, lock):
    from packaging.specifiers import SpecifierSet
    missing = sorted(set(pyproject_reqs) - set(lock))
    assert not missing, f"in pyproject.toml, not pinned in the lock: {missing}"
    outside = {n: (spec, lock[n]) for n, spec in pyproject_reqs.items()
               if not SpecifierSet(spec).contains(lock[n], prereleases=True)}
    assert not outside, f"(pyproject bound, locked version): {outside}"
    assert _name("warmup_kit") not in lock, "the project itself is not pinned"


def test_lock_was_resolved_on_the_python_it_names():
    head = (ROOT / "requirements.lock").read_text().splitlines()[:3]
    said = re.search(r"Python (\d+\.\d+)", " ".join(head))
    assert said, "the lock's header names the Python it was resolved on"
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert f"python={said.group(1)}" in env["dependencies"]


def test_environment_yml_installs_from_the_lock(conda_env):
    pip = [d for d in conda_env["dependencies"] if isinstance(d, dict)]
    assert len(pip) == 1 and set(pip[0]) == {"pip"}
    lines = [p.replace(" ", "") for p in pip[0]["pip"]]
    assert "-crequirements.lock" in lines
    assert "-e.[mpi,book,test]" in lines, "every extra, as make venv does"
    conda = [d for d in conda_env["dependencies"] if isinstance(d, str)]
    assert {_name(d) for d in conda} == {"python", "pip"}, \
        "everything else comes from the lock, or the two would drift"


def test_jupyter_book_is_pinned_below_2(pyproject_reqs, lock):
    assert "<2" in pyproject_reqs["jupyter-book"].split(",")
    assert int(lock["jupyter-book"].split(".")[0]) < 2


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
    # make test runs tools/test_stages.py, whose stages are every check
    test_recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    assert "tools/test_stages.py" in test_recipe
    stages = (ROOT / "tools" / "test_stages.py").read_text()
    for stage in ('"pytest", "-q", "tests"', '"--nbval", "book"',
                  '"book"]', '"check-site"]', '"check-lab",'):
        assert stage in stages, stage
    # the lab check's shards, together, check every notebook once
    assert "LAB_SHARD={i}/{LAB_SHARDS}" in stages
    assert "$(if $(LAB_SHARD),--shard $(LAB_SHARD))" in text
    assert re.search(r"^test:.*\bvenv\b", text, re.M)
    assert re.search(r"^book:.*\bvenv\b", text, re.M)
    assert "jupyter-book build" in text
    # make venv installs the project with every extra from its own files,
    # at the locked versions, and `make lock` refreshes the lock
    assert re.search(r"pip install .*-c \$\(LOCK\) -e \"?\.\[mpi,book,test\]",
                     text)
    assert re.search(r"^lock:", text, re.M)


def test_ci_runs_make_test():
    ci = ROOT / ".ci" / "run"
    assert ci.is_file() and os.access(ci, os.X_OK), ".ci/run is not executable"
    text = ci.read_text()
    assert text.startswith("#!"), ".ci/run needs a shebang line"
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith("#")]
    assert any(re.fullmatch(r"(exec\s+)?make test", line) for line in lines)


DOCS = ["README.md", "docs/DESIGN.md", "docs/CONTRIBUTING.md"]


@pytest.mark.parametrize("doc", DOCS)
def test_docs_point_only_inside_the_clone(doc):
    path = ROOT / doc
    text = path.read_text()
    assert "../shared" not in text, f"{doc} points outside the repository"
    for target in re.findall(r"\]\(([^)#\s]+)\)", text):
        if "://" in target:
            continue
        assert (path.parent / target).exists(), f"{doc}: broken link {target}"
    # every repository path named in backticks exists
    for name in re.findall(r"`((?:src|tests|labs|tools|book|benchmarks|docs)"
                           r"/[\w./-]+)`", text):
        if "NN" in name or "NAME" in name:
            continue                              # placeholders
        assert (ROOT / name).exists(), f"{doc} names {name}, which is missing"


def test_readme_examples_write_into_results_not_the_root():
    text = (ROOT / "README.md").read_text()
    for flag in ("--json", "--plot", "--csv"):
        for target in re.findall(rf"{flag} (\S+\.\w+)", text):
            assert target.startswith("results/"), (flag, target)
    assert "results/" in (ROOT / ".gitignore").read_text().split()


# -- the README's and CONTRIBUTING's commands exist ----------------------

def _code(text: str) -> list[str]:
    """The fenced code blocks and the inline code spans of a Markdown
    text (where commands are written; prose may say "make sure")."""
    fences = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S)
    rest = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
    return fences + re.findall(r"`([^`\n]+)`", rest)


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][\w-]*):", text, re.M))


@pytest.mark.parametrize("doc", ["README.md", "docs/CONTRIBUTING.md"])
def test_docs_name_only_make_targets_that_exist(doc):
    named = {t for code in _code((ROOT / doc).read_text())
             for t in re.findall(r"\bmake ([a-z][\w-]*)", code)}
    if doc == "README.md":
        assert {"book", "test"} <= named
    missing = named - _make_targets()
    assert not missing, f"{doc} names make targets the Makefile lacks: " \
        f"{sorted(missing)}"


def test_readme_opens_with_exactly_the_two_commands():
    text = (ROOT / "README.md").read_text()
    first = re.search(r"^```[^\n]*\n(.*?)^```", text, re.M | re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first.splitlines()
                if line.split("#")[0].strip()]
    assert commands == ["make book", "make test"]


def test_readme_commands_name_files_and_modules_that_exist():
    import importlib.util
    fences = re.findall(r"^```bash\n(.*?)^```", (ROOT / "README.md")
                        .read_text(), re.M | re.S)
    text = "\n".join(fences)
    paths = set(re.findall(r"(?<![\w/.])((?:labs|benchmarks|tools|src)"
                           r"/[\w./-]+\.py)", text))
    assert "labs/lab01.py" in paths
    for path in sorted(paths):
        assert (ROOT / path).is_file(), f"README runs {path}, which is missing"
    modules = set(re.findall(r"-m ([\w.]+)", text)) - {"mpi4py"}
    assert "warmup_kit.bench" in modules
    for mod in sorted(modules):
        assert importlib.util.find_spec(mod) is not None, \
            f"README runs -m {mod}, which does not import"


def test_readme_shows_the_site_picture_and_make_redraws_it():
    text = (ROOT / "README.md").read_text()
    assert re.search(r"!\[[^\]]+\]\(docs/site\.png\)", text)
    png = ROOT / "docs" / "site.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size < 300 * 1024, "keep the README's picture small"
    recipe = re.search(r"^site-picture:.*\n((?:\t.*\n)+)",
                       (ROOT / "Makefile").read_text(), re.M).group(1)
    assert "tools/site_picture.py" in recipe and "docs/site.png" in recipe


def test_book_and_check_site_targets_run_the_site_tools():
    text = (ROOT / "Makefile").read_text()

    def recipe(target):
        return re.search(rf"^{target}:.*\n((?:\t.*\n)+)", text, re.M).group(1)
    assert "tools/notebook_times.py" in recipe("book")
    assert "tools/check_links.py" in recipe("check-site")
    assert "tools/check_site.py" in recipe("check-site")
    for tool in ("notebook_times", "check_links", "check_site",
                 "site_picture"):
        assert (ROOT / "tools" / f"{tool}.py").is_file()


def test_readme_names_the_repository_setting_and_says_it_is_a_placeholder():
    """The launch buttons point at _config.yml's repository.url; the README
    must say which URL that is, and that it is not a published one."""
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    url = cfg["repository"]["url"]
    text = (ROOT / "README.md").read_text()
    assert "`repository.url`" in text and url in text
    near = text[max(0, text.index(url) - 300):text.index(url) + 300]
    if "your-org" in url:
        assert "placeholder" in near.lower()
    lb = cfg["launch_buttons"]
    assert lb.get("binderhub_url") and lb.get("colab_url") \
        and lb.get("jupyterhub_url")
