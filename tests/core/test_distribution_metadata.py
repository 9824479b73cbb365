"""Every distribution of the repository is publishable as it stands: one version for all,
and the metadata a package index shows (readme, license and its file, classifiers,
Requires-Python). The `packaging` nox session builds them and checks them with twine."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # tomli, in every test session's dependencies on Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = [ROOT, ROOT / "core", *sorted(p.parent for p in ROOT.glob("plugins/*/pyproject.toml")),
           *sorted(p.parent for p in ROOT.glob("contrib/*/pyproject.toml"))]  # fmt: skip


def project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def ident(folder: Path) -> str:
    return str(folder.relative_to(ROOT)) if folder != ROOT else "memtap"


def test_every_distribution_has_the_same_version_and_needs_it_of_memtap() -> None:
    version = project(ROOT / "core")["version"]
    for folder in FOLDERS:
        meta = project(folder)
        assert meta["version"] == version, ident(folder)
        extras = [req for group in meta.get("optional-dependencies", {}).values() for req in group]
        for req in [*meta.get("dependencies", []), *extras]:
            if req.startswith("memtap"):
                assert re.fullmatch(rf"memtap-[a-z]+(\[\w+\])?(==|>=){re.escape(version)}", req), (
                    ident(folder),
                    req,
                )


@pytest.mark.parametrize(
    "folder",
    [pytest.param(f, id=ident(f)) for f in FOLDERS],
)
def test_distribution_metadata_is_complete(folder: Path) -> None:
    meta = project(folder)
    # 3.10, unless the package needs newer (nox then tests it from that version on); every
    # version it admits is claimed in its classifiers.
    oldest = re.fullmatch(r">=3\.(\d+)", meta["requires-python"])
    assert oldest and int(oldest.group(1)) >= 10, meta["requires-python"]
    claimed = {
        c.rsplit(" ", 1)[-1]
        for c in meta.get("classifiers", [])
        if c.startswith("Programming Language :: Python :: 3.")
    }
    assert claimed == {f"3.{minor}" for minor in range(int(oldest.group(1)), 14)}, sorted(claimed)
    assert meta["description"] and (folder / meta["readme"]).is_file()
    assert meta["license"] == "Apache-2.0" and meta.get("license-files") == ["LICENSE"]
    assert (folder / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()
    classifiers = meta.get("classifiers", [])
    assert "Typing :: Typed" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]  # the SPDX expression says it
