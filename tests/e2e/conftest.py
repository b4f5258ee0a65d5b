from __future__ import annotations

import sys
from pathlib import Path

# the Run builders shared with the renderer tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
