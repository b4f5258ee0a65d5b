"""The install hint of an optional extra names a command that works where this perfstack came from."""

from __future__ import annotations

from pathlib import Path

from perfstack import extras


def test_from_a_checkout_the_hint_installs_the_checkout():
    root = Path(__file__).resolve().parents[1]  # these tests run from the source tree
    assert extras.checkout() == root
    assert extras.install_hint("loadtest") == f"pip install -e '{root}[loadtest]'"


def test_from_a_package_index_the_hint_names_the_package(monkeypatch):
    monkeypatch.setattr(extras, "checkout", lambda: None)
    assert extras.install_hint("fleet") == "pip install 'perfstack[fleet]'"


def test_a_checkout_path_with_spaces_stays_one_argument(monkeypatch, tmp_path):
    odd = tmp_path / "my perfstack"
    monkeypatch.setattr(extras, "checkout", lambda: odd)
    assert extras.install_hint("bench") == f"pip install -e '{odd}[bench]'"
