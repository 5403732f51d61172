"""Claims of the documentation a newcomer relies on, checked against what the code writes and does (hostile review 63
of the documentation).

- docs/triage.md lists the columns of ``triage.csv``: it said "voxel counts" and left out ``spacing``, which every
  triage writes (the voxel size a rule's ``geometry`` is compared with); every column a triage writes is now named.
- docs/spatial_metrics.md lists the degenerate inputs whose BUC is NaN with a warning, and left out the commonest: a
  boundary region that covers the whole volume (the docs/cli.md round trip on 16^3 toy cases prints that warning for
  every case).
- docs/report.md said the ECE columns of ``metrics.csv`` use 15 bins; they use ``--n-bins`` (default 15).
- docs/cli.md: "so does every refused path, of every command: an input folder that is missing [names the option]";
  ``dicom-export --evaluation`` / ``--triage`` / ``--conformal`` said "no metrics.csv in x: is it the output folder of
  'monai-unc evaluate'?" and ``nnunet-predict`` / ``nnunet-calibrate -m`` "trained model folder not found: x", naming
  no option, nor did ``infer --network`` and ``monitor record --sites`` for a missing file. Every input-folder option
  of every command, and the input-file options, are now probed with a missing path.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from tests._paths import ROOT


def _text(path: str) -> str:
    return " ".join((ROOT / path).read_text(encoding="utf-8").split())


@pytest.fixture(scope="module")
def triaged(tmp_path_factory):
    """A referral rule certified on a toy cohort and the cohort triaged with it: the ``triage.csv`` header."""
    from monai_unc.cli import main
    from monai_unc.data.cohorts import write_toy_cohort
    from monai_unc.io import read_csv

    root = tmp_path_factory.mktemp("triaged")
    mp = pytest.MonkeyPatch()
    mp.setenv("MONAI_UNC_CONFIG_DIR", str(root / "config"))
    try:
        data = write_toy_cohort(root / "toy", n_cases=8, shape=(12, 12, 12))
        assert main(["evaluate", "-l", str(data["labels"]), "-p", str(data["predictions"]), "-o", str(root / "ev"),
                     "--images", str(data["images"]), "--target-risk", "0.5", "--conformal", "outer:fnr=0.3",
                     "--no-spatial", "--quiet"]) == 0
        assert main(["triage", "-p", str(data["predictions"]), "--rule", str(root / "ev" / "referral_rule.json"),
                     "--images", str(data["images"]), "-o", str(root / "tr"), "--cases", "0", "--quiet"]) == 0
        # --cases 0: no case figures or viewers on triage.html, which no test here reads (triage.csv is the same)
    finally:
        mp.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = read_csv(root / "tr" / "triage.csv")
    import json

    rule = json.loads((root / "ev" / "referral_rule.json").read_text())
    return list(rows[0]), rule, root, data


def _triage_csv_paragraph() -> str:
    text = _text("docs/triage.md")
    start = text.index("`triage/`: `triage.csv`")
    return text[start:text.index("`triage.json` (decisions", start)]


def test_every_column_of_triage_csv_is_named_in_triage_md(triaged):
    columns, rule, _, _ = triaged
    paragraph = _triage_csv_paragraph()
    named = set(re.findall(r"`(\w+)`", paragraph)) | {c.strip() for c in
                                                      re.search(r"`(case, [^`]+)`", paragraph).group(1).split(",")}
    measure = rule["score"]["measure"]
    described = {f"{measure}_{s}" for s in ("mean", "fg_mean", "patch_mean")}  # "the measure's three case scores"
    described |= {c for c in columns if c.startswith("expected_dice_") and c not in named}  # expected_dice_<class>
    assert "expected_dice_<class>" in paragraph and "the measure's three case scores" in paragraph
    missing = [c for c in columns if c not in named | described]
    assert not missing, f"docs/triage.md does not name the triage.csv columns {missing}"
    assert "spacing" in columns  # the column the page left out


def _buc_degenerate_cases():
    """``(what the docs call it, uncertainty, pred, target, width)`` for every reason BUC is NaN."""
    shape = (1, 1, 8, 8, 8)
    u = np.random.default_rng(0).random(shape)
    blob = np.zeros((1, 8, 8, 8), dtype=np.int64)
    blob[:, 2:6, 2:6, 2:6] = 1
    empty = np.zeros_like(blob)
    yield "no boundary", u, empty, blob, None
    yield "empty target", u, blob, empty, None
    yield "covers the whole volume", u, blob, blob, 20.0
    yield "zero uncertainty", np.zeros(shape), blob, blob, 1.0


@pytest.mark.parametrize("case", list(_buc_degenerate_cases()), ids=lambda c: c[0])
def test_every_reason_buc_is_nan_is_in_spatial_metrics_md(case):
    from monai_unc.metrics import boundary_uncertainty_concentration

    what, u, pred, target, width = case
    with pytest.warns(UserWarning, match="BUC"):
        value = boundary_uncertainty_concentration(u, pred, target, width=width)
    assert np.isnan(np.asarray(value)).all()
    text = _text("docs/spatial_metrics.md")
    listed = text.split("Degenerate but valid input returns NaN with a `UserWarning`:", 1)[1].split("Bad input", 1)[0]
    phrases = {"no boundary": "a label map with no boundary", "empty target": "an empty target",
               "covers the whole volume": "covers the whole volume", "zero uncertainty": "zero uncertainty everywhere"}
    assert phrases[what] in listed, f"docs/spatial_metrics.md does not list the degenerate BUC input: {what}"


def test_report_md_names_the_option_of_the_ece_bins():
    from monai_unc.workflows.arguments import add_command_parsers  # noqa: F401 - the options live there
    from tests.docs.test_review61_docsaudit import _commands

    default = next(a.default for a in _commands()["evaluate"]._actions if "--n-bins" in a.option_strings)
    row = next(line for line in (ROOT / "docs" / "report.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `ece`, `classwise_ece`"))
    assert "`--n-bins`" in row and f"default {default}" in row, row


MISSING = "missing_folder"


def _input_folder_calls(root, data):
    """``(option, argv)``: every command's input-folder and input-file options, each given a missing path, the others
    valid."""
    ev, pred, images = str(root / "ev"), str(data["predictions"]), str(data["images"])
    labels, rule, crule = str(data["labels"]), str(root / "ev" / "referral_rule.json"), str(root / "ev" /
                                                                                            "conformal_rule.json")
    out, weights = str(root / "probe_out"), str(root / "w.pt")
    calls = [
        ("--input", ["infer", "--input", MISSING, "-o", out, "--model", "example"]),
        ("--labels", ["evaluate", "--labels", MISSING, "-p", pred, "-o", out]),
        ("--predictions", ["evaluate", "-l", labels, "--predictions", MISSING, "-o", out]),
        ("--images", ["evaluate", "-l", labels, "-p", pred, "-o", out, "--images", MISSING]),
        ("--uncertainty", ["evaluate", "-l", labels, "-p", pred, "-o", out, "--uncertainty", MISSING]),
        ("--evaluation", ["report", "--evaluation", MISSING]),
        ("--images", ["report", "-e", ev, "-o", out, "--images", MISSING]),
        ("--input", ["calibrate", "--input", MISSING, "-l", labels, "-o", out + ".pt", "--model", "example"]),
        ("--labels", ["calibrate", "-i", images, "--labels", MISSING, "-o", out + ".pt", "--model", "example"]),
        ("--predictions", ["triage", "--predictions", MISSING, "--rule", rule, "-o", out]),
        ("--images", ["triage", "-p", pred, "--rule", rule, "-o", out, "--images", MISSING]),
        ("--uncertainty", ["triage", "-p", pred, "--rule", rule, "-o", out, "--uncertainty", MISSING]),
        ("--predictions", ["conformal", "--predictions", MISSING, "--rule", crule, "-o", out]),
        ("--images", ["conformal", "-p", pred, "--rule", crule, "-o", out, "--images", MISSING]),
        ("--predictions", ["dicom-export", "--predictions", MISSING, "-s", images, "-o", out]),
        ("--series", ["dicom-export", "-p", pred, "--series", MISSING, "-o", out]),
        ("--evaluation", ["dicom-export", "-p", pred, "-s", images, "-o", out, "--evaluation", MISSING]),
        ("--triage", ["dicom-export", "-p", pred, "-s", images, "-o", out, "--triage", MISSING]),
        ("--conformal", ["dicom-export", "-p", pred, "-s", images, "-o", out, "--conformal", MISSING]),
        ("TRIAGE", ["monitor", "record", MISSING, "--db", str(root / "m.db")]),
        ("-i", ["nnunet-predict", "-i", MISSING, "-o", out, "-m", ev, "-device", "cpu"]),
        ("-m", ["nnunet-predict", "-i", images, "-o", out, "-m", MISSING, "-device", "cpu"]),
        ("-m", ["nnunet-calibrate", "-o", out, "-m", MISSING, "-device", "cpu"]),
        # input files
        ("--network", ["infer", "-i", images, "-o", out, "--network", MISSING + ".json", "--checkpoint", weights]),
        ("--network", ["calibrate", "-i", images, "-l", labels, "-o", out + ".pt", "--network", MISSING + ".json",
                       "--checkpoint", weights]),
        ("--checkpoint", ["infer", "-i", images, "-o", out, "--network", str(root / "net.json"), "--checkpoint",
                          MISSING]),
        ("--bundle", ["infer", "-i", images, "-o", out, "--bundle", MISSING]),
        ("--settings-from", ["infer", "-i", images, "-o", out, "--model", "example", "--settings-from", MISSING]),
        ("--shifts", ["evaluate", "-l", labels, "-p", pred, "-o", out, "--shifts", MISSING]),
        ("--calibration-cases", ["evaluate", "-l", labels, "-p", pred, "-o", out, "--target-risk", "0.2",
                                 "--calibration-cases", MISSING]),
        ("--lesion-samples", ["evaluate", "-l", labels, "-p", pred, "-o", out, "--lesions", "--lesion-samples",
                              MISSING]),
        ("--rule", ["triage", "-p", pred, "--rule", MISSING, "-o", out]),
        ("--conformal-rule", ["triage", "-p", pred, "--rule", rule, "-o", out, "--conformal-rule", MISSING]),
        ("--sites", ["monitor", "record", str(root / "tr"), "--db", str(root / "m.db"), "--sites", MISSING]),
        ("--show", ["keys", "--show", MISSING]),
    ]
    return calls


def test_a_missing_input_is_refused_naming_its_option(triaged, capsys, monkeypatch):
    """docs/cli.md: exit 2 and one line naming the option the user typed, for every refused path of every command
    (``infer --network x.json`` said "network spec must be ...", ``monitor record --sites x`` "No such file or
    directory: x")."""
    from monai_unc.cli import main

    _, _, root, data = triaged
    (root / "net.json").write_text('{"_target_": "monai.networks.nets.UNet", "spatial_dims": 3, "in_channels": 1, '
                                   '"out_channels": 2, "channels": [4, 8], "strides": [2]}')
    torch = pytest.importorskip("torch")
    torch.save({}, root / "w.pt")
    monkeypatch.chdir(root)
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(root / "config"))
    wrong = []
    for option, argv in _input_folder_calls(root, data):
        if argv[0].startswith("nnunet-") and not _has("nnunetv2"):
            continue
        if argv[0] == "dicom-export" and not _has("highdicom"):
            continue
        rc = main(argv)
        lines = capsys.readouterr().err.strip().splitlines()
        line = lines[-1] if lines else ""
        if rc != 2 or len(lines) != 1 or not re.search(rf"error: {re.escape(option)}\b.*{MISSING}", line):
            wrong.append(f"monai-unc {argv[0]} {option} {MISSING}: exit {rc}: {line}")
    assert not (root / "probe_out").exists()
    assert not wrong, "\n".join(wrong)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _last_demo_print() -> str:
    """The text of the last ``print`` of ``run_demo`` (its source, read with ``ast``): the demo's last line."""
    import ast

    tree = ast.parse((ROOT / "monai_unc" / "workflows" / "demo.py").read_text(encoding="utf-8"))
    run_demo = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "run_demo")
    prints = [n for n in ast.walk(run_demo) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "print"]
    last = max(prints, key=lambda n: (n.lineno, n.col_offset)).args[0]
    parts = last.values if isinstance(last, ast.JoinedStr) else [last]
    return "".join(v.value if isinstance(v, ast.Constant) else "..." for v in parts)


@pytest.mark.parametrize("page", ["README.md", "docs/cli.md"])
def test_what_the_pages_call_the_demos_last_line_is_its_last_print(page):
    """README.md and docs/cli.md said the demo's last line gives the wall and CPU time (`finished in ...`); two lines
    follow it, and the last is the report's path (found by running `monai-unc demo` as the README says)."""
    last = _last_demo_print()
    assert last.startswith("report: "), last
    text = _text(page)
    said = re.findall(r"last line[^.]*?`([^`]+)`", text) + re.findall(r"last line (?:prints|says) ([\w ]+)", text)
    assert said, f"{page} no longer says what the demo's last line is"
    for quote in said:
        assert quote.split()[0] == last.split()[0], f"{page}: the demo's last line is {last!r}, the page says {quote!r}"


def _defaults_by_option() -> dict[str, set[str]]:
    """``{option: {default as text}}`` over every command (and ``monitor``'s sub-commands) whose default is set."""
    import argparse

    from monai_unc import cli
    from tests.docs.test_review61_docsaudit import _commands

    out: dict[str, set[str]] = {}
    parsers = list(_commands().items())
    for name, parser in list(parsers):
        if name.startswith("nnunet-"):
            if not _has("nnunetv2"):
                continue
            full = cli.build_parser(name)[0]
            parser = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers += list(action.choices.items())
                continue
            if action.default in (None, argparse.SUPPRESS, False, True) or not action.option_strings:
                continue
            value = action.default
            text = " ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
            for option in action.option_strings:
                out.setdefault(option, set()).add(text)
    return out


#: where a page states an option's default: `--opt ...` (default X), `--opt`, default X, and a table row whose
#: description ends with the default in parentheses
_STATED = (re.compile(r"`(--?[a-zA-Z][\w-]*)[^`]*`[^`.;()]{0,40}\(default:? `?([\w.+-]+)`?[),;:]"),
           re.compile(r"`(--?[a-zA-Z][\w-]*)[^`]*`, default `?([\w.+-]+)`?[),;:.\s]"),
           re.compile(r"^\| `(--?[a-zA-Z][\w-]*)[^`|]*` \| [^|]*\(([\d.]+)\) \|$", re.M))


def _same_default(stated: str, defaults: set[str]) -> bool:
    for default in defaults:
        try:
            if float(stated) == float(default):
                return True
        except ValueError:
            if stated == default:
                return True
    return False


def test_every_default_a_page_states_for_an_option_is_the_parsers():
    """tests/docs/test_review61_docsaudit.py checks the defaults `--help` states; this checks those the pages state
    (`--lesion-iou IOU` ... (0.25), `--sample-batch-size K` ... (default `auto`), `--max_steps`, default 1000) against
    the parser's default of the option (of any command that has it: `--roi` differs between `infer` and `demo`)."""
    defaults = _defaults_by_option()
    found, wrong = 0, []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for pattern in _STATED:
            for m in pattern.finditer(text.replace("\n", " ") if pattern.flags & re.M == 0 else text):
                option, stated = m.group(1), m.group(2)
                if option not in defaults:
                    continue
                found += 1
                if not _same_default(stated, defaults[option]):
                    wrong.append(f"{page.name}: {option} default {stated!r}, parser {sorted(defaults[option])}")
    assert found >= 8, found
    assert not wrong, "\n".join(wrong)


def _public_top_level() -> set[str]:
    pkg = ROOT / "monai_unc"
    names = {p.stem for p in pkg.glob("*.py")} | {p.name for p in pkg.iterdir() if (p / "__init__.py").is_file()}
    return {n for n in names if not n.startswith("_")}


def test_readme_layout_names_every_public_module():
    """README.md's Layout table left out `monai_unc.losses`, `monitoring`, `state`, `product` and `products`."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    table = text.split("## Layout", 1)[1].split("\n\n", 2)[1]
    named = {n for row in table.splitlines() if row.startswith("| `monai_unc")
             for n in re.findall(r"`(?:monai_unc\.)?(\w+)`", row.split(" | ")[0])}
    assert not _public_top_level() - named, sorted(_public_top_level() - named)


def test_the_api_index_links_every_api_page():
    """docs/api/index.md's table of the API pages had no row for losses.md (in the site's navigation, not in the
    index a reader starts from)."""
    text = (ROOT / "docs" / "api" / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\((\w+)\.md\)", text))
    pages = {p.stem for p in (ROOT / "docs" / "api").glob("*.md") if p.name != "index.md"}
    assert not pages - linked, sorted(pages - linked)


def test_every_guide_is_linked_from_the_home_page_and_named_in_the_readme():
    """docs/index.md's list of guides had no link to dicom.md, lesions.md, monitoring.md, products.md, signing.md or
    training.md, and README.md's list of pages did not name lesions.md, products.md, signing.md or training.md:
    a newcomer starting from either did not learn they exist."""
    pages = {p.name for p in (ROOT / "docs").glob("*.md") if p.name != "index.md"}
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert not {p for p in pages if f"]({p}" not in index}, sorted(p for p in pages if f"]({p}" not in index)
    assert not {p for p in pages if f"docs/{p}" not in readme}, sorted(p for p in pages if f"docs/{p}" not in readme)
