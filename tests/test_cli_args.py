"""Every command line refuses a bad argument before doing any work: a
one-line ``error:`` message (after argparse's usage), exit status 2, no
traceback, and quickly.

Entry points with a ``main(argv)`` run in-process (argparse's
``SystemExit`` caught); a few run as subprocesses, the way people type
them, to check the same from the outside (the environment-variable cases
must: they are read when the parser is built).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import os
import subprocess
import time

import pytest

from conftest import PYTHON, ROOT

#: a bad argument is refused in far less than any work takes (a cluster
#: build took ~50 s, a sweep seconds); in-process, parsing is milliseconds
QUICK_S = 3.0


def _load(path: str):
    spec = importlib.util.spec_from_file_location(
        "cli_" + path.replace("/", "_").removesuffix(".py"), ROOT / path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _main(name: str):
    if name.endswith(".py"):
        return _load(name).main
    return importlib.import_module(name).main



# (entry point, bad arguments); every case the issue names, plus our own
CASES = [
    ("warmup_kit.cluster.__main__", ["up", "--nodes", "0"]),
    ("warmup_kit.cluster.__main__", ["up", "--nodes", "65"]),
    ("warmup_kit.cluster.__main__", ["up", "--nodes", "two"]),
    ("warmup_kit.cluster.__main__", ["up", "--ranks-per-node", "0"]),
    ("warmup_kit.cluster.__main__", ["up", "--link", "99999999tbit"]),
    ("warmup_kit.cluster.__main__", ["up", "--link", "fast"]),
    ("warmup_kit.cluster.__main__", ["up", "--hostfile", "/no/such/dir/h"]),
    ("warmup_kit.cluster.__main__", ["down", "--wait", "-1"]),
    ("warmup_kit.cluster.__main__", ["exec", "node1"]),
    ("warmup_kit.bench", ["-d", "bogus"]),
    ("warmup_kit.bench", ["-e", "100T"]),
    ("warmup_kit.bench", ["-b", "3", "-e", "5"]),
    ("warmup_kit.bench", ["-b", "1M", "-e", "1K"]),
    ("warmup_kit.bench", ["-n", "0"]),
    ("warmup_kit.bench", ["-w", "-1"]),
    ("warmup_kit.bench", ["--passes", "0"]),
    ("warmup_kit.bench", ["--world", "0"]),
    ("warmup_kit.bench", ["--world", "2", "-r", "2"]),
    ("warmup_kit.bench", ["--timeout", "-1"]),
    ("warmup_kit.bench", ["-d", "bool"]),
    ("labs/lab01.py", ["--timeout", "-5"]),
    ("labs/lab01.py", ["--fail-step", "99"]),
    ("labs/lab01.py", ["--watchdog", "0"]),
    ("labs/lab01.py", ["--iters", "-1"]),
    ("labs/lab01.py", ["--world", "0"]),
    ("labs/lab01.py", ["--size", "0"]),
    ("labs/lab01.py", ["--size", "12"]),
    ("labs/lab01.py", ["--steps", "0"]),
    ("labs/lab01.py", ["--algorithm", "nope"]),
    ("labs/lab02.py", ["--system", "nope"]),
    ("labs/lab02.py", ["--emulated", "later"]),
    ("labs/lab02.py", ["--nic", "3x100G"]),
    ("labs/lab02.py", ["--nic", "fast"]),
    ("benchmarks/targets.py", ["--ranks", "0"]),
    ("benchmarks/targets.py", ["--iters", "0"]),
    ("benchmarks/targets.py", ["--shm-passes", "-1"]),
    ("benchmarks/model_speed.py", ["--repeat", "0"]),
    ("benchmarks/cluster.py", ["--sizes", "garbage"]),
    ("benchmarks/cluster.py", ["--sizes", ","]),
    ("benchmarks/cluster.py", ["--nodes", "1"]),
    ("benchmarks/cluster.py", ["--link", "99999999tbit"]),
    ("benchmarks/cluster.py", ["--reps", "0"]),
    ("benchmarks/overlap.py", ["--ranks", "0"]),
    ("benchmarks/overlap.py", ["--steps", "0"]),
    ("benchmarks/serving.py", ["--ranks", "1"]),
    ("benchmarks/partition.py", ["--nbytes", "lots"]),
    ("benchmarks/partition.py", ["--timeout", "0"]),
    ("benchmarks/partition.py", ["--link", "1bit"]),
    ("benchmarks/partition.py", ["--algorithm", "warp"]),
    ("warmup_kit.failures.goodput_cli", ["--reps", "0"]),
    ("warmup_kit.measure.crossover", ["--ranks", "1", "--out", "x.json"]),
    ("warmup_kit.measure.fit", ["x.json", "--min-bytes", "-1"]),
    ("warmup_kit.run", ["--timeout", "-1", "labs/lab01.py"]),
    ("warmup_kit.run", ["--master-port", "99999", "labs/lab01.py"]),
    ("warmup_kit.run", ["--master-port", "0", "labs/lab01.py"]),
    ("warmup_kit.run", ["--master-addr", "no-such-host.invalid",
                        "labs/lab01.py"]),
    ("warmup_kit.run", ["--nnodes", "0", "labs/lab01.py"]),
    ("warmup_kit.run", ["--nproc-per-node", "0", "labs/lab01.py"]),
    ("warmup_kit.run", ["--rdzv-timeout", "nan", "labs/lab01.py"]),
    ("warmup_kit.run", ["no_such_script.py"]),
]


def _check(rc, err: str, took: float, what) -> None:
    assert "Traceback" not in err, (what, err)
    assert rc == 2, (what, rc, err)
    errors = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(errors) == 1 and err.rstrip().splitlines()[-1] == errors[0], \
        (what, err)
    assert took < QUICK_S, (what, f"{took:.1f} s")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("entry,argv", CASES,
                         ids=[f"{e}:{' '.join(a)}" for e, a in CASES])
def test_bad_arguments_are_usage_errors(entry, argv, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("WARMUP_KIT_SECRET", raising=False)
    main = _main(entry)
    err, out = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
        except BaseException as exc:      # what a traceback would show
            rc = f"raised {type(exc).__name__}: {exc}"
    _check(rc, err.getvalue(), time.monotonic() - t0, (entry, argv))


def test_exec_on_an_unknown_node_is_a_usage_error(monkeypatch, capsys,
                                                  tmp_path):
    from warmup_kit.cluster import __main__ as cli, janitor
    monkeypatch.setattr(janitor, "registry_dir", lambda: tmp_path)
    fake = {"prefix": "wkc1-0", "switch": "wkc1-0-switch", "link": "1gbit",
            "ranks_per_node": 1, "detached": True, "pid": 1,
            "nodes": [{"name": f"node{i}", "netns": f"wkc1-0-node{i}",
                       "address": f"10.77.0.{i + 1}", "index": i,
                       "port": f"n{i}"} for i in range(2)]}
    monkeypatch.setattr(janitor, "entries", lambda: {"wkc1-0": fake})
    t0 = time.monotonic()
    with pytest.raises(SystemExit) as exc:
        cli.main(["exec", "node7", "--", "hostname"])
    _check(exc.value.code, capsys.readouterr().err,
           time.monotonic() - t0, "exec node7")


# run as people type them: python -m / python script.py, and the
# environment the parser reads
SUBPROCESS = [
    (["-m", "warmup_kit.cluster", "up", "--nodes", "0"], {}),
    (["-m", "warmup_kit.bench", "-b", "3", "-e", "5"], {}),
    (["benchmarks/cluster.py", "--sizes", "garbage"], {}),
    (["-m", "warmup_kit.run", "labs/lab01.py"], {"WARMUP_KIT_SECRET": "zz"}),
    (["-m", "warmup_kit.run", "labs/lab01.py"], {"NNODES": "abc"}),
    (["-m", "warmup_kit.run", "labs/lab01.py"], {"MASTER_PORT": "99999"}),
    (["-m", "warmup_kit.run", "--nnodes", "2", "labs/lab01.py"], {}),
]


@pytest.mark.multiproc
@pytest.mark.timeout(120)
@pytest.mark.parametrize("argv,env", SUBPROCESS,
                         ids=[" ".join(a) + (f" {e}" if e else "")
                              for a, e in SUBPROCESS])
def test_bad_arguments_from_a_shell(argv, env):
    full = {k: v for k, v in os.environ.items()
            if k not in ("WARMUP_KIT_SECRET", "NNODES", "MASTER_PORT")}
    full.update(env)
    t0 = time.monotonic()
    p = subprocess.run([PYTHON, *argv], capture_output=True, text=True,
                       timeout=90, cwd=ROOT, env=full)
    took = time.monotonic() - t0
    # a fresh interpreter imports numpy first: allow for that, not work
    assert "Traceback" not in p.stderr, (argv, p.stderr)
    assert p.returncode == 2, (argv, p.returncode, p.stderr)
    errors = [ln for ln in p.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1, (argv, p.stderr)
    assert p.stdout == "", (argv, p.stdout)      # nothing ran
    assert took < 20, (argv, f"{took:.1f} s")


def test_the_shared_types_bound_what_they_accept():
    import argparse

    from warmup_kit import cliargs
    from warmup_kit.units import parse_rate
    assert parse_rate("1kbit") == 125 and parse_rate("1tbit") == 125e9
    for bad in ("99999999tbit", "999bit", "2tbit", "0gbit"):
        with pytest.raises(ValueError, match="link rate"):
            parse_rate(bad)
    ok = {cliargs.positive_int: ("1", 1), cliargs.port: ("65535", 65535),
          cliargs.non_negative_float: ("0", 0.0),
          cliargs.byte_size(1, 1 << 30): ("1G", 1 << 30),
          cliargs.rate_or_none: ("None", None)}
    for parse, (text, want) in ok.items():
        assert parse(text) == want
    bad = [(cliargs.positive_int, "0"), (cliargs.positive_int, "1.5"),
           (cliargs.port, "0"), (cliargs.port, "65536"),
           (cliargs.positive_float, "0"), (cliargs.positive_float, "inf"),
           (cliargs.non_negative_float, "nan"),
           (cliargs.byte_size(1, 1 << 30), "2G"),
           (cliargs.hex_secret, "ab" * 15), (cliargs.hex_secret, "xyz"),
           (cliargs.comma_list(cliargs.positive_int), " , ")]
    for parse, text in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)
