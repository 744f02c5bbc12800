"""``python -m warmup_kit.doctor``: the table, ``--json`` with the issue's
keys, ``--plot``; and bad input (empty, binary, no rows, two systems,
nonsense flags) is one line on stderr and exit status 2, never a
traceback."""
import json
import subprocess
import sys

import pytest

from doctor_samples import info, run_lines
from warmup_kit.doctor.cli import main

GIB = 1 << 30


@pytest.fixture
def healthy(tmp_path):
    p = tmp_path / "all_reduce_perf.log"
    p.write_text("\n".join(run_lines("dgx-a100", maxb=4 * GIB)) + "\n")
    return p


@pytest.fixture
def degraded(tmp_path):
    lines = run_lines("dgx-h100", maxb=4 * GIB, algorithm="ring")
    at = next(i for i, l in enumerate(lines) if l.startswith("#       size"))
    lines.insert(at, info(msg="NVLS multicast support is available on dev 0"))
    p = tmp_path / "h100.log"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_table_verdict_and_causes(healthy, degraded, capsys):
    assert main([str(healthy)]) == 0
    out = capsys.readouterr().out
    assert "verdict: HEALTHY" in out and "ring/Simple" in out
    head = next(l for l in out.splitlines() if l.lstrip().startswith("size"))
    assert head.split() == ["size", "collective", "measured", "expected",
                            "ratio", "matches"]
    assert main([str(degraded)]) == 1
    out = capsys.readouterr().out
    assert "verdict: DEGRADED" in out
    assert "1. NVLS available but the numbers match ring" in out


def test_json_keys(healthy, degraded, capsys):
    assert main([str(degraded), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert {"verdict", "system", "rows", "causes"} <= set(doc)
    assert doc["verdict"] == "degraded"
    assert doc["system"]["key"] == "dgx-h100" and doc["system"]["ranks"] == 8
    r = doc["rows"][-1]
    assert set(r) >= {"bytes", "collective", "busbw_gbps", "expected_gbps",
                      "ratio", "algorithm"}
    assert isinstance(r["bytes"], int) and r["collective"] == "allreduce"
    assert r["algorithm"].startswith("ring")
    assert doc["causes"][0] == {
        "cause": "NVLS available but the numbers match ring",
        "evidence": doc["causes"][0]["evidence"]}
    assert main([str(healthy), str(degraded), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "degraded" and len(doc["runs"]) == 2
    assert {r["run"] for r in doc["rows"]} == {1}


def test_plot_is_written(healthy, tmp_path, capsys):
    out = tmp_path / "fig.png"
    assert main([str(healthy), "--plot", str(out)]) == 0
    assert out.stat().st_size > 5000
    assert out.read_bytes()[:4] == b"\x89PNG"


def _bad(tmp_path, name, data):
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


@pytest.mark.parametrize("args", [
    ["EMPTY"], ["BINARY"], ["NOROWS"], ["TWO"], ["MISSING"],
    ["HEALTHY", "--nic", "lots"], ["HEALTHY", "--nic", "0x100G"],
    ["HEALTHY", "--system", "cray-1"], ["HEALTHY", "--nodes", "0"],
    ["HEALTHY", "--gpus-per-node", "x"], ["HEALTHY", "--frobnicate"],
    ["HEALTHY", "--plot", "/nonexistent/dir/f.png"],
    ["HEALTHY", "--plot", "FIG.txt"], [],
    ["HEALTHY", "--gpus-per-node", "16"]])
def test_bad_input_is_one_line_and_exit_2(args, tmp_path, healthy, capsys):
    two = run_lines("dgx-a100", maxb=1 << 12) + \
        run_lines("dgx-h100", maxb=1 << 12)
    files = {"EMPTY": _bad(tmp_path, "e.log", b""),
             "BINARY": _bad(tmp_path, "b.log", bytes(range(256)) * 64),
             "NOROWS": _bad(tmp_path, "n.log",
                            b"# nThread 1 nGpus 1\n# Using devices\nhello\n"),
             "TWO": _bad(tmp_path, "t.log", ("\n".join(two)).encode()),
             "MISSING": str(tmp_path / "nope.log"),
             "HEALTHY": str(healthy), "FIG.txt": str(tmp_path / "f.txt")}
    argv = [files.get(a, a) for a in args]
    with pytest.raises(SystemExit) as e:
        raise SystemExit(main(argv))
    assert e.value.code == 2
    cap = capsys.readouterr()
    lines = cap.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("doctor: error:"), cap.err
    assert "Traceback" not in cap.err


def test_messages_say_what_is_wrong(tmp_path, capsys):
    main([_bad(tmp_path, "e.log", b"  \n")])
    assert "empty" in capsys.readouterr().err
    main([_bad(tmp_path, "b.log", b"\x00\x01\x02binary")])
    assert "binary" in capsys.readouterr().err
    two = run_lines("dgx-a100", maxb=1 << 12) + \
        run_lines("dgx-h100", maxb=1 << 12)
    main([_bad(tmp_path, "t.log", "\n".join(two).encode())])
    assert "mixes two systems" in capsys.readouterr().err


@pytest.mark.multiproc
def test_as_a_module_without_traceback(tmp_path):
    p = tmp_path / "b.log"
    p.write_bytes(b"\x00\xff" * 100)
    r = subprocess.run([sys.executable, "-m", "warmup_kit.doctor", str(p)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
