"""The tabs' records, and what reads them: the app's endpoints, the README's tour and its API table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vitviz import tabs

README = (Path(__file__).parents[1] / "README.md").read_text()


@pytest.fixture(scope="module")
def api() -> dict:
    """The built app's named endpoints, as `Client.view_api()` lists them (no server needed)."""
    from vitviz.app.layout import build
    from vitviz.app.server import Server

    return build(Server(device="cpu"), "dinov2-small").get_api_info()["named_endpoints"]


def test_every_tab_has_a_first_screen_to_measure_or_says_why_not():
    """The projector test reads each tab's first screen from its record: a tab added without one, and without a
    reason, would go unmeasured."""
    for tab in tabs.TABS:
        assert (tab.first_screen is None) != (tab.exempt is None), tab.id
        if tab.first_screen is not None:
            assert tab.first_screen.controls or tab.first_screen.pictures, tab.id
        else:
            assert "test" in tab.exempt, (tab.id, "name the test that measures it instead")


def test_each_tab_is_a_module_of_the_app_in_the_records_order():
    from vitviz.app.layout import VIEWS

    assert len(set(tabs.ORDER)) == len(tabs.TABS)
    assert [view.__name__.rsplit(".", 1)[1] for view in VIEWS] == list(tabs.ORDER)
    assert [tabs.label(t) for t in ("tokens", "qk", "lesson")] == ["1 · Tokens", "4 · Queries & keys", "12 · Lesson"]


def test_the_readme_names_every_tab_as_the_tab_bar_does_in_its_order():
    """The README's tour opens each tab's paragraph with its label ("**3 · Inside a head.**"): a tab added or moved
    renumbers the others there too."""
    headings = re.findall(r"^\*\*(\d+ · [^.:*]+)[.:]", README, flags=re.MULTILINE)
    assert headings == [tabs.label(t) for t in tabs.ORDER]


def test_the_app_serves_the_records_endpoints_and_no_other(api):
    """Every public endpoint belongs to one tab's record (or is the image panel's `/analyze`), once."""
    listed = ["analyze", *(e for tab in tabs.TABS for e in tab.endpoints)]
    assert len(set(listed)) == len(listed)
    assert sorted(api) == sorted(f"/{e}" for e in listed)


def test_every_output_of_the_api_has_a_name(api):
    """A component without a label reaches the API as `value_N`, a number that changes when the layout does."""
    unnamed = {
        name: r["label"] for name, e in api.items() for r in e["returns"] if re.fullmatch(r"value_\d+", r["label"])
    }
    assert unnamed == {}


def readme_api_table() -> list[tuple[str, list[str]]]:
    """The README's HTTP API table: each row's endpoint and its inputs' names (what a parenthesis says dropped)."""
    section = README[README.index("## HTTP API") :]
    rows = re.findall(r"^\| `/(\w+)` \| ([^|]+) \|", section, flags=re.MULTILINE)
    return [
        (name, [re.sub(r"\s*\(.*", "", p).strip() for p in re.split(r",\s*(?![^()]*\))", inputs)])
        for name, inputs in rows
    ]


def test_the_readmes_api_table_lists_every_endpoint_and_its_inputs_in_the_tabs_order(api):
    """The one API table (docs/design.md links to it): a row per endpoint, the image panel's first, then each tab's,
    with the inputs as the app takes them."""
    table = readme_api_table()
    assert [name for name, _ in table] == ["analyze", *(e for tab in tabs.TABS for e in tab.endpoints)]
    for name, inputs in table:
        assert inputs == [p["parameter_name"] for p in api[f"/{name}"]["parameters"]], name


def test_the_design_notes_number_each_tab_they_describe_as_the_tab_bar_does():
    """docs/design.md describes some of the tabs, each under its label: a tab added before them renumbers them."""
    design = (Path(__file__).parents[1] / "docs" / "design.md").read_text()
    headings = re.findall(r"^\*\*(\d+ · [^.:*]+)[.:]", design, flags=re.MULTILINE)
    by_title = {tab.title: tab.id for tab in tabs.TABS}
    assert headings
    for heading in headings:
        title = heading.split(" · ", 1)[1]
        assert title in by_title and tabs.label(by_title[title]) == heading, heading
    assert headings == sorted(headings, key=lambda h: int(h.split(" · ")[0]))
