# SPDX-License-Identifier: Apache-2.0
"""The package as people install it: the wheel `make python-wheel` builds
(exactly one, the release's version inside), `pip install --no-index
--no-build-isolation ./python` and the wheel into venvs offline (Debian's
setuptools, wheel and NumPy through --system-site-packages), the suite run
again against the venv's copy; and the loading of libdevq: a missing
library or one older than the package is an ImportError naming both
versions, the Debian package libdevq0 and $DEVQ_LIBRARY."""

import glob
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

import devq
from conftest import BUILD, SLOW

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
with open(os.path.join(ROOT, "VERSION")) as _f:
    VERSION = _f.read().strip()
LIB = os.path.join(BUILD, "libdevq.so.0")
PY = sys.executable  # the suite's interpreter: Debian's /usr/bin/python3 by default


def env(**extra):
    """The environment of a user's shell: no PYTHONPATH (the suite's points
    at build/python) and no make variables of the `make check` above."""
    e = {k: v for k, v in os.environ.items()
         if k not in ("PYTHONPATH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "DEVQ_LIBRARY")}
    e.update(extra)
    return e


def run(argv, timeout=120, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout * SLOW, **kw)
    return r.returncode, r.stdout + r.stderr


def import_error(library):
    """What `import devq` says with DEVQ_LIBRARY=library, in a fresh
    interpreter on the build's package."""
    code = ("import sys\ntry:\n    import devq\nexcept ImportError as e:\n"
            "    print('ImportError:', e)\n    sys.exit(3)\n")
    rc, out = run([PY, "-c", code], env=env(PYTHONPATH=os.path.join(BUILD, "python"),
                                          DEVQ_LIBRARY=library), timeout=30)
    assert rc == 3, "import devq with DEVQ_LIBRARY=%s: rc %d: %s" % (library, rc, out)
    return out


def test_missing_library_is_import_error():
    out = import_error("/nonexistent")
    assert "libdevq0" in out and "DEVQ_LIBRARY" in out and "/nonexistent" in out, out


def stub(tmp_path, name, version):
    """A shared library that is not the real libdevq: devq_version() says
    version (None: it has none) and nothing else is there."""
    src = tmp_path / (name + ".c")
    src.write_text('const char *devq_version(void) { return "%s"; }\n' % version
                   if version is not None else "int devq_nothing;\n")
    so = tmp_path / (name + ".so")
    rc, out = run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-o", str(so), str(src)],
                  timeout=60)
    assert rc == 0, out
    return str(so)


def test_older_library_refused_naming_both_versions(tmp_path):
    major, minor = (int(x) for x in devq.__version__.split(".")[:2])
    if (major, minor) == (0, 0):
        pytest.skip("SKIP: version 0.0.x: no older MAJOR.MINOR to refuse")
    older = "%d.%d.99" % ((major, minor - 1) if minor else (major - 1, 99))
    out = import_error(stub(tmp_path, "old", older))
    assert "libdevq %s, older than %d.%d" % (older, major, minor) in out, out
    assert "devq %s" % devq.__version__ in out and "libdevq0" in out, out
    out = import_error(stub(tmp_path, "nover", None))
    assert "no devq_version()" in out, out
    # The same MAJOR.MINOR but not libdevq: refused naming what it lacks.
    out = import_error(stub(tmp_path, "same", "%d.%d.0" % (major, minor)))
    assert "lacks devq_code_name, devq_connect" in out, out


def test_version_is_the_release():
    assert devq.__version__ == VERSION


# ---- the wheel and venvs -------------------------------------------------


def need(*modules):
    missing = [m for m in modules
               if run([PY, "-c", "import " + m], timeout=30)[0] != 0]
    if missing:
        pkgs = {"build": "python3-build", "wheel": "python3-wheel",
                "setuptools": "python3-setuptools", "ensurepip": "python3-venv",
                "venv": "python3-venv"}
        pytest.skip("SKIP: %s lacks %s: apt-get install %s (make deps)"
                    % (PY, ", ".join(missing), " ".join(sorted({pkgs[m] for m in missing}))))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """`make python-wheel` into a private BUILD: the path of its one wheel."""
    need("build", "wheel", "setuptools")
    out = tmp_path_factory.mktemp("wheelbuild")
    rc, log = run(["make", "--no-print-directory", "-s", "python-wheel", "BUILD=%s" % out,
                   "PYTHON=%s" % PY], cwd=ROOT, env=env(), timeout=300)
    assert rc == 0, log
    found = sorted(os.path.basename(p) for p in glob.glob(str(out / "wheel" / "*")))
    assert found == ["devq-%s-py3-none-any.whl" % VERSION], found
    return str(out / "wheel" / found[0])


def test_wheel_contents(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        pkg = sorted(n for n in names if n.startswith("devq/"))
        src = sorted("devq/" + os.path.basename(p)
                     for p in glob.glob(os.path.join(ROOT, "python", "devq", "*.py")))
        assert pkg == sorted(src + ["devq/_version.py"]), pkg
        assert z.read("devq/_version.py").decode() == '__version__ = "%s"\n' % VERSION
        meta = z.read("devq-%s.dist-info/METADATA" % VERSION).decode()
    assert "Version: %s\n" % VERSION in meta, meta
    assert "Requires-Dist: numpy\n" in meta and "Provides-Extra: torch\n" in meta, meta
    assert ('Requires-Dist: torch ; extra == "torch"' in meta
            or "Requires-Dist: torch ; extra == 'torch'" in meta), meta


def make_venv(path):
    need("venv", "ensurepip")
    rc, out = run([PY, "-m", "venv", "--system-site-packages", str(path)], env=env())
    assert rc == 0, out
    return os.path.join(str(path), "bin", "python")


def where(vpy):
    """(devq.__file__, devq.__version__) as the venv's python imports it."""
    rc, out = run([vpy, "-c", "import devq; print(devq.__file__); print(devq.__version__)"],
                  env=env(DEVQ_LIBRARY=LIB), cwd="/", timeout=60)
    assert rc == 0, out
    return out.split()


def test_pip_install_source_offline_and_suite(tmp_path):
    # A clean copy of the tree's python/ and VERSION, as a clone has them.
    tree = tmp_path / "tree"
    shutil.copytree(os.path.join(ROOT, "python"), tree / "python",
                    ignore=shutil.ignore_patterns("build", "dist", "*.egg-info",
                                                  "__pycache__", "tests"))
    shutil.copy(os.path.join(ROOT, "VERSION"), tree / "VERSION")
    vpy = make_venv(tmp_path / "v")
    rc, out = run([vpy, "-m", "pip", "install", "--no-index", "--no-build-isolation",
                   str(tree / "python")], env=env(), timeout=300)
    assert rc == 0, out
    path, version = where(vpy)
    assert path.startswith(str(tmp_path / "v") + os.sep) and version == VERSION, (path, version)
    # The package's suite against that copy and a CPU devqd of the build
    # (conftest checks the copy is the venv's); not this file (it would
    # recurse), nor the 4-process example (the suite above ran it).
    rc, out = run([vpy, "-m", "pytest", "-p", "no:cacheprovider", "-q", HERE,
                   "--ignore", os.path.join(HERE, "test_install.py"),
                   "--ignore", os.path.join(HERE, "test_torch_mlp.py")],
                  env=env(DEVQ_LIBRARY=LIB, DEVQ_BUILD=BUILD,
                          DEVQ_TEST_PACKAGE_UNDER=str(tmp_path / "v"),
                          PYTHONDONTWRITEBYTECODE="1"),
                  cwd=ROOT, timeout=600)
    assert rc == 0 and " passed" in out, out[-3000:]


def test_wheel_in_venv_comes_first(wheel, tmp_path):
    vpy = make_venv(tmp_path / "v")
    rc, out = run([vpy, "-m", "pip", "install", "--no-index", wheel], env=env(), timeout=300)
    assert rc == 0, out
    path, version = where(vpy)
    assert path.startswith(str(tmp_path / "v") + os.sep) and version == VERSION, (path, version)
    # With python3-devq installed too (/usr/lib/python3/dist-packages/devq)
    # the venv's copy is the one imported: its site-packages comes first.
    rc, out = run([vpy, "-c", "import site, sys; v = site.getsitepackages()[0]; "
                   "print(v); print('\\n'.join(sys.path))"], env=env(), timeout=60)
    assert rc == 0, out
    lines = out.split("\n")
    venv_site, paths = lines[0], lines[1:]
    system = [i for i, p in enumerate(paths) if p.startswith("/usr/lib/python3")
              and p.endswith("dist-packages")]
    assert system and paths.index(venv_site) < min(system), out
