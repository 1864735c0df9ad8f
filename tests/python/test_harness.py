"""The harness itself: a test that hangs ends the run, with every thread's stack,
instead of holding it until an outer limit."""

import os
import subprocess
import sys
import time

from conftest import HERE


def test_a_hanging_test_ends_the_run_with_its_stack(tmp_path):
    (tmp_path / "test_hangs.py").write_text("import time\n\n\ndef test_waits_for_ever():\n    time.sleep(120)\n")
    env = dict(os.environ, ACC_TEST_SECONDS="3", PYTHONPATH=os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]))
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "--capture=sys", "-q",
                           str(tmp_path / "test_hangs.py")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=100)
    seconds = time.monotonic() - start
    assert done.returncode != 0, done.stdout + done.stderr
    assert "Timeout (0:00:03)!" in done.stderr and "in test_waits_for_ever" in done.stderr, done.stderr
    assert seconds < 60, f"the run took {seconds:.0f} s"
