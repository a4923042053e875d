# SPDX-License-Identifier: Apache-2.0
"""The version of the devq wheel (pyproject.toml holds the rest).

The project has one version source, the VERSION file at the top of the
tree (../VERSION from here).  setuptools' own `file:` directive refuses a
path outside this directory, so it is read here, and written into the built
package as devq/_version.py: an installed wheel's devq.__version__ is the
release, as `make python` writes it for build/python."""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def version():
    path = os.path.join(HERE, "..", "VERSION")
    try:
        with open(path) as f:
            v = f.read().strip()
    except OSError as e:
        raise SystemExit("devq: %s: %s (build the wheel from the devq tree: "
                         "make python-wheel)" % (path, e.strerror))
    if not v:
        raise SystemExit("devq: %s is empty" % path)
    return v


VERSION = version()


class BuildPy(build_py):
    """build_py that adds devq/_version.py to what it builds, from a clean
    build/lib/devq: setuptools builds in this directory and would otherwise
    pack a module left there by an earlier build into the wheel."""

    def run(self):
        shutil.rmtree(os.path.join(self.build_lib, "devq"), ignore_errors=True)
        super().run()
        out = os.path.join(self.build_lib, "devq", "_version.py")
        self.mkpath(os.path.dirname(out))
        with open(out, "w") as f:
            f.write('__version__ = "%s"\n' % VERSION)


setup(version=VERSION, cmdclass={"build_py": BuildPy})
