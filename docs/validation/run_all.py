"""Regenerate every validation study and the page ``docs/validation.md`` (``make validate``).

    python docs/validation/run_all.py                  # all twelve studies at full size, then the page
    python docs/validation/run_all.py --render-only    # re-write the tables, figures and page from the saved JSON
    python docs/validation/run_all.py --tiny --output /tmp/v --page /tmp/v/validation.md   # smoke test

Each study is a standalone script in this folder (``study1_spatial_metrics.py`` ...
``study12_placements.py``) with its own ``--seed``, ``--tiny`` and ``--render-only``; this runner calls
their ``main`` in order (study 5 reuses the predictions study 1 saved in the same output folder) and then fills
``page_template.md``: every
``<!-- study:N -->`` marker is replaced by that study's results fragment (``results/studyN.md``) and figure links
are made relative to the page. The prose around the markers (how each finding compares with its paper) was written
for the committed results of the default seed; a run with another seed or size regenerates the tables, not the
prose.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import time
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
STUDIES = {
    1: "study1_spatial_metrics.py",
    2: "study2_temperature.py",
    3: "study3_values.py",
    4: "study4_ged.py",
    5: "study5_referral.py",
    6: "study6_ssn.py",
    7: "study7_conformal.py",
    8: "study8_monitoring.py",
    9: "study9_calibrated_training.py",
    10: "study10_lesions.py",
    11: "study11_shared_passes.py",
    12: "study12_placements.py",
}
TEMPLATE = HERE / "page_template.md"
MARKER = re.compile(r"<!-- study:(\d+) -->")
FIGURE = re.compile(r"(!\[[^\]]*\]\()([^)/]+\.png)(\))")


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_validation_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_page(results: Path, page: Path, template: Path = TEMPLATE) -> Path:
    """Fill ``template`` with the fragments in ``results`` and write ``page`` atomically; returns ``page``."""
    text = template.read_text()
    rel = Path(os.path.relpath(results, page.parent)).as_posix()

    def fragment(m: re.Match[str]) -> str:
        path = results / f"study{m.group(1)}.md"
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: run study {m.group(1)} first")
        body = path.read_text().strip()
        body = re.sub(r"^## ", "### ", body, flags=re.M)  # the page's own headings are level 2
        return FIGURE.sub(lambda f: f"{f.group(1)}{rel}/{f.group(2)}{f.group(3)}", body)

    out = MARKER.sub(fragment, text)
    out = out.replace("{{results}}", rel)
    page.parent.mkdir(parents=True, exist_ok=True)
    tmp = page.with_name(f".{page.name}.tmp")
    tmp.write_text(out)
    tmp.replace(page)
    return page


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output", type=Path, default=HERE / "results", help="results folder (docs/validation/results)")
    p.add_argument("--page", type=Path, default=HERE.parent / "validation.md", help="page to write")
    p.add_argument("--studies", type=int, nargs="+", default=sorted(STUDIES), choices=sorted(STUDIES))
    p.add_argument("--seed", type=int, default=None, help="seed passed to every study (default: each study's own)")
    p.add_argument("--tiny", action="store_true", help="every study at smoke-test size")
    p.add_argument("--render-only", action="store_true", help="no computation: tables, figures and page from JSON")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    for n in args.studies:
        extra = ["--output", str(args.output)]
        if args.render_only:
            extra.append("--render-only")
        else:
            extra += ["--tiny"] if args.tiny else []
            extra += ["--seed", str(args.seed)] if args.seed is not None else []
        print(f"== study {n}: {STUDIES[n]} {' '.join(extra)}", flush=True)
        _load(HERE / STUDIES[n]).main(extra)
    page = build_page(args.output, args.page)
    print(f"wrote {page} ({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
