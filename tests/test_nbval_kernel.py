"""book/conftest.py: nbval's kernels start over ZeroMQ's ipc transport
(no TCP port another process can take between choosing and binding it),
and a kernel that dies at start is started once more, then fails with
what it printed."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("nbval")


def book_conftest():
    spec = importlib.util.spec_from_file_location(
        "book_conftest", ROOT / "book" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow                     # starts a kernel
@pytest.mark.timeout(120)
def test_nbval_kernels_talk_over_ipc_and_run_code(tmp_path):
    import nbval.kernel
    mod = book_conftest()
    assert nbval.kernel.start_new_kernel is mod.start_kernel
    km, kc = mod.start_kernel(startup_timeout=60, kernel_name="python3",
                              cwd=str(tmp_path))
    try:
        info = km.get_connection_info()
        assert info["transport"] == "ipc"
        assert Path(info["ip"]).parent.name.startswith("nbval-kernel-")
        reply = kc.execute_interactive("x = 6 * 7", timeout=60)
        assert reply["content"]["status"] == "ok"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.mark.slow                     # starts (dying) kernels
@pytest.mark.timeout(120)
def test_a_kernel_that_dies_at_start_is_tried_again_then_named(
        tmp_path, monkeypatch, capsys):
    spec = tmp_path / "kernels" / "dies"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-c",
                 "import sys; sys.stderr.write('zmq: Address already in "
                 "use'); sys.exit(3)", "{connection_file}"],
        "display_name": "dies", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    mod = book_conftest()
    with pytest.raises(RuntimeError) as err:
        mod.start_kernel(startup_timeout=20, kernel_name="dies")
    msg = str(err.value)
    assert msg.startswith(f"kernel 'dies' died at start {mod.STARTS} times")
    assert msg.endswith("its stderr:\nzmq: Address already in use")
    # the first death was reported, and the kernel started again
    said = capsys.readouterr().err
    assert "kernel 'dies' died at start (" in said
    assert "starting it again" in said
