"""The package builds and installs with pip from this folder, with no
package index."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile
from pathlib import Path

import leasehold

PROJECT = Path(__file__).resolve().parent.parent


def pip(*args: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", *args, "--no-index", "--no-deps"],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise AssertionError(f"pip {' '.join(args)}: exit {out.returncode} (no pip? apt-get install python3-pip)\n{out.stdout}{out.stderr}")


class PackagingTest(unittest.TestCase):
    def setUp(self) -> None:
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.tmp = Path(tmp.name)

    def test_wheel(self) -> None:
        # pip builds in an environment of its own, installing the build's
        # requirements (none) from no index: what `pip install` does.
        pip("wheel", "--wheel-dir", str(self.tmp / "dist"), str(PROJECT))
        (wheel,) = (self.tmp / "dist").glob("*.whl")
        self.assertEqual(wheel.name, f"leasehold-{leasehold.__version__}-py3-none-any.whl")
        with zipfile.ZipFile(wheel) as whl:
            names = whl.namelist()
            whl.extractall(self.tmp / "site")  # a pure wheel installs as it unpacks
        for name in ("leasehold/__init__.py", "leasehold/py.typed", f"leasehold-{leasehold.__version__}.dist-info/RECORD"):
            self.assertIn(name, names)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONPATH"] = str(self.tmp / "site")
        code = "import leasehold; print(leasehold.__file__); leasehold.Client(key='k'); leasehold.AsyncClient(key='k')"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.startswith(str(self.tmp / "site")), out.stdout)

    def test_sdist(self) -> None:
        spec = importlib.util.spec_from_file_location("backend", PROJECT / "_build" / "backend.py")
        assert spec is not None and spec.loader is not None
        backend = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(backend)
        name = backend.build_sdist(str(self.tmp))
        base = f"leasehold-{leasehold.__version__}"
        with tarfile.open(self.tmp / name) as tar:
            names = tar.getnames()
        for member in ("PKG-INFO", "pyproject.toml", "_build/backend.py", "src/leasehold/_sync.py"):
            self.assertIn(f"{base}/{member}", names)


if __name__ == "__main__":
    unittest.main()
