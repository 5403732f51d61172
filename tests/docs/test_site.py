"""The documentation site (mkdocs.yml): the API reference names every public name, the nav holds every page, and
the strict build passes (slow; needs the ``docs`` extra)."""

import importlib
import importlib.util
import os
import re
import subprocess
import sys

import pytest
import yaml

from tests._paths import ROOT

DOCS = ROOT / "docs"
API = DOCS / "api"
# the packages and modules whose every public name the API reference must list (issue #28)
REQUIRED = ("metrics", "inferers", "measures", "aggregation", "regions", "networks", "temperature", "transforms",
            "handlers", "losses")
DIRECTIVE = re.compile(r"^::: (monai_unc(?:\.\w+)+)\s*$", flags=re.M)


class _ConfigLoader(yaml.SafeLoader):
    """Reads mkdocs.yml without running its ``!!python/...`` tags (the toc slugify function)."""


_ConfigLoader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)


def config():
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_ConfigLoader)


def nav_pages(nav):
    """Every page path in the ``nav`` of mkdocs.yml, in order."""
    out = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out += nav_pages(value) if isinstance(value, list) else [value]
    return out


def api_pages():
    return sorted(p for p in API.glob("*.md") if p.name != "index.md")


def documented_names(page):
    """The names ``page`` renders from its own package: ``::: monai_unc.<pkg>.<name>`` directives.

    A name rendered from the submodule that defines it (``::: monai_unc.<pkg>.<module>.<name>``) counts as the
    package's ``<name>`` when the package exports that very object (a package that gathers its modules' names at
    import, such as ``monai_unc.products``, which static documentation tools cannot follow).
    """
    package = f"monai_unc.{page.stem}"
    paths = DIRECTIVE.findall(page.read_text())
    out = []
    for path in (p[len(package) + 1:] for p in paths if p.startswith(package + ".")):
        head, _, name = path.rpartition(".")
        if head and not head.startswith("_"):
            try:
                same = getattr(importlib.import_module(f"{package}.{head}"), name) is getattr(
                    importlib.import_module(package), name, object())
            except (ImportError, AttributeError):
                same = False
            if same:
                path = name
        out.append(path)
    return out


def public_names(page):
    module = f"monai_unc.{page.stem}"
    if page.stem == "nnunet" and importlib.util.find_spec("nnunetv2") is None:
        pytest.skip("monai_unc.nnunet needs the nnunet extra")
    return list(importlib.import_module(module).__all__)


def test_required_packages_have_an_api_page_in_the_nav():
    nav = nav_pages(config()["nav"])
    for name in REQUIRED:
        assert (API / f"{name}.md").is_file(), f"docs/api/{name}.md is missing"
        assert f"api/{name}.md" in nav, f"api/{name}.md is not in the nav of mkdocs.yml"


@pytest.mark.parametrize("page", api_pages(), ids=lambda p: p.stem)
def test_api_page_lists_every_public_name(page):
    documented = documented_names(page)
    public = public_names(page)
    missing = [n for n in public if n not in documented]
    assert not missing, f"docs/api/{page.name} lacks `::: monai_unc.{page.stem}.<name>` for {missing}"
    extra = [n for n in documented if n not in public]
    assert not extra, f"docs/api/{page.name} renders names outside monai_unc.{page.stem}.__all__: {extra}"
    assert len(documented) == len(set(documented)), f"docs/api/{page.name} renders a name twice"


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    cfg = config()
    nav = nav_pages(cfg["nav"])
    excluded = [line.strip() for line in cfg["exclude_docs"].splitlines() if line.strip()]
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    pages = {p for p in pages if not any(re.fullmatch(pat.replace(".", r"\.").replace("*", "[^/]*"), p)
                                         for pat in excluded)}
    assert "validation/page_template.md" not in pages and "validation.md" in pages
    assert sorted(pages - set(nav)) == [], "pages missing from the nav of mkdocs.yml"
    assert sorted(set(nav) - pages) == [], "nav entries without a page"
    assert len(nav) == len(set(nav)), "a page appears twice in the nav"


def test_site_works_offline_without_web_fonts():
    cfg = config()
    assert cfg["theme"]["font"] is False
    plugins = [next(iter(p)) if isinstance(p, dict) else p for p in cfg["plugins"]]
    assert {"search", "offline", "mkdocstrings"} <= set(plugins)
    shims = cfg["extra"]["polyfills"]
    assert shims and all(not s.startswith("http") and (DOCS / s).is_file() for s in shims)


def test_docstring_rewrite():
    pytest.importorskip("griffe")
    spec = importlib.util.spec_from_file_location("griffe_docstrings", DOCS / "griffe_docstrings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "Summary, see :func:`~monai_unc.metrics.ece` and :class:`.SampleStats`.\n\nExample:\n    >>> 1\n    1"
    assert module.rewrite_docstring(text) == (
        "Summary, see `ece` and `SampleStats`.\n\nExamples:\n    >>> 1\n    1"
    )
    assert module.rewrite_docstring("Example: the text of a sentence") == "Example: the text of a sentence"


@pytest.mark.slow
def test_strict_build(tmp_path):
    """``mkdocs build --strict``: no broken link, anchor or reference, no griffe warning on a docstring."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings_handlers") is None:
        if os.environ.get("MONAI_UNC_REQUIRE_DOCS"):
            pytest.fail("MONAI_UNC_REQUIRE_DOCS is set but the docs extra is not installed (pip install -e '.[docs]')")
        pytest.skip("the docs extra (mkdocs, mkdocs-material, mkdocstrings[python]) is not installed")
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_MKDOCS_2_WARNING="1")
    site = tmp_path / "site"
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-8000:]
    for page in ("index.html", "validation.html", "api/metrics.html", "search/search_index.js"):
        assert (site / page).is_file(), page
    metrics = (site / "api/metrics.html").read_text()
    assert 'id="monai_unc.metrics.ece"' in metrics
    assert not list(site.rglob("*.py")), "scripts of docs/ copied into the site"
