"""docs/plugin-authoring.md lists exactly the names of each SDK module's ``__all__``."""

from __future__ import annotations

import sdk_tables


def test_the_page_has_a_table_per_sdk_module() -> None:
    assert sdk_tables.tables_in(sdk_tables.PAGE.read_text(encoding="utf-8")) == list(sdk_tables.MODULES)


def test_the_tables_are_what_all_makes() -> None:
    text = sdk_tables.PAGE.read_text(encoding="utf-8")
    assert sdk_tables.regenerate(text) == text, (
        "docs/plugin-authoring.md's SDK tables differ from __all__: run `python tests/docs/sdk_tables.py`"
    )


def test_a_name_missing_from_a_table_is_seen() -> None:
    text = sdk_tables.PAGE.read_text(encoding="utf-8")
    planted = text.replace("`sql_utc`, ", "", 1).replace(", `sql_utc`", "", 1)
    assert planted != text
    assert sdk_tables.regenerate(planted) == text


def test_every_name_of_all_is_in_a_group() -> None:
    import importlib

    for module in sdk_tables.MODULES:
        listed = [n for _, names in sdk_tables.groups(module) for n in names]
        assert listed == list(importlib.import_module(module).__all__)
        assert all(names for _, names in sdk_tables.groups(module))
