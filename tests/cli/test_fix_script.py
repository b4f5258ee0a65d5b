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


def test_inside_a_container_the_limits_fix_is_the_containers_ulimit_not_limits_d(tmp_path, capsys):
    # Recorded in a container whose memlock limit is 8 MiB: limits.d is read at login, which a container's
    # processes never go through, so the only fix is to start the container again with --ulimit.
    bundle = Path(__file__).parent.parent / "fixtures" / "bundles" / "cpu-only-container"
    script = tmp_path / "fix.sh"
    main(["doctor", "--bundle", str(bundle), "--select", "memlock-limit", "--fix-script", str(script),
          "--fail-on", "never"])
    text = script.read_text()
    assert "memlock-limit (warning): start the container again with --ulimit memlock=-1" in text
    assert "limits.d/" not in text.replace("limits.d does not apply", "")
