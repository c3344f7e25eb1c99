"""README's configuration table lists every setting, and nothing that is not one."""

from __future__ import annotations

import re
from pathlib import Path

from marketplace.config import Settings

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_setting_is_documented_with_a_default() -> None:
    rows = re.findall(r"^\| `MARKETPLACE_([A-Z0-9_]+)` \| ([^|]+) \|", README.read_text(), re.M)
    documented = {name.lower() for name, _ in rows}
    assert documented == set(Settings.model_fields)
    assert all(default.strip() for _, default in rows)
