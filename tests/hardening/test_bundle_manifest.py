"""A bundle copied or unpacked only in part is not audited as if whole.

'perfstack capture' lists every file it wrote, with its size and sha256, in meta.json's manifest;
'doctor --bundle' checks it first. A listed file that is missing or cut short refuses the bundle
(exit 2, naming the files) unless --partial-bundle accepts it; an edited file (a user redacting
further) is audited with a warning; a file added by hand, or a bundle without a manifest, is audited
as before.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from fakes import FakeHost

from perfstack.cli.main import main
from perfstack.errors import InputError
from perfstack.host.bundle import BundleHost
from perfstack.host.capture import RecordingHost, write
from perfstack.probes import collect

FIXTURE = Path(__file__).parents[1] / "fixtures" / "bundles" / "h100-idle"
SWAPPINESS = "proc/sys/vm/swappiness"  # "60\n" on the recorded machine: the 'swappiness' finding


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Path:
    """A real machine's bundle captured again through 'perfstack capture's recorder: every probe's
    read, redacted and laid out as capture writes it, with its manifest."""
    rec = RecordingHost(BundleHost(FIXTURE))
    collect(rec)
    out = tmp_path_factory.mktemp("capture") / "b"
    write(rec, out, {"tool_version": "test"})
    return out


@pytest.fixture
def bundle(captured, tmp_path) -> Path:
    """A fresh copy to damage."""
    return Path(shutil.copytree(captured, tmp_path / "copy"))


def _doctor(b: Path, capsys, *extra: str) -> tuple[int, dict, str]:
    code = main(["doctor", "--bundle", str(b), "--json", "--fail-on", "never", *extra])
    out, err = capsys.readouterr()
    assert "internal error" not in err
    return code, (json.loads(out) if code == 0 else {}), err


def _meta(b: Path) -> dict:
    return json.loads((b / "meta.json").read_text())


def test_capture_lists_every_file_it_wrote_as_written(captured):
    manifest = _meta(captured)["manifest"]
    on_disk = {str(p.relative_to(captured)) for p in captured.rglob("*") if p.is_file()}
    assert set(manifest) == on_disk - {"meta.json"} and len(manifest) > 50
    for rel, want in manifest.items():
        data = (captured / rel).read_bytes()  # the redacted bytes, as the doctor will read them
        assert want == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_manifest_is_of_the_redacted_files(tmp_path):
    rec = RecordingHost(FakeHost(files={"/proc/sys/kernel/hostname": "dgx-prod-07\n"},
                                 env={"HOSTNAME": "dgx-prod-07", "HF_TOKEN": "hf_abcdefgh"}))
    rec.read_text("/proc/sys/kernel/hostname"), rec.environ()
    write(rec, tmp_path / "b", {})
    meta = (tmp_path / "b" / "meta.json").read_text()
    assert "dgx-prod-07" not in meta and "hf_abcdefgh" not in meta
    assert BundleHost(tmp_path / "b").manifest.edited == []


def test_whole_bundle_is_audited_and_says_so(bundle, capsys):
    code, run, err = _doctor(bundle, capsys)
    assert code == 0 and err == ""
    assert run["meta"]["bundle"] == f"all {len(_meta(bundle)['manifest'])} files as captured (manifest checked)"
    assert "swappiness" in {f["id"] for f in run["findings"]}


def test_deleted_file_refuses_the_bundle_naming_it(bundle, capsys):
    (bundle / "proc/meminfo").unlink()
    code, _, err = _doctor(bundle, capsys)
    n = len(_meta(bundle)["manifest"])
    assert code == 2
    assert f"is incomplete: of the {n} files its capture wrote, 1 is missing (proc/meminfo): copy it again" in err
    assert "--partial-bundle" in err


def test_many_missing_files_are_counted_and_the_first_few_named(bundle, capsys):
    gone = sorted(_meta(bundle)["manifest"])[:5]
    for rel in gone:
        (bundle / rel).unlink()
    code, _, err = _doctor(bundle, capsys)
    assert code == 2 and f"5 are missing ({', '.join(gone[:3])}, ...)" in err
    assert gone[3] not in err.splitlines()[0]


@pytest.mark.parametrize("keep", [1, 0])
def test_file_cut_short_refuses_the_bundle(bundle, capsys, keep):
    """'60\\n' cut to '6' would read as swappiness 6 and the finding would silently go away."""
    (bundle / SWAPPINESS).write_text("60\n"[:keep])
    code, _, err = _doctor(bundle, capsys)
    assert code == 2 and f"1 is cut short ({SWAPPINESS})" in err


def test_partial_bundle_on_purpose_says_what_it_lacks(bundle, capsys):
    (bundle / "proc/meminfo").unlink()
    (bundle / SWAPPINESS).write_text("6")
    code, run, err = _doctor(bundle, capsys, "--partial-bundle")
    assert code == 0
    assert "warning" in err and "1 is missing (proc/meminfo), 1 is cut short" in run["meta"]["bundle"]
    # the cut-short file is not read as a smaller value: what needs it says why it is not there
    assert "swappiness" not in {f["id"] for f in run["findings"]}
    fact = run["facts"]["kernel.swappiness"]
    assert fact.get("value") is None and "cut short in this partial bundle" in fact["reason"]
    check = next(c for c in run["checks"] if c["id"] == "swappiness")
    assert check["status"] == "not-checked" and "cut short in this partial bundle" in check["reason"]
    assert any("proc/meminfo missing in this partial bundle" in str(f.get("reason"))
               for f in run["facts"].values())


def test_partial_bundle_flag_needs_a_bundle(capsys):
    assert main(["doctor", "--partial-bundle", "-q"]) == 2
    assert "--partial-bundle is for auditing a bundle" in capsys.readouterr().err


@pytest.mark.parametrize("edit", ["redact", "same-size", "lines-removed"])
def test_edited_file_is_audited_with_a_warning(bundle, capsys, edit):
    """Users redact bundles further before sharing them: the file is whole, only different."""
    env = bundle / "env.json"
    text = env.read_text()
    if edit == "redact":
        data = json.loads(text)
        data["HOME"] = "REDACTED-BY-HAND"
        env.write_text(json.dumps(data, indent=1) + "\n")
    elif edit == "same-size":
        env.write_text(text.replace("/root", "/ROOT"))
    else:
        env.write_text("{}\n")  # shorter, but ends a line as an editor leaves it
    assert env.read_text() != text
    code, run, err = _doctor(bundle, capsys)
    assert code == 0
    assert "warning" in err and "1 was edited since (env.json): read as it is now" in err
    assert "edited since (env.json)" in run["meta"]["bundle"]


def test_file_added_by_hand_is_fine(bundle, capsys):
    (bundle / "NOTES.txt").write_text("captured on node 7 after the reboot\n")
    (bundle / "proc/sys/vm/dirty_ratio").write_text("20\n")
    code, run, err = _doctor(bundle, capsys)
    assert code == 0 and err == "" and run["meta"]["bundle"].startswith("all ")


@pytest.mark.parametrize("how", ["no-key", "no-meta"])
def test_bundle_without_a_manifest_is_audited_as_before(bundle, capsys, how):
    if how == "no-key":
        meta = _meta(bundle)
        del meta["manifest"]
        (bundle / "meta.json").write_text(json.dumps(meta))
    else:
        (bundle / "meta.json").unlink()
    (bundle / "proc/meminfo").unlink()  # nothing to check it against: not available, as before
    code, run, err = _doctor(bundle, capsys)
    assert code == 0 and err == ""
    assert run["meta"]["bundle"] == "no manifest (an older or hand-built bundle): completeness not checked"


def test_the_terminal_header_says_how_complete_the_bundle_is(bundle, capsys):
    assert main(["doctor", "--bundle", str(bundle), "--fail-on", "never"]) == 0
    assert "bundle: all " in capsys.readouterr().out
    assert main(["doctor", "--bundle", str(FIXTURE), "--fail-on", "never"]) == 0
    assert "bundle: no manifest" in capsys.readouterr().out


@pytest.mark.parametrize("manifest,says", [
    ([], "'manifest' must be an object"),
    ({"proc/meminfo": {"size": "12", "sha256": "0" * 64}}, "manifest entry of 'proc/meminfo' must be"),
    ({"proc/meminfo": {"size": 1, "sha256": "xyz"}}, "manifest entry of 'proc/meminfo' must be"),
    ({"../../etc/passwd": {"size": 1, "sha256": "0" * 64}}, "outside the bundle"),
])
def test_malformed_manifest_is_bad_input_naming_meta_json(bundle, capsys, manifest, says):
    meta = _meta(bundle)
    (bundle / "meta.json").write_text(json.dumps(dict(meta, manifest=manifest)))
    code, _, err = _doctor(bundle, capsys)
    assert code == 2 and "meta.json" in err and says in err


def test_fleet_and_library_callers_get_the_same_check(bundle):
    (bundle / "env.json").unlink()
    with pytest.raises(InputError, match=r"1 is missing \(env.json\)"):
        BundleHost(bundle)
    host = BundleHost(bundle, partial=True)
    assert host.manifest is not None and host.manifest.missing == ["env.json"]
