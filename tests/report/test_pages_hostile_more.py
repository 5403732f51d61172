"""The page builder under strings that attack the HTML tokenizer, beyond tests/report/test_pages_hostile.py.

tests/report/test_pages_hostile.py runs whole pages of hostile names; this module checks the single place strings
enter markup (:mod:`monai_unc.report.markup`) with an independent oracle: strings aimed at the tokenizer's states
(``</script >`` in upper case, ``<!--`` / ``-->``, ``<![CDATA[``, the line separators U+2028/2029, a lone surrogate,
character references, quotes of both kinds) go into element text, attribute values and a JSON data block; an HTML
parser (and, when installed, headless Chromium, which runs a constant page script that reads them back) must give
back exactly those strings, with no element, attribute or script beyond those written. It also extends the
"builder only" check of the page modules to the modules that test does not read (the viewer, the plots, the
reliability figures, the notebook viewer), and reads a damaged ``triage.json`` into the triage page.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import warnings
from html.parser import HTMLParser
from typing import Any

import pytest

from monai_unc.report.markup import document, el, json_script
from tests._paths import ROOT
from tests.report.test_pages_hostile import markup_outside_the_builder

HOSTILE = [
    "</script><script id=pwn1>document.title='PWNED'</script>",
    "</SCRIPT ><img id=pwn2 src=x onerror=\"document.title='PWNED'\">",
    "<!--<script>",
    "--><img id=pwn3 src=x>",
    "<![CDATA[<b id=pwn4>]]>",
    "a\u2028b\u2029c",
    "lone \ud800 surrogate",
    "&lt;b&gt; &amp;amp; &#60;i&#62; &#x3C;",
    "\"' onmouseover=\"document.title='PWNED'\" x='",
    "`${document.title='PWNED'}`",
    "tab\there\nnewline",
    "x</title></style></textarea></pre><p id=pwn5>",
]
# as page text a lone surrogate is U+FFFD (a page is UTF-8, which cannot hold one); in the JSON block it is kept
SHOWN = [s.replace("\ud800", "\ufffd") for s in HOSTILE]
_SCRIPT = """
document.addEventListener('DOMContentLoaded', function () {
  var out = {data: JSON.parse(document.getElementById('data').textContent), cells: []};
  document.querySelectorAll('p.cell').forEach(function (p) {
    out.cells.push({text: p.textContent, title: p.getAttribute('title'), data: p.getAttribute('data-case')});
  });
  out.ids = Array.prototype.map.call(document.querySelectorAll('[id]'), function (e) { return e.id; });
  out.tags = Array.prototype.map.call(document.querySelectorAll('*'), function (e) { return e.tagName; });
  document.getElementById('out').textContent = JSON.stringify(out);
});
"""


def _page() -> str:
    cells = [el("p", s, title=s, data_case=s, class_="cell") for s in HOSTILE]
    return document(HOSTILE[1], "p{margin:0}", json_script({"strings": HOSTILE, HOSTILE[0]: HOSTILE[2]}, "data"),
                    *cells, el("pre", id="out"), script=_SCRIPT)


class _Tree(HTMLParser):
    """Elements (with attributes), the text of every element and the raw text of scripts, as a browser reads them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.comments: list[str] = []
        self.texts: list[tuple[str, str]] = []
        self._open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))
        if tag not in ("meta", "img", "br"):
            self._open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._open and self._open[-1] == tag:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        self.texts.append((self._open[-1] if self._open else "", data))

    def handle_comment(self, data: str) -> None:
        self.comments.append(data)


def test_tokenizer_attacks_stay_text_attribute_values_and_json():
    tree = _Tree()
    tree.feed(_page())
    tree.close()
    tags = [t for t, _ in tree.elements]
    assert tags == ["html", "head", "meta", "meta", "title", "style", "body", "script", *["p"] * len(HOSTILE), "pre",
                    "script"]
    assert not tree.comments
    cells = [a for t, a in tree.elements if t == "p"]
    assert [a["title"] for a in cells] == SHOWN and [a["data-case"] for a in cells] == SHOWN
    assert all(set(a) == {"title", "data-case", "class"} for a in cells)
    p_texts = [d for t, d in tree.texts if t == "p"]
    assert p_texts == SHOWN
    assert [d for t, d in tree.texts if t == "title"] == [SHOWN[1]]
    scripts = [d for t, d in tree.texts if t == "script"]
    assert json.loads(scripts[0]) == {"strings": HOSTILE, HOSTILE[0]: HOSTILE[2]}  # the data block reads back
    assert scripts[1] == _SCRIPT


def test_chromium_reads_back_every_string(tmp_path):
    """A constant page script reads the JSON block, the text and the attributes back in Chromium: exactly the
    strings written, and no element the strings could have made."""
    exe = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    if exe is None:
        pytest.skip("Chromium is not installed: the parser check above ran, the browser check did not")
    page = tmp_path / "page.html"
    page.write_text(_page(), encoding="utf-8")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--virtual-time-budget=2000",
             f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom"]
    r = subprocess.run([exe, *flags, page.resolve().as_uri()], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    found = re.search(r'<pre id="out">(.*?)</pre>', r.stdout, re.S)
    assert found is not None, r.stdout[-2000:]
    out: dict[str, Any] = json.loads(html.unescape(found.group(1)))

    assert out["data"] == {"strings": HOSTILE, HOSTILE[0]: HOSTILE[2]}
    assert [c["text"] for c in out["cells"]] == SHOWN and [c["title"] for c in out["cells"]] == SHOWN
    assert [c["data"] for c in out["cells"]] == SHOWN
    assert out["ids"] == ["data", "out"]
    assert out["tags"] == ["HTML", "HEAD", "META", "META", "TITLE", "STYLE", "BODY", "SCRIPT",
                           *["P"] * len(HOSTILE), "PRE", "SCRIPT"]
    title = re.search(r"<title>(.*?)</title>", r.stdout, re.S)
    assert title is not None and html.unescape(title.group(1)) == HOSTILE[1]


# --------------------------------------------------------------------------------- strings UTF-8 cannot hold
def test_a_lone_surrogate_is_shown_as_the_replacement_character():
    """Python reads bytes that are not UTF-8 (a Latin-1 ``é`` in a command line argument or a file name) as lone
    surrogates; the page used to fail to be written ("surrogates not allowed")."""
    page = document("Caf\udce9", "a{}", el("p", "x\ud800y", title="\udfff"), json_script({"k": "\udce9"}, "d"))
    page.encode("utf-8")  # a page is UTF-8
    assert "<title>Caf\ufffd</title>" in page and '<p title="\ufffd">x\ufffdy</p>' in page
    assert '{"k": "\\udce9"}' in page  # JSON keeps it, as an escape


def test_figures_draw_a_lone_surrogate_as_the_replacement_character():
    """A class name or case id with a lone surrogate in a figure (title, legend, axis label) made matplotlib raise a
    ``TypeError`` while the page was built; it is drawn as U+FFFD, as on the pages."""
    from matplotlib.figure import Figure

    from monai_unc.report.plots import save_png

    fig = Figure(figsize=(2, 2), dpi=30)
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], label="L\udce9sion")
    ax.legend()
    ax.set_title("Caf\udce9 $\\frac")
    ax.set_xlabel("x\ud800")
    assert save_png(fig)[:4] == b"\x89PNG"
    assert ax.get_title() == "Caf\ufffd $\\frac" and ax.get_legend().get_texts()[0].get_text() == "L\ufffdsion"


@pytest.mark.slow
def test_report_title_in_latin1_on_the_command_line(tmp_path, capsys):
    """``monai-unc report --title $'Caf\\xe9'`` (a Latin-1 title): it exited 2 with "'utf-8' codec can't encode
    character '\\udce9' ...: surrogates not allowed"; now the page shows U+FFFD for the byte."""
    from monai_unc import cli
    from monai_unc.data.cohorts import write_toy_cohort

    data = write_toy_cohort(tmp_path / "data", n_cases=3, shape=(12, 12, 12))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert cli.main(["evaluate", "-l", str(data["labels"]), "-p", str(data["predictions"]), "-o",
                         str(tmp_path / "eval"), "--no-spatial", "-q"]) == 0
        title = os.fsdecode(b"Caf\xe9 QC")  # what sys.argv holds for these bytes
        rc = cli.main(["report", "-e", str(tmp_path / "eval"), "-o", str(tmp_path / "r"), "--cases", "0",
                       "--title", title, "-q"])
    assert rc == 0, capsys.readouterr().err
    text = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    assert "<title>Caf\ufffd QC</title>" in text


# --------------------------------------------------------------------------------- builder only, other modules
@pytest.mark.parametrize("name", ["viewer.py", "plots.py", "reliability.py", "notebook.py"])
def test_other_page_modules_build_html_through_the_builder_only(name):
    """The viewer (its legend, controls and data block), the figures and the notebook viewer write no markup of
    their own: a string reaches a page only through :mod:`monai_unc.report.markup`."""
    assert not markup_outside_the_builder(ROOT / "monai_unc" / "report" / name)


def test_the_checker_sees_markup_written_by_hand(tmp_path):
    """The check above finds what it looks for (so its silence means something)."""
    bad = tmp_path / "bad.py"
    bad.write_text('import html\nfrom x import Markup\nname = "n"\n'
                   'a = Markup(f"<b>{name}</b>")\nb = html.escape(name)\nc = f"<i>{name}</i>"\nd = "<u>"\n'
                   'e = Markup("<br>")\n')
    found = markup_outside_the_builder(bad)
    assert {int(f.split(":")[1]) for f in found} == {4, 5, 6, 7}, found  # not line 8: Markup on a literal


def _triage_summary() -> dict[str, Any]:
    """A ``triage.json`` of two cases (the fields :func:`~monai_unc.evaluation.triage.run_triage` writes)."""
    from monai_unc.evaluation.triage import ReferralRule

    rule = ReferralRule(score="predictive_entropy_fg_mean", threshold=0.5, feasible=True, target_risk=0.2, delta=0.1,
                        method="sgr", risk="failure", failure_dice=0.8, calibration_scores=(0.1, 0.9),
                        calibration_cases=("c0", "c1"), bound=0.1, coverage=1.0, observed_risk=0.0, n_candidates=1,
                        num_classes=2)
    cases = [{"case": "a", "score": 0.25, "decision": "accept", "reason": "ok", "code": "accepted", "rank": 2},
             {"case": "b", "score": 0.75, "decision": "review", "reason": "above", "code": "above_threshold",
              "rank": 1}]
    return {"n_cases": 2, "n_accepted": 1, "n_review": 1, "reasons": {"accepted": 1, "above_threshold": 1},
            "order": ["b", "a"],
            "fingerprint": {"status": "unverified"}, "notes": [], "rule_file": None, "rule_signature": None,
            "rule": rule.to_json(), "cases": cases, "files": {"a": None, "b": None}, "warnings": []}


@pytest.mark.parametrize("edit, field", [
    (lambda t: t.replace('"score": 0.25', '"score": NaN'), "not valid JSON"),  # was drawn as an undefined score
    (lambda t: t.replace('"n_cases": 2', '"n_cases": 1e400'), "not valid JSON"),  # was "inf new case(s)"
    (lambda t: t.replace('"score": 0.25', '"score": "0.25"'), "cases[0].score"),  # was taken as 0.25
    (lambda t: t.replace('"score": 0.25', '"score": "x"'), "cases[0].score"),  # was float()'s bare message
    (lambda t: t.replace('"order": ["b", "a"]', '"order": ["b", "z"]'), "order"),  # was KeyError: 'z'
    (lambda t: json.dumps({**json.loads(t), "cases": 5}), "'cases'"),  # was a TypeError traceback
    (lambda t: t.replace('"n_cases": 2', '"n_cases": 2, "n_cases": 3'), "given twice"),
    (lambda t: "[]", "JSON object"),  # was TypeError: list indices must be integers
    (lambda t: "{", "not valid JSON"),  # was a JSONDecodeError naming no file
])
def test_triage_page_refuses_a_damaged_triage_json_naming_file_and_field(tmp_path, edit, field):
    """Regression: build_triage_page read triage.json with plain json.loads and checked none of its fields."""
    from monai_unc.report.triage import build_triage_page

    text = json.dumps(_triage_summary())
    if field == "'cases'":  # the first test: the file as triage writes it draws a page
        (tmp_path / "triage.json").write_text(text)
        assert "predictive_entropy_fg_mean" in build_triage_page(tmp_path, n_cases=0, viewer=False).read_text()
    (tmp_path / "triage.json").write_text(edit(text))
    with pytest.raises(ValueError, match="triage.json") as e:
        build_triage_page(tmp_path, n_cases=0, viewer=False)
    assert field in str(e.value) and "\n" not in str(e.value)
