"""The package's layers, enforced: dependencies point one way (DESIGN.md).

Every ``import`` in ``src/warmup_kit`` (module level or inside a function)
is read with :mod:`ast`; a rule names a layer and what it must not import.
"""
import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
CORE = {"warmup_kit.schedule", "warmup_kit.ops", "warmup_kit.errors",
        "warmup_kit.units", "warmup_kit.textfit"}


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted((SRC / "warmup_kit").rglob("*.py")):
        parts = p.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _imports(name: str) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import in ``name``."""
    path = MODULES[name]
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            names = [a.name for a in node.names]
            subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES]
            out.append((base, [n for n in names
                               if f"{base}.{n}" not in MODULES]))
            out += [(s, []) for s in subs]
    return out


def _inside(mod: str, layer: str) -> bool:
    return mod == layer or mod.startswith(layer + ".")


#: what draws never imports: a transport, the collectives, an executor, a
#: runner of ranks
VIZ_NEVER = ("warmup_kit.comm", "warmup_kit.cluster", "warmup_kit.collectives",
             "warmup_kit.execute", "warmup_kit.run", "warmup_kit.bench",
             "warmup_kit.train.run", "warmup_kit.train.ddp",
             "warmup_kit.train.fsdp", "warmup_kit.train.check", "mpi4py")


def _runtime(m: str, pkg: str) -> bool:
    """``m`` is in ``pkg`` but not in its pure models (``pkg.models``)."""
    return _inside(m, pkg) and not _inside(m, pkg + ".models")


# (layer, what it must not import)
RULES = [
    ("warmup_kit.algorithms", lambda m: _inside(m, "warmup_kit")
     and m not in CORE and not _inside(m, "warmup_kit.algorithms")),
    ("warmup_kit.comm", lambda m: any(_inside(m, x) for x in (
        "warmup_kit.execute", "warmup_kit.algorithms",
        "warmup_kit.collectives", "warmup_kit.model", "warmup_kit.viz",
        "warmup_kit.cluster", "warmup_kit.run"))),
    # the emulated cluster builds hosts and starts jobs on them: it may use
    # the transports' launchers, never what runs inside the ranks
    ("warmup_kit.cluster", lambda m: any(_inside(m, x) for x in (
        "warmup_kit.execute", "warmup_kit.algorithms",
        "warmup_kit.collectives", "warmup_kit.model", "warmup_kit.viz",
        "warmup_kit.train", "warmup_kit.parallelism", "mpi4py"))),
    ("warmup_kit.execute", lambda m: any(_inside(m, x) for x in (
        "warmup_kit.algorithms", "warmup_kit.collectives", "warmup_kit.model",
        "warmup_kit.viz", "mpi4py"))),
    ("warmup_kit.model", lambda m: any(_inside(m, x) for x in (
        "warmup_kit.comm", "warmup_kit.cluster", "warmup_kit.run",
        "warmup_kit.execute", "warmup_kit.collectives",
        "warmup_kit.parallelism", "warmup_kit.measure", "warmup_kit.bench",
        "warmup_kit.viz", "mpi4py"))),
    ("warmup_kit.parallelism", lambda m: any(_inside(m, x) for x in (
        "warmup_kit.comm", "warmup_kit.execute", "warmup_kit.collectives",
        "warmup_kit.measure", "warmup_kit.bench", "warmup_kit.viz",
        "mpi4py"))),
    # the training job runs on any communicator, from the public calls
    ("warmup_kit.train", lambda m: any(_inside(m, x) for x in (
        "warmup_kit.execute", "warmup_kit.model", "warmup_kit.parallelism",
        "warmup_kit.viz", "mpi4py"))),
    # the analysis of the training runs reads their records: no ranks
    ("warmup_kit.train.analysis", lambda m: any(_inside(m, x) for x in (
        "warmup_kit.comm", "warmup_kit.cluster", "warmup_kit.collectives",
        "warmup_kit.execute", "warmup_kit.run", "warmup_kit.train.run",
        "warmup_kit.train.ddp", "warmup_kit.train.fsdp",
        "warmup_kit.train.check", "mpi4py"))),
    # the plots draw models and stored records, never what runs on ranks
    ("warmup_kit.viz", lambda m: any(_inside(m, x) for x in VIZ_NEVER)
     or _runtime(m, "warmup_kit.failures")
     or _runtime(m, "warmup_kit.serving")),
    # failures run on any communicator (MPI through MPIComm, never mpi4py)
    ("warmup_kit.failures", lambda m: any(_inside(m, x) for x in (
        "warmup_kit.execute", "warmup_kit.measure", "warmup_kit.bench",
        "warmup_kit.viz", "mpi4py"))),
    # the failure models are models: no transport, no training job, nothing
    # of failures/ that runs on ranks
    ("warmup_kit.failures.models", lambda m: any(_inside(m, x) for x in (
        "warmup_kit.comm", "warmup_kit.cluster", "warmup_kit.collectives",
        "warmup_kit.execute", "warmup_kit.run", "warmup_kit.train",
        "mpi4py")) or _runtime(m, "warmup_kit.failures")),
]


# the doctor reads logs and asks the model: it never starts ranks, builds
# a cluster, runs a collective or imports MPI
RULES += [
    ("warmup_kit.doctor", lambda m: any(_inside(m, x) for x in (
        "warmup_kit.comm", "warmup_kit.cluster", "warmup_kit.run",
        "warmup_kit.execute", "warmup_kit.collectives", "warmup_kit.bench",
        "warmup_kit.train", "warmup_kit.failures", "warmup_kit.serving",
        "warmup_kit.viz", "mpi4py"))),
]

# Chapter 9's serving package keeps its model (serving/models/) apart from
# what runs on a communicator (the rest of serving/), as failures/ does.
RULES += [
    # the cost model, the shapes, routing and the numpy toy: no transport,
    # no measurement, nothing that runs on ranks
    ("warmup_kit.serving.models", lambda m: any(_inside(m, x) for x in (
        "warmup_kit.comm", "warmup_kit.cluster", "warmup_kit.collectives",
        "warmup_kit.execute", "warmup_kit.run", "warmup_kit.train",
        "warmup_kit.measure", "warmup_kit.bench", "warmup_kit.viz",
        "mpi4py")) or _runtime(m, "warmup_kit.serving")),
    # the runs: public collectives on any communicator, never the GPU model
    ("warmup_kit.serving (runs)", lambda m: any(_inside(m, x) for x in (
        "warmup_kit.execute", "warmup_kit.model", "warmup_kit.parallelism",
        "warmup_kit.viz", "mpi4py"))),
]
# The graders (chapter exercises, success-criteria self-checks) grade with
# models only: they run in any notebook, without MPI, ranks or widgets. An
# allow-list, so a new transport or runner is forbidden without a new rule.
GRADER_MODELS = ("warmup_kit.algorithms", "warmup_kit.model",
                 "warmup_kit.parallelism", "warmup_kit.failures.models",
                 "warmup_kit.serving.models")


def _grader_may_import(m: str, own: str, extra: tuple[str, ...]) -> bool:
    if _inside(m, "mpi4py"):
        return False
    if not _inside(m, "warmup_kit"):
        return True                  # the standard library, numpy
    return m in CORE or any(_inside(m, x)
                            for x in (own,) + GRADER_MODELS + extra)


RULES += [
    # the step timeline and the bucket assignment are the training models
    ("warmup_kit.exercises", lambda m: not _grader_may_import(
        m, "warmup_kit.exercises",
        ("warmup_kit.train.timeline", "warmup_kit.train.buckets"))),
    # the self-checks share the exercises' Result and validators; a real
    # run is graded from measure.lab's rows; nothing of train/
    ("warmup_kit.selfcheck", lambda m: not _grader_may_import(
        m, "warmup_kit.selfcheck",
        ("warmup_kit.exercises.result", "warmup_kit.measure.lab"))),
]
#: a layer that is a package less its models
_MEMBERS = {"warmup_kit.serving (runs)":
            lambda n: _runtime(n, "warmup_kit.serving")}


def _in_layer(name: str, layer: str) -> bool:
    return _MEMBERS[layer](name) if layer in _MEMBERS else _inside(name,
                                                                   layer)


@pytest.mark.parametrize("layer,forbidden", RULES, ids=[r[0] for r in RULES])
def test_layer_imports_only_below(layer, forbidden):
    bad = [f"{name} imports {mod}" for name in MODULES
           if _in_layer(name, layer)
           for mod, _ in _imports(name) if forbidden(mod)]
    assert not bad, "\n".join(bad)


def test_nothing_below_viz_imports_viz():
    above = ("warmup_kit.viz",)
    bad = [f"{name} imports {mod}" for name in MODULES
           if not any(_inside(name, a) for a in above)
           for mod, _ in _imports(name) if _inside(mod, "warmup_kit.viz")]
    assert not bad, "\n".join(bad)


def test_mpi4py_is_imported_lazily():
    """mpi4py only inside functions, so the model and the book run without
    MPI installed."""
    bad = []
    for name, path in MODULES.items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = ([a.name for a in node.names]
                        if isinstance(node, ast.Import) else [node.module])
                bad += [name for m in mods if m and _inside(m, "mpi4py")]
    assert not bad


def test_no_private_names_taken_from_another_module():
    bad = [f"{name}: from {mod} import {n}" for name in MODULES
           for mod, names in _imports(name) if _inside(mod, "warmup_kit")
           and mod != name for n in names
           if n.startswith("_") and not n.startswith("__")]
    assert not bad, "\n".join(bad)


def test_no_import_cycles():
    graph = {name: {m for m, _ in _imports(name) if m in MODULES and m != name
                    and not _inside(name, m)}    # a package's own __init__
             for name in MODULES}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycle = path[path.index(m):] + [m]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if m not in state:
                visit(m)
        path.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)


def test_the_rules_see_the_imports():
    """The walk finds known edges (so an empty violation list means
    something)."""
    assert ("warmup_kit.schedule", ["Schedule", "Transfer"]) in \
        _imports("warmup_kit.algorithms.tree") or any(
            m == "warmup_kit.schedule" for m, _ in
            _imports("warmup_kit.algorithms.tree"))
    assert any(m == "warmup_kit.model.hardware"
               for m, _ in _imports("warmup_kit.model.nccl"))
    assert any(m == "warmup_kit.failures.board"
               for m, _ in _imports("warmup_kit.failures.watchdog"))
    assert any(m == "warmup_kit.failures.models.goodput"
               for m, _ in _imports("warmup_kit.exercises.goodput"))
    assert any(m == "warmup_kit.exercises.result"
               for m, _ in _imports("warmup_kit.selfcheck.algorithms"))
    assert any(m == "warmup_kit.train.analysis"
               for m, _ in _imports("warmup_kit.viz.plots_overlap"))
    assert any(m == "warmup_kit.collectives"
               for m, _ in _imports("warmup_kit.train.run"))


@pytest.mark.parametrize("layer,banned", [
    ("warmup_kit.exercises", ("mpi4py", "warmup_kit.comm",
                              "warmup_kit.execute", "warmup_kit.collectives",
                              "warmup_kit.measure.fit", "warmup_kit.bench",
                              "warmup_kit.viz", "warmup_kit.train.ddp",
                              "warmup_kit.train.fsdp", "warmup_kit.train.run",
                              "warmup_kit.failures.board",
                              "warmup_kit.serving.run",
                              "warmup_kit.selfcheck")),
    ("warmup_kit.selfcheck", ("mpi4py", "warmup_kit.comm",
                              "warmup_kit.execute", "warmup_kit.viz",
                              "warmup_kit.collectives", "warmup_kit.train",
                              "warmup_kit.train.timeline",
                              "warmup_kit.exercises.costs"))])
def test_grader_rules_forbid_the_runners(layer, banned):
    """The graders' allow-lists reject every transport, runner and widget
    module the graders must never need."""
    forbidden = dict(RULES)[layer]
    assert all(forbidden(m) for m in banned), \
        [m for m in banned if not forbidden(m)]
    assert not any(forbidden(m) for m in (
        "warmup_kit.model.costs", "warmup_kit.failures.models.goodput",
        "warmup_kit.serving.models.kv_cache"))


@pytest.mark.parametrize("pkg,runtime", [
    ("warmup_kit.failures", ("warmup_kit.failures.board",
                             "warmup_kit.failures.watchdog",
                             "warmup_kit.failures.lab",
                             "warmup_kit.failures.checkpoint")),
    ("warmup_kit.serving", ("warmup_kit.serving.tp_decode",
                            "warmup_kit.serving.moe_layer",
                            "warmup_kit.serving.handoff",
                            "warmup_kit.serving.run"))])
def test_models_packages_hold_their_models_apart(pkg, runtime):
    """``pkg.models`` has modules, and its rule (and the plots') forbids what
    of ``pkg`` runs on ranks while allowing the models themselves."""
    models = [n for n in MODULES if _inside(n, pkg + ".models")
              and n != pkg + ".models"]
    assert models
    assert all(m in MODULES for m in runtime)
    for layer in (pkg + ".models", "warmup_kit.viz"):
        forbidden = dict(RULES)[layer]
        assert all(forbidden(m) for m in runtime), layer
        assert not any(forbidden(m) for m in models), layer


def test_the_zero_copy_executor_uses_only_its_named_interface():
    """execute/shm.py talks to a shared-memory rank only through
    comm.shm.ZeroCopyComm: every ``comm.<name>`` it reads is a member of
    that protocol, and every name it imports from comm.shm is the protocol
    or one of the control fields it may read (ZERO_COPY_FIELDS)."""
    from warmup_kit.comm import shm
    members = set(shm.ZeroCopyComm.__annotations__) | {
        n for n in vars(shm.ZeroCopyComm) if not n.startswith("_")}
    tree = ast.parse(MODULES["warmup_kit.execute.shm"].read_text())
    used = {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name) and node.value.id == "comm"}
    assert used and used <= members, used - members
    fields = {n for n in ("DONE", "READ", "PID", "WAIT", "BUF_OFF",
                          "SRC_OFF", "EXITED", "FP", "BEAT", "BLAME", "CALL")
              if getattr(shm, n) in shm.ZERO_COPY_FIELDS}
    taken = {n for mod, names in _imports("warmup_kit.execute.shm")
             if mod == "warmup_kit.comm.shm" for n in names}
    assert taken <= fields | {"ZeroCopyComm"}, taken - fields
