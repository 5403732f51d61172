"""A report and an evaluation of the same folder at once (review 64, hostile review of two runs at once).

- ``report`` checked once, before reading, that no ``evaluate`` held the evaluation folder; an ``evaluate`` started
  meanwhile (cron and a user by hand) rewrote ``summary.json`` while the page was drawn. The page showed the earlier
  evaluation while its record (``.report_source.json``) named the digest of the new ``summary.json`` read at the end,
  so ``remove_stale_report`` kept the stale page for good, exit 0. The report now refuses in one line and keeps no
  page of an evaluation that changed under it.
- ``evaluate`` ending while a ``report`` of another process held ``<evaluation>/report`` exited 2 with "being written
  by another run" after it had written all its outputs (``remove_stale_report`` refused the busy folder). It now
  waits a moment for the report, then leaves the page to that report's own check, with a warning.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from monai_unc.cli import main
from monai_unc.data.cohorts import write_toy_cohort
from monai_unc.io import output_lock
from monai_unc.report import html
from tests._holders import ForkedHolder

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def evaluations(tmp_path_factory):
    """One cohort evaluated twice into two folders: with the default budget and with ``--budget 0.5``."""
    root = tmp_path_factory.mktemp("review64")
    cohort = write_toy_cohort(root, n_cases=3, shape=(8, 8, 8))
    argv = ["evaluate", "-l", str(cohort["labels"]), "-p", str(cohort["predictions"]), "--no-spatial", "-q"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert main([*argv, "-o", str(root / "ev")]) == 0
        assert main([*argv, "-o", str(root / "other"), "--budget", "0.5"]) == 0
    return {"cohort": cohort, "ev": root / "ev", "other": root / "other", "argv": argv}


def _swap_in(src: Path, dst: Path) -> None:
    """Replace ``dst``'s cohort files by ``src``'s as another evaluate's atomic writes do (a new file renamed in)."""
    for name in ("summary.json", "metrics.csv", "state/rows.json", "state/histogram.npz"):
        if (src / name).is_file():
            tmp = dst / (name + ".swap")
            tmp.write_bytes((src / name).read_bytes())
            os.replace(tmp, dst / name)


@pytest.mark.slow  # two reports of a small evaluation (several seconds: the figures)
def test_a_report_of_an_evaluation_rewritten_while_it_is_drawn_is_refused(evaluations, tmp_path, monkeypatch,
                                                                          capsys):
    import shutil

    ev = tmp_path / "ev"
    shutil.copytree(evaluations["ev"], ev)
    out = tmp_path / "report"
    real = html.render_html

    def render_then_rewrite(*args, **kwargs):  # another evaluate (other --budget) finishes while the page is drawn
        page = real(*args, **kwargs)
        _swap_in(evaluations["other"], ev)
        return page

    monkeypatch.setattr(html, "render_html", render_then_rewrite)
    capsys.readouterr()
    assert main(["report", "-e", str(ev), "-o", str(out), "--cases", "0", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(ev) in err[0] and "changed" in err[0] and "again" in err[0], err
    assert not (out / "report.html").exists()  # no page that shows numbers the evaluation no longer holds
    record = out / html.REPORT_SOURCE_RECORD
    assert not record.exists() or json.loads(record.read_text())["summary_sha256"] != html._summary_digest(ev)
    monkeypatch.setattr(html, "render_html", real)
    assert main(["report", "-e", str(ev), "-o", str(out), "--cases", "0", "-q"]) == 0  # made again: the new one
    assert "50" in (out / "report.html").read_text()


@pytest.mark.slow  # a holder process and one evaluation
def test_an_evaluate_that_ends_while_another_process_writes_its_report_exits_0(evaluations, tmp_path, capsys):
    import shutil

    ev = tmp_path / "ev"
    shutil.copytree(evaluations["ev"], ev)
    assert main(["report", "-e", str(ev), "--cases", "0", "-q"]) == 0  # a page of this evaluation, then its next run
    holder = ForkedHolder(lambda: output_lock(ev / "report", "monai-unc report"))
    try:
        monkey = pytest.MonkeyPatch()
        monkey.setattr(html, "_REPORT_WAIT_S", 0.2)  # the report takes longer
        try:
            capsys.readouterr()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                assert main([*evaluations["argv"], "-o", str(ev), "--budget", "0.5"]) == 0
        finally:
            monkey.undo()
        said = [str(w.message) for w in caught] + [capsys.readouterr().err]
        assert any("being written" in s and str(ev / "report") in s for s in said), said
        assert json.loads((ev / "summary.json").read_text())["triage"]["budget"] == 0.5
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow  # a holder process and a report
def test_an_evaluate_refused_by_another_run_leaves_the_report_page_alone(evaluations, tmp_path, capsys):
    """The refused run removed ``<output>/report/report.html`` of a folder that another evaluate held (its summary
    half-way rewritten by that run) and said so on a second line: a refused run writes or removes nothing."""
    import shutil

    ev = tmp_path / "ev"
    shutil.copytree(evaluations["ev"], ev)
    assert main(["report", "-e", str(ev), "--cases", "0", "-q"]) == 0
    holder = ForkedHolder(lambda: output_lock(ev, "monai-unc evaluate"))
    try:
        _swap_in(evaluations["other"], ev)  # the holder's run writing its cohort files
        capsys.readouterr()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert main([*evaluations["argv"], "-o", str(ev)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "another run" in err[0] and f"pid {holder.pid}" in err[0], err
        assert not [str(w.message) for w in caught if "removed" in str(w.message)]
        assert (ev / "report" / "report.html").is_file()  # the holder's run decides about it when it ends
    finally:
        holder.kill()
        holder.wait()
