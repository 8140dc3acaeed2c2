from pathlib import Path

from settings.loader import default_settings
from settings.reference import setting_descriptions, settings_table

SETTINGS_DOC = Path(__file__).resolve().parents[2] / "docs" / "settings.md"


def test_every_setting_is_described():
    descriptions = setting_descriptions()
    missing = [name for name in default_settings() if not descriptions.get(name)]
    assert missing == []


def test_the_documented_settings_table_matches_the_defaults():
    assert settings_table() in SETTINGS_DOC.read_text(encoding="utf-8"), (
        "docs/settings.md's table is stale: paste `crawlcluster settings --markdown`")
