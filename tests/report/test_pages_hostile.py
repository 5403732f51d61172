"""The pages (``report.html``, ``triage.html``) show hostile strings as text, never as markup.

A cohort whose every user-controlled string carries an HTML/JS payload (case ids from the file names, class names,
region names, shift labels, the output folder, the page title, the model description of the predictions) goes through
evaluate + report (classes and regions) and certify + triage (+ the triage page, with a fingerprint-mismatch banner);
each page is parsed with :mod:`html.parser` and compared with the same run on benign names: same element and attribute
names, no ``on*`` attribute, no ``javascript:`` URL, no element with a payload's id, and every payload is in the page's
text (a ``$`` in them would be mathtext in the figures: they are drawn as text). Headless Chromium then loads each page:
the payloads, if run, would set the title to ``PWNED``. The module also holds the regression test of the first
reproduction (an undefined score's case id) and the checks of :mod:`monai_unc.report.markup`.
"""

from __future__ import annotations

import ast
import html
import json
import re
import shutil
import subprocess
import warnings
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.evaluation import EvaluationConfig, run_evaluate
from monai_unc.evaluation.triage import RULE_FILE
from monai_unc.report.html import build_report
from monai_unc.report.markup import Markup, check_url, document, el, escape, frag, raw_text_element
from monai_unc.report.triage import link_page
from monai_unc.workflows.infer import InferSettings, check_run_settings
from monai_unc.workflows.report import triage_with_page
from monai_unc.workflows.triage import certify_and_triage
from tests._cases import write_infer_case_records
from tests._paths import ROOT

# in a file name: no '/' and no '.' (the extension); '$\sqrt{$' would be a matplotlib mathtext error in a figure
FILE_PAYLOAD = ("x\"'><img src=x id=pwn-file onerror=\"document.title='PWNED'\">"
                "<svg id=pwn-svg onload=document.title=id>$\\sqrt{$")
PAYLOAD = ("</title></style></script><script id=pwn-script>document.title='PWNED'</script><img src=x id=pwn-{0} "
           "onerror=\"document.title='PWNED'\"><a id=pwn-a-{0} href=\"javascript:document.title='PWNED'\">{0}</a>"
           "$\\frac$<!--")
N_CASES = 8
EMPTY = 1  # the case whose predicted foreground is empty: its fg-mean score is undefined


def _names(hostile: bool) -> dict[str, str]:
    if not hostile:
        return {"case": "case", "folder": "out", "class": "lesion", "region": "tumour", "shift": "scanner",
                "title": "QC", "model": "net A", "other_model": "net B"}
    return {"case": "case" + FILE_PAYLOAD, "folder": "out" + FILE_PAYLOAD,
            **{k: PAYLOAD.format(k) for k in ("class", "region", "shift", "title", "model", "other_model")}}


def _stamp(pred: Path, model: str) -> None:
    """The ``infer.json`` and case records that ``monai-unc infer`` writes, with ``model`` as the model description."""
    (pred / "infer.json").unlink(missing_ok=True)
    check_run_settings(pred, InferSettings(model=model, method="mcdropout", samples=4, roi=[12], overlap=0.25,
                                           intensity="none", measures=["predictive_entropy"], seed=0,
                                           activation="softmax", checkpoints=[]), overwrite=True)
    write_infer_case_records(pred)  # and the case records, as of one finished run


def _cohort(root: Path, case: str, n: int = N_CASES, empty: int | None = EMPTY) -> tuple[dict[str, Path], list[str]]:
    """The toy cohort with the case ids ``<i><case>``; case ``empty`` has an empty predicted foreground."""
    data = write_toy_cohort(root, n_cases=n, shape=(12, 12, 12), shifts=("none", "intensity"))
    ids = [f"{i}{case}" for i in range(n)]
    for i, cid in enumerate(ids):
        for folder in (data["images"], data["labels"], data["predictions"]):
            for p in folder.glob(f"toy{i:03d}*"):
                p.rename(p.with_name(cid + p.name[len(f"toy{i:03d}"):]))
    if empty is not None:
        pred = data["predictions"]
        for name, fill in ((f"{ids[empty]}_probs.nii.gz", (1.0, 0.0)), (f"{ids[empty]}_seg.nii.gz", None)):
            img = nib.load(pred / name)
            arr = np.zeros(img.shape, np.int16) if fill is None else np.asarray(img.dataobj).copy()
            if fill is not None:
                arr[..., 0], arr[..., 1] = fill
            nib.save(nib.Nifti1Image(arr, img.affine), pred / name)
    return data, ids


def _region_predictions(pred: Path, out: Path, ids: list[str]) -> Path:
    """The class predictions as those of a one-region sigmoid model (``infer --activation sigmoid --regions``): the
    foreground channel of ``_probs``, ``_seg`` and ``_predictive_entropy`` as ``(X, Y, Z, 1)``."""
    out.mkdir()
    for cid in ids:
        for suffix in ("_probs", "_seg", "_predictive_entropy"):
            img = nib.load(pred / f"{cid}{suffix}.nii.gz")
            arr = np.asarray(img.dataobj)
            arr = arr[..., 1:] if suffix == "_probs" else arr[..., None]
            nib.save(nib.Nifti1Image(arr, img.affine), out / f"{cid}{suffix}.nii.gz")
    return out


def _build(root: Path, names: dict[str, str]) -> dict[str, Path]:
    """Every page of the run: the class report, the region report, the triage page (certify + triage) and the
    triage page of a second model's predictions (--allow-mismatch: the fingerprint banner)."""
    out = root / names["folder"]
    data, ids = _cohort(root / "data", names["case"])
    _stamp(data["predictions"], names["model"])
    shifts = {cid: ("none" if i % 2 == 0 else names["shift"]) for i, cid in enumerate(ids)}
    pages = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        cfg = EvaluationConfig(budget=0.25, shifts=shifts, class_names=["background", names["class"]], spatial=False,
                               target_risk=0.5, delta=0.2)
        state, _, _ = run_evaluate(data["labels"], data["predictions"], out / "eval", cfg, images=data["images"])
        pages["report"] = build_report(out / "eval", n_cases=1, title=names["title"])
        rcfg = EvaluationConfig(budget=0.25, shifts=shifts, regions={names["region"]: [1]}, spatial=False)
        regions = _region_predictions(data["predictions"], root / "regions", ids)
        run_evaluate(data["labels"], regions, out / "regions", rcfg)
        pages["regions"] = build_report(out / "regions", n_cases=0, title=names["title"])
        _, _, pages["triage"] = certify_and_triage(state, cfg, data["predictions"], out / "triage", ids[0::2],
                                                   ids[1::2], target_risk=0.5, delta=0.2, images=data["images"],
                                                   n_overlays=1)
        other = root / "other"
        shutil.copytree(data["predictions"], other)
        _stamp(other, names["other_model"])
        _, pages["mismatch"] = triage_with_page(other, out / "eval" / RULE_FILE, out / "mismatch",
                                                allow_mismatch=True, cases=0, progress=False)
    link_page(pages["report"], pages["triage"], names["title"])
    return pages


class _Page(HTMLParser):
    """What a browser would build from a page: element and attribute names, ids, URLs, event attributes, text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: Counter[str] = Counter()
        self.attributes: set[tuple[str, str]] = set()
        self.ids: list[str] = []
        self.events: list[tuple[str, str]] = []
        self.urls: list[str] = []
        self.scripts: list[tuple[str | None, str | None]] = []  # (type, src) of every <script>
        self.text: list[str] = []
        self.title = ""
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] += 1
        self._in_title = tag == "title"
        if tag == "script":
            a = dict(attrs)
            self.scripts.append((a.get("type"), a.get("src")))
        for name, value in attrs:
            self.attributes.add((tag, name))
            if name.startswith("on"):
                self.events.append((tag, name))
            if name == "id":
                self.ids.append(value or "")
            if name in ("href", "src", "action", "formaction"):
                self.urls.append(value or "")

    def handle_endtag(self, tag: str) -> None:
        self._in_title = False

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._in_title:
            self.title += data

    def handle_comment(self, data: str) -> None:
        self.tags["!--"] += 1


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {kind: _build(tmp_path_factory.mktemp(kind), _names(kind == "hostile")) for kind in ("clean", "hostile")}


@pytest.mark.parametrize("page", ["report", "regions", "triage", "mismatch"])
def test_no_payload_becomes_markup(runs, page):
    clean, hostile = _parse(runs["clean"][page]), _parse(runs["hostile"][page])
    assert hostile.tags == clean.tags  # element by element: no injected one (the report's own script only)
    # the scripts: the report's own inline one, the viewer's two files beside the page, and its JSON data blocks
    viewer_files = [(None, "assets/niivue.umd.js"), (None, "assets/viewer.js")]
    code = [sc for sc in hostile.scripts if sc[0] != "application/json"]
    data = [sc for sc in hostile.scripts if sc[0] == "application/json"]
    assert code.count((None, None)) == (1 if page in ("report", "regions") else 0)
    assert [sc for sc in code if sc != (None, None)] == (viewer_files if data else [])
    assert all(src is None for _, src in data)
    assert hostile.attributes == clean.attributes
    assert not hostile.events and not clean.events
    assert not [u for u in hostile.urls if re.sub(r"[\x00-\x20]", "", u).lower().startswith("javascript:")]
    assert all(u.startswith("data:") or not re.match(r"[a-z][a-z0-9+.-]*:", u, re.I) for u in hostile.urls)
    assert not [i for i in hostile.ids if i.startswith("pwn")]
    text = "".join(hostile.text)
    assert FILE_PAYLOAD in text  # shown as the characters they are
    assert hostile.title == (PAYLOAD.format("title") if page in ("report", "regions") else clean.title)


def test_each_payload_is_shown_where_its_string_goes(runs):
    """Every hostile string reaches a page (so the test above tests something), as text."""
    text = {k: "".join(_parse(p).text) for k, p in runs["hostile"].items()}
    assert PAYLOAD.format("title") in text["report"] and PAYLOAD.format("title") in text["regions"]
    assert "out" + FILE_PAYLOAD in text["report"]  # the evaluation folder in the header
    assert PAYLOAD.format("shift") in text["report"]  # the shift column
    assert PAYLOAD.format("region") in text["regions"]  # the region table
    for model in ("model", "other_model"):  # the fingerprint's model descriptions, as JSON strings in the banner
        assert json.dumps(PAYLOAD.format(model)) in text["mismatch"]
    assert "Cases without a defined score are ranked first: 1case" + FILE_PAYLOAD in text["report"]
    triage = runs["hostile"]["triage"].read_text()
    assert 'data-case="1case' + str(escape(FILE_PAYLOAD)) in triage


def test_chromium_runs_no_payload(runs, tmp_path):
    """Headless Chromium loads every hostile page: the title is the page's, no injected element exists, and no
    console error is logged."""
    exe = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    if exe is None:
        pytest.skip("Chromium is not installed (CI installs the Debian package 'chromium'): the page checks above ran, "
                    "the browser check did not")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--enable-logging=stderr", "--v=0",
             "--enable-unsafe-swiftshader",
             "--virtual-time-budget=3000", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom"]
    for name, path in runs["hostile"].items():
        r = subprocess.run([exe, *flags, path.resolve().as_uri()], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        dom = r.stdout
        assert 'id="triage-table"' in dom, (name, r.stderr[-2000:])  # the page was rendered
        title = re.search(r"<title>(.*?)</title>", dom, re.S)
        assert title is not None and html.unescape(title.group(1)) == _parse(path).title != "PWNED", name
        assert "id=\"pwn" not in dom and "<svg" not in dom and "<script id" not in dom, name
        console = [ln for ln in r.stderr.splitlines() if ("CONSOLE" in ln or "Uncaught" in ln)
                   and '"niivue-info ' not in ln and "GL Driver Message" not in ln]  # the viewer's start-up
        # notes and the software WebGL driver's performance notes are not errors
        assert not console, (name, console)


# ------------------------------------------------------------------------------------------------ regression
def test_undefined_score_case_id_is_escaped(tmp_path):
    """Issue #26, item 1: a case named ``x<img src=x onerror=alert(1)>`` whose score is undefined (empty predicted
    foreground) appeared unescaped in "Cases without a defined score are ranked first: ..."."""
    bad = "x<img src=x onerror=alert(1)>"
    data, ids = _cohort(tmp_path / "data", bad, n=3, empty=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _, summary, _ = run_evaluate(data["labels"], data["predictions"], tmp_path / "eval", EvaluationConfig())
    assert ids[0] in summary["score"]["undefined"]
    text = build_report(tmp_path / "eval", n_cases=0).read_text()
    assert "<img src=x" not in text
    # the id escaped and isolated from the text around it (review 61: <bdi>)
    assert "Cases without a defined score are ranked first: <bdi>0x&lt;img src=x onerror=alert(1)&gt;</bdi>" in text


# ------------------------------------------------------------------------------------------------ the builder
def test_markup_escapes_what_is_not_markup():
    assert escape("<a href='x'>&") == "&lt;a href=&#x27;x&#x27;&gt;&amp;"
    assert escape(Markup("<b>x</b>")) == "<b>x</b>" and isinstance(escape(3), Markup)
    assert Markup("<b>") + "<i>" == "<b>&lt;i&gt;" and "<i>" + Markup("<b>") == "&lt;i&gt;<b>"
    assert isinstance(Markup("<b>") + "x", Markup) and isinstance("x" + Markup("<b>"), Markup)
    assert Markup("<br>").join(["<", Markup("<hr>")]) == "&lt;<br><hr>"
    assert frag("<", el("b", "<"), None, 1) == "&lt;<b>&lt;</b>1"
    assert el("p", "a", el("b", "b"), class_="", id=None, hidden=True, data_x="\"'") == \
        '<p class="" hidden data-x="&quot;&#x27;">a<b>b</b></p>'
    assert el("img", alt="<", src="figures/a b.png") == '<img alt="&lt;" src="figures/a b.png">'
    # a Markup attribute value is escaped too: an attribute never holds markup
    assert el("td", data_case=Markup('"><script>')) == '<td data-case="&quot;&gt;&lt;script&gt;"></td>'


@pytest.mark.parametrize("tag, kwargs, msg", [
    ("td", {"onclick": "x"}, "event handler"),
    ("td", {"ONCLICK": "x"}, "invalid attribute"),
    ("td", {"on_load": "x"}, "event handler"),
    ("td", {"a b": "x"}, "invalid attribute"),
    ("script", {}, "raw_text_element"),
    ("style", {}, "raw_text_element"),
    ("x y", {}, "invalid element"),
    ("a", {"href": "javascript:alert(1)"}, "relative file path"),
    ("a", {"href": " JaVa\tScRiPt:alert(1)"}, "relative file path"),
    ("a", {"href": "java\nscript:alert(1)"}, "relative file path"),
    ("a", {"href": "https://example.org/x"}, "relative file path"),
    ("a", {"href": "//example.org/x"}, "relative file path"),
    ("a", {"href": "file:///etc/passwd"}, "relative file path"),
    ("a", {"href": "/etc/passwd"}, "relative file path"),
    ("a", {"href": "\\\\host\\x"}, "relative file path"),
    ("img", {"src": "data:text/html;base64,PHNjcmlwdD4="}, "data: URLs"),
    ("img", {"src": "data:image/svg+xml;base64,PHN2Zz4="}, "data: URLs"),
    ("img", {"src": "data:image/png,<svg onload=alert(1)>"}, "data: URLs"),
])
def test_builder_refuses_unsafe_elements_attributes_and_urls(tag, kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        el(tag, **kwargs)


def test_urls_and_raw_text():
    assert check_url("../triage/triage.html") == "../triage/triage.html"
    assert check_url("data:image/png;base64,iVBORw0KGgo=") and check_url("data:text/csv;base64,YSxi")
    with pytest.raises(TypeError, match="href"):
        check_url(None, "href")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="void"):
        el("img", "child")
    assert raw_text_element("style", "a{b:c}") == "<style>a{b:c}</style>"
    for text in ("x</script><script>alert(1)", "x</STYLE>", "<!-- x"):
        with pytest.raises(ValueError, match="must not hold"):
            raw_text_element("script", text)
    with pytest.raises(ValueError, match="script"):
        raw_text_element("div", "x")
    page = document("<t>", "a{}", el("p", "x"), script="var a = 1;")
    assert page.startswith("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">")
    assert "<title>&lt;t&gt;</title>" in page and page.endswith("<script>var a = 1;</script></body></html>\n")


def test_link_page_escapes_and_quotes_the_link(tmp_path):
    page = tmp_path / "r" / "report.html"
    page.parent.mkdir()
    page.write_text("<html><body><header><h1>QC</h1></header></body></html>")
    target = tmp_path / "t:x#<b>" / "triage.html"
    link_page(page, target, "<script>alert(1)</script>")
    text = page.read_text()
    assert '<a href="../t%3Ax%23%3Cb%3E/triage.html" style="color:#fff">&lt;script&gt;' in text
    assert "<script>" not in text and text.count("<a ") == 1
    link_page(page, target, "again")
    assert page.read_text() == text


_TAG = re.compile(r"</?[a-zA-Z!]")


def markup_outside_the_builder(path: Path) -> list[str]:
    """Where a page module makes markup without the builder: ``Markup(...)`` on a non-literal, ``html.escape``, or
    an f-string / string literal that writes a tag (``<x`` or ``</x``); docstrings, error messages, ``Markup("...")``
    literals and ``.replace`` / ``in`` probes of a page aside.

    Returns:
        One ``"file:line: what"`` per finding.
    """
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    errors = {id(n) for r in ast.walk(tree) if isinstance(r, ast.Raise) for n in ast.walk(r)}  # messages
    bad = []
    for node in ast.walk(tree):
        if id(node) in errors:
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Markup":
            if not (len(node.args) == 1 and isinstance(node.args[0], ast.Constant)):
                bad.append(f"{path.name}:{node.lineno}: Markup() on a non-literal")
        elif isinstance(node, ast.Attribute) and node.attr == "escape" and getattr(node.value, "id", "") == "html":
            bad.append(f"{path.name}:{node.lineno}: html.escape (use the builder)")
        elif isinstance(node, ast.JoinedStr) and any(
                isinstance(v, ast.Constant) and _TAG.search(str(v.value)) for v in node.values):
            bad.append(f"{path.name}:{node.lineno}: an f-string writes markup")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
              and _TAG.search(node.value) and not _markup_literal(tree, node)):
            bad.append(f"{path.name}:{node.lineno}: a string literal writes markup: {node.value[:40]!r}")
    return bad


def test_pages_build_html_through_the_builder_only():
    """The page modules make markup only with the builder (:func:`markup_outside_the_builder`) outside
    :mod:`monai_unc.report.markup`."""
    bad = [b for name in ("html.py", "triage.py", "monitor.py")
           for b in markup_outside_the_builder(ROOT / "monai_unc" / "report" / name)]
    assert not bad, "\n".join(bad)


def _markup_literal(tree: ast.Module, node: ast.Constant) -> bool:
    """Whether ``node`` is the argument of a ``Markup(...)`` call, or a ``.replace`` / ``in`` probe of a page."""
    for parent in ast.walk(tree):
        if isinstance(parent, ast.Call) and node in parent.args:
            if isinstance(parent.func, ast.Name) and parent.func.id == "Markup":
                return True
            if isinstance(parent.func, ast.Attribute) and parent.func.attr == "replace":
                return True
        if isinstance(parent, ast.Compare) and node in [parent.left, *parent.comparators]:
            return True
    return False


@pytest.mark.parametrize("cid", ["../pwn", "a/b", "/abs", "", "x\0y"])
def test_case_figure_path_refuses_ids_that_leave_the_figure_folder(tmp_path, cid):
    """A case id from an edited triage.json or metrics.csv cannot put a figure outside the page's figures/."""
    from monai_unc.report.plots import case_figure_path

    with pytest.raises(ValueError, match="cannot name a figure file"):
        case_figure_path(tmp_path, cid)


@pytest.mark.parametrize("cid", ["x<img src=x onerror=alert(1)>", "a..b", "..", "$\\frac$"])
def test_case_figure_path_keeps_odd_but_harmless_ids_inside_the_folder(tmp_path, cid):
    from monai_unc.report.plots import case_figure_path

    path = case_figure_path(tmp_path, cid)
    assert path.parent == tmp_path and path.name == f"case_{cid}.png"


def test_pages_name_case_figures_through_one_helper():
    """Both pages build a case figure's file name with case_figure_paths only (the triage page through
    write_case_figures), which names each through case_figure_path (no hand-built ``case_...png``)."""
    for name in ("html.py", "triage.py", "monitor.py"):
        text = (ROOT / "monai_unc" / "report" / name).read_text()
        if name != "monitor.py":  # the monitoring dashboard draws no case figures (inline SVG charts only)
            # the triage page writes its case figures with the report's write_case_figures (case_figure_paths)
            assert ("case_figure_paths(fig_dir, " in text or "write_case_figures(fig_dir, " in text) \
                and "case_figure_path(fig_dir, cid)" not in text, name
        assert 'f"case_{cid}.png"' not in text and "case_{" not in text, name
    assert "case_figure_path(folder, c)" in (ROOT / "monai_unc" / "report" / "html.py").read_text()
