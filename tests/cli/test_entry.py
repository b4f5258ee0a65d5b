"""The light entry point starts the Python probe early only for commands that read the live machine."""

import pytest

from perfstack.cli.entry import reads_live_machine


@pytest.mark.parametrize("argv,live", [
    (["doctor"], True), (["doctor", "--json", "-q"], True), (["-v", "doctor"], True), (["capture", "out"], True),
    (["bench", "gemm"], True), (["doctor", "--bundle", "b"], False), (["doctor", "--bundle=b"], False),
    (["doctor", "--help"], False), (["report", "run.json"], False), (["explain"], False), ([], False),
    (["estimate", "infer"], False)])
def test_reads_live_machine(argv, live):
    assert reads_live_machine(argv) is live
