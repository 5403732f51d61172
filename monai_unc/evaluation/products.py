"""The evaluation's side of the cohort-product protocol (:mod:`monai_unc.product`).

It holds the per-case states of the configured products (:func:`product_case_states`), their fit and summary on the
cohort (:func:`fit_products`, :func:`product_summaries`) and their artifact files (:func:`write_artifact`,
:func:`read_artifact`).

The evaluation runs these steps for every product alike; a product supplies only its own computations.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from .._utils import is_int
from ..io import OUTPUT_MARKERS, json_safe, owned_folder
from ..io.provenance import check_signature, read_checked_json, rule_digest, write_signed_json
from ..io.signing import SIGNATURE_FIELD, Trust
from ..product import CohortProduct, registered_products
from .config import EvaluationConfig

__all__ = [
    "command_output_markers",
    "cohort_products",
    "implicit_products",
    "check_products",
    "product_case_states",
    "product_states_of",
    "fit_products",
    "product_summaries",
    "summary_block",
    "ARTIFACT_FORMAT",
    "artifact_digest",
    "write_artifact",
    "read_artifact",
    "write_artifacts",
    "artifact_paths",
    "PRODUCTS_DIR",
    "writes_case_files",
    "remove_case_files",
    "write_case_files",
]

#: the sub-folder of an evaluation output holding the products' case files (``products/<name>/``)
PRODUCTS_DIR = "products"

#: the content digest of an artifact document (without its ``digest`` field): ``"sha256:<hex>"`` of its canonical
#: JSON, the one digest of every fitted file (:func:`monai_unc.io.provenance.rule_digest`)
artifact_digest = rule_digest

#: the ``format`` of a product artifact file (:func:`write_artifact`)
ARTIFACT_FORMAT = "monai-unc product artifact"
_ARTIFACT_VERSION = 1
#: the top-level fields of an artifact file (:func:`write_artifact`, with its digest and signature)
_ARTIFACT_FIELDS = frozenset({"format", "format_version", "monai_unc_version", "product", "options",
                              "calibration_cases", "artifact", "digest", SIGNATURE_FIELD})


def implicit_products(config: EvaluationConfig) -> list[CohortProduct]:
    """The products that the evaluation's own options turn on (:meth:`~monai_unc.product.CohortProduct.from_config`).

    They have no per-case state: their blocks come before the regions in ``summary.json``, their lines before the
    files written, and ``monai-unc report`` refits them on the saved rows.

    Args:
        config: the evaluation options.

    Returns:
        The products, in registration order (e.g. the risk-controlled referral rule with ``config.target_risk``).
    """
    return [p for p in (cls.from_config(config) for cls in registered_products()) if p is not None]


def cohort_products(config: EvaluationConfig) -> list[CohortProduct]:
    """The products of an evaluation: those its own options turn on, then those of ``config.products``.

    The first are the registered products whose :meth:`~monai_unc.product.CohortProduct.from_config` returns one
    (e.g. the risk-controlled referral rule with ``config.target_risk``), in registration order.

    Args:
        config: the evaluation options.

    Returns:
        The products, in the order their summary blocks are written.

    Raises:
        ValueError: ``config.products`` lists a product that the evaluation options turn on.
    """
    implicit = implicit_products(config)
    given = list(config.products)
    for p in given:
        if type(p).from_config.__func__ is not CohortProduct.from_config.__func__:  # type: ignore[attr-defined]
            raise ValueError(f"products: {p.name!r} is turned on by the evaluation options, not listed in products")
    return implicit + given


def check_products(cases: Sequence[Any], config: EvaluationConfig, inputs: Mapping[str, Any] | None = None) -> None:
    """Each product's refusals before any work.

    First every product's :meth:`~monai_unc.product.CohortProduct.check` of the cohort's case ids, then, with
    ``inputs``, every product's :meth:`~monai_unc.product.CohortProduct.check_inputs` of the input files.

    Args:
        cases: the matched cases (:class:`~monai_unc.io.CaseFiles`).
        config: the evaluation options.
        inputs: ``predictions``, ``layout``, ``uncertainty`` and ``probs_suffix`` of the evaluation (None: the
            input files are not checked, e.g. for a shard evaluated without its folders).

    Returns:
        None; the first refusal is raised.
    """
    ids = [c.case_id for c in cases]
    for product in cohort_products(config):
        product.check(ids, config)
    if inputs is not None:
        for product in cohort_products(config):
            product.check_inputs(cases, inputs, config)


def product_case_states(case: Any, tasks: Sequence[Any], config: EvaluationConfig
                        ) -> tuple[dict[str, Any], dict[str, float | int]]:
    """The per-case states of ``config.products`` and the ``metrics.csv`` columns they add.

    A product's integer values (a count: ``lesion_tp``) stay ``int``, written ``3`` in ``metrics.csv``; every other
    value becomes a ``float``.

    Args:
        case: the loaded case.
        tasks: its tasks (:func:`~monai_unc.evaluation.rows.case_tasks`).
        config: the evaluation options.

    Returns:
        ``(states, columns)``: ``{product name: state}`` (products with a None state left out) and the columns.
    """
    states: dict[str, Any] = {}
    columns: dict[str, float | int] = {}
    for product in config.products:
        state = product.case_state(case, tasks, config)
        if state is None:
            continue
        states[product.name] = state
        # whole counts stay int (written 3, not 3.0); every other value is a float
        mine = {str(k): int(v) if is_int(v) else float(v) for k, v in product.case_columns(state, config).items()}
        clash = sorted(set(mine) & set(columns))
        if clash:
            raise ValueError(f"products: the columns {clash} of {product.name!r} clash with another product's")
        columns.update(mine)
    return states, columns


def product_states_of(per_case: Mapping[str, Mapping[str, Any]], product: CohortProduct,
                      cases: Sequence[str] | None = None) -> dict[str, Any]:
    """``{case id: state}`` of one product, in case-id order.

    Args:
        per_case: ``{case id: {product name: state}}``.
        product: the product.
        cases: keep only these case ids (None: all).

    Returns:
        Copies of the states of the cases that have one (a product may merge them in place).
    """
    keep = None if cases is None else set(cases)
    return {cid: copy.deepcopy(per_case[cid][product.name]) for cid in sorted(per_case)
            if product.name in per_case[cid] and (keep is None or cid in keep)}


def fit_products(per_case: Mapping[str, Mapping[str, Any]], rows: Sequence[Mapping[str, Any]],
                 config: EvaluationConfig) -> dict[str, Any]:
    """Fit every product (:func:`cohort_products`) on the calibration cases (``config.calibration_cases``, else all).

    A product with :attr:`~monai_unc.product.CohortProduct.fit_sees_cohort` gets every case and picks the calibration
    cases itself.

    Args:
        per_case: ``{case id: {product name: state}}`` of the cohort.
        rows: the cohort's rows, in case-id order.
        config: the evaluation options.

    Returns:
        ``{product name: artifact}`` (None for a product without one).
    """
    ids = [str(r["case"]) for r in rows]
    cal = config.calibration_ids(ids)
    keep = set(cal)
    cal_rows = [r for r in rows if str(r["case"]) in keep]
    return {p.name: (p.fit(product_states_of(per_case, p), list(rows), config) if p.fit_sees_cohort
                     else p.fit(product_states_of(per_case, p, cal), cal_rows, config))
            for p in cohort_products(config)}


def summary_block(value: Any) -> Any:
    """A product's summary as JSON data: a dataclass becomes a dict (``dataclasses.asdict``), NaN ``null``.

    Args:
        value: what :meth:`~monai_unc.product.CohortProduct.summarize` returned.

    Returns:
        JSON data.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json_safe(value)


def product_summaries(per_case: Mapping[str, Mapping[str, Any]], rows: Sequence[Mapping[str, Any]],
                      config: EvaluationConfig, fitted: Mapping[str, Any]) -> dict[str, Any]:
    """The ``summary.json`` block of every product (:func:`cohort_products`; those without one left out).

    Args:
        per_case: ``{case id: {product name: state}}`` of the cohort.
        rows: the cohort's rows, in case-id order.
        config: the evaluation options.
        fitted: the artifacts of :func:`fit_products`.

    Returns:
        ``{product name: block}``.
    """
    out: dict[str, Any] = {}
    for p in cohort_products(config):
        block = p.summarize(product_states_of(per_case, p), rows, fitted.get(p.name), config)
        if block is not None:
            out[p.name] = summary_block(block)
    return out


def write_artifact(path: str | os.PathLike, product: CohortProduct, artifact: Any,
                   calibration_cases: Sequence[str]) -> Path:
    """Write a product's fitted artifact atomically.

    The file holds the format, version, product name and options, the cases it was fitted on, the artifact, and a
    sha256 digest of all of it (:func:`monai_unc.io.provenance.rule_digest`), signed
    (:func:`monai_unc.io.provenance.write_signed_json`).

    Args:
        path: the file (``product.artifact_path(output)``).
        product: the product.
        artifact: what :meth:`~monai_unc.product.CohortProduct.fit` returned (JSON data).
        calibration_cases: the ids of the cases it was fitted on.

    Returns:
        The path written.

    Raises:
        ValueError: the artifact holds an infinite number (JSON has none: it would read back as ``null``, the
            undefined value, and a threshold of ``inf``, "accept every case", would come back as no threshold at all);
            the message names the product and where the number is. NaN is written as ``null`` (undefined).

    Example:
        >>> import tempfile
        >>> from monai_unc.product import CohortProduct
        >>> class Bias(CohortProduct):
        ...     name, title = "bias", "Bias"
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = write_artifact(folder + "/bias.json", Bias(), {"bias": 1.5}, ["a", "b"])
        ...     read_artifact(path, "bias")["artifact"]
        {'bias': 1.5}
    """
    infinite = _infinite_at(artifact)
    if infinite is not None:  # found by hostile testing: {"threshold": inf} read back as {"threshold": None}
        raise ValueError(f"product {product.name!r}: its artifact holds an infinite number at {infinite}, which a JSON "
                         "file cannot hold (it would read back as null, an undefined value): write it as a string or "
                         "a flag the product's apply reads")
    doc: dict[str, Any] = {"format": ARTIFACT_FORMAT, "format_version": _ARTIFACT_VERSION,
                           "monai_unc_version": __version__, "product": product.name,
                           "options": json_safe(product.options()), "calibration_cases": list(calibration_cases),
                           "artifact": json_safe(artifact)}
    doc = json.loads(json.dumps(doc, allow_nan=False))  # as it reads back (integer keys become strings)
    doc["digest"] = artifact_digest(doc)
    return write_signed_json(path, doc)


def _infinite_at(x: Any, where: str = "artifact") -> str | None:
    """Where the first infinite number of ``x`` (mappings, sequences, arrays, tensors, numbers) is, or None."""
    if isinstance(x, Mapping):
        return next((w for k, v in x.items() if (w := _infinite_at(v, f"{where}[{k!r}]")) is not None), None)
    if isinstance(x, (list, tuple)):
        return next((w for i, v in enumerate(x) if (w := _infinite_at(v, f"{where}[{i}]")) is not None), None)
    if hasattr(x, "detach") and hasattr(x, "tolist"):  # a torch tensor
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "fc":
            return None
        hit = np.argwhere(np.isinf(x))
        return None if hit.size == 0 else where + "".join(f"[{int(i)}]" for i in hit[0])
    if isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_, numbers.Integral)):
        return where if math.isinf(float(x)) else None
    return None


def read_artifact(path: str | os.PathLike, product: str | None = None, trust: Trust | None = None) -> dict[str, Any]:
    """Read and check an artifact file of :func:`write_artifact`.

    The checks are the format, version, digest (:func:`monai_unc.io.provenance.read_checked_json`), the fields (those
    :func:`write_artifact` writes, no other), with ``product`` the product's name and with ``trust`` the signature
    (:func:`monai_unc.io.provenance.check_signature`, as ``monai-unc triage`` checks a rule's: a product's command
    passes the ``trust`` its :meth:`~monai_unc.product.CohortProduct.apply_cases` is given). The file is untrusted
    input: nothing in it is imported or run. Earlier versions checked the digest alone, which whoever
    edits the file recomputes, and a product's command had no reader that checked the signature.

    Args:
        path: the file.
        product: the expected product name (None: any).
        trust: the trusted keys the signature must verify against, or None (not checked: the Python API on a file
            the caller trusts).

    Returns:
        The whole document (the fitted data under ``"artifact"``); with ``trust`` also ``"signature_check"``: how the
        signature was checked, one line for the outputs (``"signed by ..."`` or ``"UNSIGNED: ..."``).

    Raises:
        FileNotFoundError: no file.
        IsADirectoryError: a folder at ``path``.
        ValueError: naming ``path`` for another format, a changed digest (the file was edited), a field no artifact
            file holds, another product, or (with ``trust``) a signature that is missing (unless allowed), does not
            match or is by a key that is not trusted.
    """
    path = Path(path)
    doc = read_checked_json(path, fmt=ARTIFACT_FORMAT, versions=(_ARTIFACT_VERSION,), what="artifact",
                            written_by="monai-unc evaluate and the product's option", source=f"path: {path}")
    unknown = sorted(str(k) for k in doc if k not in _ARTIFACT_FIELDS)
    if unknown:
        raise ValueError(f"path: {path}: field {unknown[0][:80]!r} is not a field of an artifact file; the file was "
                         "edited (write it again with monai-unc evaluate)")
    if product is not None and doc.get("product") != product:
        raise ValueError(f"path: {path} holds the artifact of product {doc.get('product')!r}, not {product!r}")
    if trust is not None:
        doc["signature_check"] = check_signature(doc, trust, f"artifact {path}")
    return doc


def _is_artifact(path: Path) -> bool:
    """Whether ``path`` is a product artifact file (its ``format``), read without trusting anything else in it."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
        return b'"format": "' + ARTIFACT_FORMAT.encode() + b'"' in head
    except OSError:
        return False


def artifact_paths(output: str | os.PathLike, config: EvaluationConfig) -> dict[str, Path]:
    """Where each product (:func:`cohort_products`) writes its artifact in the evaluation folder ``output``.

    Args:
        output: the evaluation folder.
        config: the evaluation options.

    Returns:
        ``{product name: path}``.
    """
    return {p.name: p.artifact_path(output) for p in cohort_products(config)}


def writes_case_files(product: CohortProduct) -> bool:
    """Whether a product writes files per evaluated case (it overrides ``write_case_files``).

    Args:
        product: the product.

    Returns:
        True or False.
    """
    return type(product).write_case_files is not CohortProduct.write_case_files


def remove_case_files(output: str | os.PathLike, keep: Sequence[str] = ()) -> None:
    """Remove the case files of the products (``<output>/products/<name>/``) other than those of ``keep``.

    Args:
        output: the evaluation folder.
        keep: the names of the products whose files stay.

    Returns:
        None.

    Several processes may remove the same files at once (each rank of a distributed rerun removes an earlier run's
    outputs before it writes a map): a file or folder another one removed first is skipped.
    """
    root = owned_folder(output, PRODUCTS_DIR)  # not a link, nor a product's folder in it: their files are removed
    try:
        folders = sorted(p for p in root.iterdir() if p.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return
    for folder in folders:
        owned_folder(root, folder.name)  # a product's files are written there too
        if folder.name in keep:
            continue
        try:
            files = list(folder.iterdir())
        except FileNotFoundError:  # another process removed it first
            continue
        for f in files:
            if f.is_file():
                f.unlink(missing_ok=True)
        try:
            folder.rmdir()
        except FileNotFoundError:
            pass


def write_case_files(output: str | os.PathLike, config: EvaluationConfig, written: Mapping[str, Path],
                     load: Any, case_ids: Sequence[str]) -> dict[str, list[Path]]:
    """The case files of every product that writes them (``write_case_files``) and wrote an artifact.

    Each case is loaded once (``load(case_id)``) for all such products. An earlier run's files are removed first:
    of a product not asked for now, and of the products that write them again.

    Args:
        output: the evaluation folder.
        config: the evaluation options.
        written: ``{product name: artifact path}`` of :func:`write_artifacts`.
        load: ``case id -> LoadedCase``.
        case_ids: the cases, in case-id order.

    Returns:
        ``{product name: [paths]}``.
    """
    products = [p for p in cohort_products(config) if writes_case_files(p) and p.name in written]
    remove_case_files(output)  # every product's: those written again are written whole
    out: dict[str, list[Path]] = {}
    if not products:
        return out
    folders = {p.name: Path(output) / PRODUCTS_DIR / p.name for p in products}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    for cid in case_ids:
        case = load(cid)
        for p in products:
            out.setdefault(p.name, []).extend(p.write_case_files(case, written[p.name], folders[p.name]))
    return out


def write_artifacts(output: str | os.PathLike, config: EvaluationConfig, fitted: Mapping[str, Any],
                    case_ids: Sequence[str], inputs: Mapping[str, Any] | None = None) -> dict[str, Path]:
    """Write the artifact of every product that fitted one; remove an earlier run's file of a product that did not.

    A product writes a file of its own format with :meth:`~monai_unc.product.CohortProduct.write_artifact`; the
    others get the generic checked document (:func:`write_artifact`).

    Args:
        output: the evaluation folder.
        config: the evaluation options.
        fitted: the artifacts of :func:`fit_products`.
        case_ids: the ids of the cohort's cases (the calibration cases are taken from them).
        inputs: ``predictions``, ``layout`` and ``uncertainty`` of the evaluation (what a product's own format may
            record, e.g. the fingerprint of the predictions); None: none known.

    Returns:
        ``{product name: path}`` of the files written.
    """
    cal = config.calibration_ids(list(case_ids))
    out: dict[str, Path] = {}
    asked = {p.artifact_path(output).name for p in cohort_products(config)}
    stale = {cls.artifact_file or f"{cls.name}.json" for cls in registered_products()} - asked
    for old in sorted(Path(output).glob("*.json")):  # an earlier run's artifact of a product not asked for now
        if old.name not in asked and (old.name in stale or _is_artifact(old)):
            old.unlink(missing_ok=True)
    for p in cohort_products(config):
        path = p.artifact_path(output)
        if fitted.get(p.name) is None:
            path.unlink(missing_ok=True)
            continue
        written = p.write_artifact(path, fitted[p.name], cal, dict(inputs or {}), config)
        out[p.name] = written if written is not None else write_artifact(path, p, fitted[p.name], cal)
    return out


def command_output_markers() -> dict[str, tuple[str, ...]]:
    """The files that mark an output folder as a command's: the core commands' and each product command's table.

    For :func:`monai_unc.io.check_output_kind`: a product with a command
    (:attr:`~monai_unc.product.CohortProduct.command`) marks its folder with the per-case table it writes there
    (:attr:`~monai_unc.product.CohortProduct.applied_table`).

    Returns:
        ``{command: file names}``: :data:`monai_unc.io.OUTPUT_MARKERS` and one entry per product command.
    """
    out = dict(OUTPUT_MARKERS)
    for cls in registered_products():
        if cls.command and cls.applied_table:
            out.setdefault(str(cls.command), (str(cls.applied_table),))
    return out
