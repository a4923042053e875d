# SPDX-License-Identifier: Apache-2.0
"""Fixtures of the binding's tests: a devqd of the build under test on a
private socket (as tests/harness.c starts them), and the summary line that
`make check` adds up."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

BUILD = os.path.abspath(os.environ.get("DEVQ_BUILD", "build"))
# Sanitizer and valgrind runs are slow: time limits stretch, visibly.
SLOW = 10 if (os.environ.get("DEVQ_SANITIZER", "") not in ("", "0")
              or os.environ.get("DEVQ_VALGRIND")) else 1


class Daemon:
    def __init__(self, *extra, sock=None):
        """sock: a socket path to listen on (a restart), else a new one."""
        self.dir = os.path.dirname(sock) if sock else tempfile.mkdtemp(prefix="devq-pytest-")
        self.sock = sock or os.path.join(self.dir, "devqd.sock")
        self.log = os.path.join(self.dir, "devqd.log")
        argv = [os.path.join(BUILD, "devqd"), "--socket", self.sock, "--backend", "cpu",
                "-v", *extra]
        if os.environ.get("DEVQ_VALGRIND"):
            argv = ["valgrind", "--quiet", "--error-exitcode=99", "--leak-check=full",
                    "--errors-for-leak-kinds=definite,indirect"] + argv
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log)
        deadline = time.monotonic() + 10 * SLOW
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("devqd exited at start: " + self.tail())
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(self.sock)
                return
            except OSError:
                time.sleep(0.01)
        self.proc.kill()
        raise RuntimeError("devqd did not start listening: " + self.tail())

    def tail(self):
        with open(self.log, errors="replace") as f:
            return "".join(f.readlines()[-30:])

    def stop(self, keep=False):
        """SIGTERM; the exit status (0 expected: sanitizers report through it).
        keep: leave the directory, for a daemon started again on the socket."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(30 * SLOW)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        if rc == 0 and not keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        return rc


@pytest.fixture(scope="session")
def daemon():
    """One devqd for the session; its socket is also $DEVQ_SOCKET, so
    devq.connect() with no argument finds it."""
    d = Daemon()
    old = os.environ.get("DEVQ_SOCKET")
    os.environ["DEVQ_SOCKET"] = d.sock
    yield d
    if old is None:
        os.environ.pop("DEVQ_SOCKET", None)
    else:
        os.environ["DEVQ_SOCKET"] = old
    rc = d.stop()
    assert rc == 0, "devqd exited with %d: %s" % (rc, d.tail())


@pytest.fixture
def conn(daemon):
    import devq

    with devq.connect(daemon.sock) as c:
        yield c


def pytest_sessionstart(session):
    # test_install.py runs this suite again with a venv's interpreter, the
    # package installed there: it names the venv, and the suite must then
    # test that copy, not one found on a path that leaked in.
    want = os.environ.get("DEVQ_TEST_PACKAGE_UNDER")
    if want:
        import devq

        got = os.path.realpath(devq.__file__)
        if not got.startswith(os.path.realpath(want) + os.sep):
            raise pytest.UsageError("devq was imported from %s, not from under %s"
                                    % (got, want))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    # The line `make check` counts, in Check's format.
    st = terminalreporter.stats
    passed = len([r for r in st.get("passed", []) if r.when == "call"])
    failed = len(st.get("failed", []))
    errors = len(st.get("error", []))
    n = passed + failed + errors
    pct = 100 * passed // n if n else 0
    terminalreporter.write_line("%d%%: Checks: %d, Failures: %d, Errors: %d"
                                % (pct, n, failed, errors))
