"""Refresh the vendored NiiVue browser bundle of the report pages (``monai_unc/report/assets/niivue.umd.js``).

    python scripts/refresh_niivue.py [--version 0.69.0]

Downloads the npm package ``@niivue/niivue`` at the pinned version with ``npm pack`` (needs ``npm`` and the npm
registry), copies its ``dist/niivue.umd.js`` (the UMD build: one file defining the global ``niivue``) into the
package data and records the version and SHA-256 in ``niivue.json`` beside it. The pages never load it from the
network: report and triage folders get a copy next to the page. tests/report/test_viewer.py checks that the
vendored file matches the recorded hash. After a version change, run the viewer test in headless Chromium.
"""

import argparse
import hashlib
import json
import subprocess
import tarfile
import tempfile
from pathlib import Path

from monai_unc.io import atomic_write_bytes, atomic_write_json

ASSETS = Path(__file__).resolve().parents[1] / "monai_unc" / "report" / "assets"
PACKAGE = "@niivue/niivue"
MEMBER = "package/dist/niivue.umd.js"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", default=json.loads((ASSETS / "niivue.json").read_text())["version"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["npm", "pack", f"{PACKAGE}@{args.version}", "--pack-destination", tmp], check=True,
                       capture_output=True)
        (tgz,) = Path(tmp).glob("*.tgz")
        with tarfile.open(tgz) as tar:
            meta = json.load(tar.extractfile("package/package.json"))
            data = tar.extractfile(MEMBER).read()
    if meta.get("license") != "BSD-2-Clause":
        raise SystemExit(f"{PACKAGE} {args.version} is licensed {meta.get('license')!r}, not BSD-2-Clause: check "
                         "NIIVUE_LICENSE.txt before vendoring it")
    atomic_write_bytes(ASSETS / "niivue.umd.js", data)
    record = {"package": PACKAGE, "version": meta["version"], "file": MEMBER.removeprefix("package/"),
              "sha256": hashlib.sha256(data).hexdigest(), "license": meta["license"]}
    atomic_write_json(ASSETS / "niivue.json", record)
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
