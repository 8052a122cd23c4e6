"""A PEP 517 build backend for this one package, on the standard library
alone, so that pip builds it where no package index is reachable (pip
would otherwise fetch setuptools and wheel into its build environment).

It builds a pure-Python wheel of src/leasehold, an sdist of the project,
and an editable wheel (PEP 660) that points at src. The version is
leasehold/_version.py's; the rest of the metadata is pyproject.toml's
[project] table.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import tarfile
import zipfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pip, which runs this backend, carries tomli
    from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "leasehold"
# Fixed times make two builds of one tree the same bytes.
_EPOCH = (1980, 1, 1, 0, 0, 0)


def _project() -> tuple[str, str, str]:
    """The distribution's name, version and METADATA text."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    match = re.search(r'^__version__ = "([^"]+)"$', (PACKAGE / "_version.py").read_text(), re.M)
    if match is None:
        raise RuntimeError("no __version__ in src/leasehold/_version.py")
    name, version = project["name"], match.group(1)
    metadata = (
        "Metadata-Version: 2.1\n"
        f"Name: {name}\n"
        f"Version: {version}\n"
        f"Summary: {project['description']}\n"
        f"Requires-Python: {project['requires-python']}\n"
        "Description-Content-Type: text/markdown\n"
        "\n" + (ROOT / project["readme"]).read_text()
    )
    return name, version, metadata


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _wheel(directory: str, files: dict[str, bytes]) -> str:
    name, version, metadata = _project()
    info = f"{name}-{version}.dist-info"
    files = {
        **files,
        f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: leasehold _build/backend.py\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = io.StringIO()
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.write(f"{path},sha256={digest},{len(data)}\n")
    record.write(f"{info}/RECORD,,\n")
    files[f"{info}/RECORD"] = record.getvalue().encode()
    filename = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(Path(directory) / filename, "w", zipfile.ZIP_DEFLATED) as whl:
        for path, data in files.items():
            whl.writestr(zipfile.ZipInfo(path, _EPOCH), data, zipfile.ZIP_DEFLATED)
    return filename


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {f"leasehold/{p.relative_to(PACKAGE).as_posix()}": p.read_bytes() for p in _sources()}
    return _wheel(wheel_directory, files)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {"leasehold.pth": f"{ROOT / 'src'}\n".encode()})


def build_sdist(sdist_directory, config_settings=None):
    name, version, metadata = _project()
    base = f"{name}-{version}"
    filename = f"{base}.tar.gz"
    paths = [ROOT / "pyproject.toml", ROOT / "README.md", ROOT / "_build" / "backend.py", *_sources()]
    paths += sorted((ROOT / "tests").glob("*.py"))
    with tarfile.open(Path(sdist_directory) / filename, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path, data in [(Path("PKG-INFO"), metadata.encode())] + [(p.relative_to(ROOT), p.read_bytes()) for p in paths]:
            member = tarfile.TarInfo(f"{base}/{path.as_posix()}")
            member.size, member.mode = len(data), 0o644
            tar.addfile(member, io.BytesIO(data))
    return filename
