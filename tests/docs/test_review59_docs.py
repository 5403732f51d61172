"""Prose figures of the docs that no other test pins, checked against the code or the printed lines beside them
(hostile review 59 of the documentation)."""

from __future__ import annotations

import re

import pytest

from monai_unc.data.cohorts import DEMO_CALIBRATION_SHIFTS
from tests._paths import ROOT

# every place that states the full demo's calibration cohort: how many cases keep Dice >= 0.8 and how many fail
COMPOSITION = {
    "docs/cli.md": r"(\d+) keep Dice >= 0\.8, ~0\.\d+-0\.\d+; (\d+) fail",
    "docs/triage.md": r"(\d+) keep Dice >= 0\.8 \(~0\.\d+-0\.\d+\)\s+and (\d+) fail",
    "monai_unc/workflows/demo.py": r"(\d+) keep\s+Dice >= 0\.8 and (\d+) fail",
    "monai_unc/data/cohorts.py": r"(\d+) keep Dice >= 0\.8 \(~0\.\d+-0\.\d+\), (\d+) fail",
}


def _text(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


def test_the_demo_cohort_composition_is_the_same_everywhere():
    """docs/cli.md and docs/triage.md said 34 calibration cases keep Dice >= 0.8 and 8 fail, the composition before
    the resolution perturbation was fixed; the code's docstrings were updated to the measured 35 and 7 (the full
    demo's metrics.csv: cal_noise016, cal_noise012, cal_blur300, cal_gamma045, cal_blur220, cal_blur150 and
    cal_lowres400 below 0.8), the pages were not."""
    found = {}
    for path, pattern in COMPOSITION.items():
        m = re.search(pattern, _text(path))
        assert m, f"{path} no longer states the calibration cohort's composition as {pattern!r}"
        found[path] = (int(m.group(1)), int(m.group(2)))
    assert len(set(found.values())) == 1, found
    keep, fail = next(iter(found.values()))
    assert keep + fail == len(DEMO_CALIBRATION_SHIFTS)
    assert (keep, fail) == (35, 7)


def test_the_demo_cohort_inside_the_training_range():
    inside = sum(label == "none" for _, label, _, _ in DEMO_CALIBRATION_SHIFTS)
    assert f"{inside} of them inside the training augmentation range" in _text("docs/triage.md")
    assert f"{inside} inside\n#: the training augmentation range" in _text("monai_unc/data/cohorts.py")


def test_the_expected_dice_prose_matches_the_printed_lines():
    """docs/triage.md said the expected Dice 'can stay at 0.90-0.97' under a shift, the values of the merged
    foreground estimate of earlier versions; the printed lines on the same page (the class mean) show 0.77-0.89, and
    the shifted new_blur250 (real Dice 0.68) at 0.88."""
    text = _text("docs/triage.md")
    block = re.search(r"```\nreferral rule certified on 42 case\(s\).*?```", text, flags=re.S).group(0)
    row = re.search(r"new_blur250\s+[\d.]+\s+([\d.]+)\s+([\d.]+) \[", block)
    dice, estimate = float(row.group(1)), row.group(2)
    section = text.split("## The expected Dice and its conformal interval", 1)[1].split("\n## ", 1)[0]
    assert "0.90–0.97" not in section and "0.90-0.97" not in section
    assert re.search(rf"`new_blur250` has an expected Dice of {re.escape(estimate)}\b", section)
    assert f"a real Dice of {dice:.2f}" in section
    prose = re.search(r"`new_blur250` \(real Dice\s+([\d.]+), estimate ([\d.]+)\)", text)
    assert float(prose.group(1)) == dice and f"{float(prose.group(2)):.2f}" == estimate


def _pages():
    docs = ROOT / "docs"
    return [ROOT / "README.md", *sorted(docs.glob("*.md")), docs / "validation" / "page_template.md"]


def test_no_page_points_at_a_shared_folder_or_the_seed_papers():
    """docs/report.md cited "seed papers 000-003", docs/validation.md's title "the seeds' headline findings" (files a
    reader does not have: the source papers are named where they are used), and docs/distributed.md and
    docs/signing.md used /shared/... as their example paths of a shared file system."""
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"(?<![\w.-])shared/", text), page.name
        assert not re.search(r"seed papers?\b|\bseeds' ", text, flags=re.I), page.name


QUOTED_ERRORS = [  # (the command line, the message docs/cli.md quotes for it)
    (["evaluate", "-l", "labs", "-p", "pred", "-o", "ev", "--n-bins", "5000"],
     "--n-bins must be at most 4096 (...), got 5000"),
    (["evaluate", "-l", "labs", "-p", "pred", "-o", "ev"], "--labels folder not found: labs"),
    (["evaluate", "-l", "labs", "-p", "pred", "-o", "ev", "--images", "imgs"], "--images folder not found: imgs"),
    (["triage", "-p", "pred", "--rule", "eval", "-o", "tr"], "--rule: referral rule file eval is a folder, not a file"),
    (["infer", "-i", "pred", "-o", "out", "--model", "example"], "--output folder out is a file, not a folder"),
    (["monitor", "record", "run1", "--db", "m.db"], "TRIAGE folder not found: run1"),
]


def test_the_error_lines_cli_md_quotes_are_the_ones_printed(tmp_path, monkeypatch, capsys):
    """docs/cli.md quoted `--n-bins must be at most 4096, got 5000`; the line printed has the reason between the two
    (`(the cases' fine histograms hold 16 * n_bins bins per class)`), so the quote matched no line a reader greps."""
    from monai_unc.cli import main

    text = " ".join(_text("docs/cli.md").split())
    monkeypatch.chdir(tmp_path)
    for folder in ("pred", "eval", "labs"):
        (tmp_path / folder).mkdir()
    (tmp_path / "out").write_text("")
    for argv, quote in QUOTED_ERRORS:
        assert f"`{quote}`" in text, quote
        labs = tmp_path / "labs"
        if quote.startswith("--labels"):
            labs.rmdir()
        try:
            assert main(argv) == 2
        finally:
            labs.mkdir(exist_ok=True)
        err = capsys.readouterr().err
        assert re.search(".*".join(re.escape(part) for part in quote.split("(...)")), err), (quote, err)


def _rule_table_fields(text: str) -> tuple[set[str], dict[str, set[str]]]:
    section = text.split("## The files", 1)[1].split("`evaluate` writes the rule only", 1)[0]
    top, inner = set(), {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        first, rest = line.split(" | ", 1)
        names = set(re.findall(r"`(\w+)`", first))
        top |= names
        for name in names:
            inner[name] = set(re.findall(r"`(\w+)`", rest))
    return top, inner


@pytest.fixture(scope="module")
def certified(tmp_path_factory):
    """A referral rule certified on the toy cohort: ``(folder, config folder, the cohort's folders)``."""
    from monai_unc.cli import main
    from monai_unc.data.cohorts import write_toy_cohort

    root = tmp_path_factory.mktemp("certified")
    mp = pytest.MonkeyPatch()
    mp.setenv("MONAI_UNC_CONFIG_DIR", str(root / "config"))
    try:
        data = write_toy_cohort(root / "toy", n_cases=12, shape=(12, 12, 12))
        assert main(["evaluate", "-l", str(data["labels"]), "-p", str(data["predictions"]), "-o", str(root / "ev"),
                     "--images", str(data["images"]), "--target-risk", "0.5", "--no-spatial", "--quiet"]) == 0
    finally:
        mp.undo()
    return root, data


def test_every_field_of_a_referral_rule_is_in_the_table_of_triage_md(certified):
    """docs/triage.md's table of `referral_rule.json` left out `calibration.expected_dice`, `expected_dice_alpha` and
    `expected_dice_quantile`, which every rule `evaluate --target-risk` certifies now holds."""
    import json

    root, _ = certified
    rule = json.loads((root / "ev" / "referral_rule.json").read_text())
    top, inner = _rule_table_fields(_text("docs/triage.md"))
    assert set(rule) <= top, set(rule) - top
    for block in ("calibration", "score", "image_reference"):
        assert set(rule[block]) <= inner[block], (block, set(rule[block]) - inner[block])


def test_the_dropout_plans_paragraph_names_what_write_dropout_plans_writes():
    """docs/nnunet.md said the dropout plans hold `"dropout_op": "torch.nn.Dropout3d"` and `{"p": 0.2}` in every
    configuration; a `2d` configuration gets `torch.nn.Dropout2d`, and the kwargs hold `"inplace": false` too."""
    import json

    from monai_unc.nnunet.dropout import dropout_arch_kwargs

    text = _text("docs/nnunet.md")
    paragraph = text.split("2. **Plans variant, no trainer.**", 1)[1].split("\n3. ", 1)[0]
    paragraph = " ".join(paragraph.split())
    for conv in ("torch.nn.modules.conv.Conv2d", "torch.nn.modules.conv.Conv3d"):
        out = dropout_arch_kwargs({"conv_op": conv}, p=0.2)
        assert f'"{out["dropout_op"]}"' in paragraph, out["dropout_op"]
        assert json.dumps(out["dropout_op_kwargs"]) in paragraph


def test_readme_says_conformal_md_covers_the_command_line():
    """README's list of pages called docs/conformal.md "(Python API)"; the page documents `evaluate --conformal` and
    `monai-unc conformal` (its "Command line" section) as well."""
    readme = " ".join(_text("README.md").split())
    line = re.search(r"- `docs/conformal\.md` — (.*?) - `docs/", readme).group(1)
    assert "`monai-unc conformal`" in line and "`evaluate --conformal`" in line, line
    assert "## Command line" in _text("docs/conformal.md")


def test_keys_create_on_an_existing_pair_is_refused_as_the_docs_say(tmp_path, monkeypatch, capsys):
    """docs/cli.md said of `keys --create` "an existing pair is kept", and docs/signing.md that of two `keys --create`
    "the second waits, then signs with the first's"; the second is refused (exit 2) naming the pair."""
    from monai_unc.cli import main

    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(tmp_path / "config"))
    assert main(["keys", "--create", str(tmp_path / "k")]) == 0
    assert main(["keys", "--create", str(tmp_path / "k")]) == 2
    assert "a key pair exists at" in capsys.readouterr().err
    cli_md = " ".join(_text("docs/cli.md").split())
    assert "an existing pair is kept and the command refuses, exit 2" in cli_md
    signing = " ".join(_text("docs/signing.md").split())
    assert "of two `keys --create`, the second waits, then is refused, exit 2" in signing


def test_nnunet_predict_help_says_what_ssn_combines_with():
    """`nnunet-predict --help` said ssn runs "alone or with dropout"; it combines with folds and mirroring too
    (docs/nnunet.md; only rate_in is refused beside it)."""
    import argparse

    from monai_unc.nnunet.cli import add_parser

    sub = argparse.ArgumentParser(prog="monai-unc").add_subparsers()
    sources = next(a for a in add_parser(sub)._actions if "--sources" in a.option_strings)
    text = " ".join(sources.help.split())
    assert "alone or with dropout" not in text
    assert "with folds, mirroring or dropout, not with rate_in" in text
    assert "`ssn` (alone, with `dropout` or with `folds mirroring`)" in " ".join(_text("docs/nnunet.md").split())


def test_triage_monitor_help_says_an_unreachable_store_stops_the_run(certified, tmp_path, monkeypatch, capsys):
    """`triage --help` said of --monitor "the triage outputs are written even when the store cannot be reached";
    a store that cannot be opened stops the run before anything is written (docs/monitoring.md), only a store lost
    after the triage leaves the outputs."""
    import argparse

    from monai_unc.cli import main
    from monai_unc.workflows.arguments import add_command_parsers

    root, data = certified
    monkeypatch.setenv("MONAI_UNC_CONFIG_DIR", str(root / "config"))
    (tmp_path / "db").mkdir()
    out = tmp_path / "tr"
    assert main(["triage", "-p", str(data["predictions"]), "--rule", str(root / "ev" / "referral_rule.json"),
                 "-o", str(out), "--monitor", str(tmp_path / "db"), "--quiet"]) == 2
    assert "--monitor" in capsys.readouterr().err
    assert not out.exists()
    sub = argparse.ArgumentParser(prog="monai-unc").add_subparsers()
    add_command_parsers(sub)
    triage = sub.choices["triage"]
    text = " ".join(next(a for a in triage._actions if "--monitor" in a.option_strings).help.split())
    assert "written even when the store cannot be reached" not in text
    assert "a store that cannot be opened stops the run before anything is written" in text


def test_evaluate_help_says_what_images_is_for(certified):
    """`evaluate --help` said --images is "for the report's overlays"; with --target-risk it gives the rule the image
    statistics that triage refers new images by (docs/triage.md), which a rule certified without it lacks."""
    import argparse
    import json

    from monai_unc.workflows.arguments import add_command_parsers

    sub = argparse.ArgumentParser(prog="monai-unc").add_subparsers()
    add_command_parsers(sub)
    action = next(a for a in sub.choices["evaluate"]._actions if "--images" in a.option_strings)
    text = " ".join(action.help.split())
    assert "with --target-risk the image statistics" in text and "--regions the QU-BraTS brain mask" in text
    root, _ = certified
    assert json.loads((root / "ev" / "referral_rule.json").read_text())["image_reference"]["features"]
