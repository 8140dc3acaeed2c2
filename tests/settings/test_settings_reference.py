from pathlib import Path

from settings.loader import default_settings
from settings.reference import setting_descriptions, settings_table

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_setting_is_described():
    descriptions = setting_descriptions()
    missing = [name for name in default_settings() if not descriptions.get(name)]
    assert missing == []


def test_readme_settings_table_matches_the_defaults():
    assert settings_table() in README.read_text(encoding="utf-8"), (
        "README settings table is stale: paste `crawlcluster settings --markdown`")
