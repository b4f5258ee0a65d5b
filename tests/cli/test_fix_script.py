import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perfstack.cli.main import main

sys.path.insert(0, str(Path(__file__).parent.parent / "fixtures"))
import variants  # noqa: E402


@pytest.mark.skipif(not shutil.which("sh"), reason="needs /bin/sh")
@pytest.mark.parametrize("name", ["swappiness-60", "thp-never", "memlock-64k", "persistence-off", "shm-64m"])
def test_fix_script_is_valid_shell_and_names_the_finding(tmp_path, name, capsys):
    bundle = tmp_path / name
    variants.build(name, bundle)
    script = tmp_path / "fix.sh"
    main(["doctor", "--bundle", str(bundle), "--fix-script", str(script), "--fail-on", "never"])
    text = script.read_text()
    assert subprocess.run(["sh", "-n", str(script)]).returncode == 0
    assert variants.VARIANTS[name][0] in text
