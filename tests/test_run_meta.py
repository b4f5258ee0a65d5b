"""Every command's Run carries the same metadata, built by model.run_meta, under the names reports and diff read."""

from pathlib import Path

from perfstack.model import run_meta
from perfstack.profile.summary import profile_run

TRACE = Path(__file__).parent / "fixtures" / "traces" / "h100" / "host-sync.pt.trace.json.gz"
COMMON = ("tool", "tool_version", "command", "created", "python")


def test_run_meta_names_the_tool_version_and_time_then_the_commands_own_fields():
    m = run_meta("bench", source="live", elapsed_s=1.5)
    assert list(m)[:5] == list(COMMON)
    assert m["tool"] == "perfstack" and m["command"] == "bench" and m["created"].endswith("+00:00")
    assert m["source"] == "live" and m["elapsed_s"] == 1.5


def test_a_profile_run_has_the_version_and_date_its_report_and_diff_read():
    meta = profile_run([TRACE]).meta
    assert set(COMMON) <= set(meta) and meta["command"] == "profile"
    assert "version" not in meta and meta["traces"] == [str(TRACE)]
