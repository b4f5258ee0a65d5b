"""What a new user's pip needs: a LICENSE matching pyproject's, and a setuptools floor that reads
this pyproject (the SPDX string form of project.license needs setuptools 77, PEP 639)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_license_file_matches_the_declared_license():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^license = "Apache-2.0"$', pyproject, re.M)
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text and "END OF TERMS" in text


def test_setuptools_floor_reads_an_spdx_license_string():
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    m = re.search(r'^requires = \["setuptools>=(\d+)', pyproject, re.M)
    assert m, "build-system requires a setuptools floor"
    if re.search(r'^license = "', pyproject, re.M):
        assert int(m.group(1)) >= 77, "setuptools before 77 rejects project.license as a string"
