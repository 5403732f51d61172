"""HTML escaped by construction, for the pages of :mod:`monai_unc.report` (``report.html``, ``triage.html``).

A page is built from :class:`Markup` fragments only, and a fragment can be made in four ways:

- :func:`el`: one element; its children that are not already :class:`Markup` are escaped as text, every attribute
  value is escaped, ``on*`` event attributes, ``srcdoc`` (a document the browser parses, escaped or not) and
  ``srcset`` (a list of URLs) are refused, so are the SVG ``<animate>`` / ``<set>`` elements (they set another
  attribute to any value), and ``href`` / ``src`` (and every other attribute the browser loads or follows:
  ``data``, ``background``, ``action``, ``ping``, ...) must be relative file paths or ``data:`` images / CSV
  (:func:`check_url`: never ``javascript:`` or another scheme);
- :func:`frag`: a concatenation, escaping every part that is not already :class:`Markup`;
- :func:`raw_text_element`: a ``<style>`` or ``<script>`` element whose text cannot close it (refuses ``</`` and
  ``<!--``); :func:`json_script` (data for a script, as JSON that cannot close its element) and :func:`script_file`
  (a script file beside the page, by a relative path);
- ``Markup("...")`` on a string literal of the code (a constant tag such as ``<br>``), never on data:
  tests/report/test_pages_hostile.py checks that the page modules call it on literals only.

A case id, a class or region name, a shift label, a path or a model description is therefore text wherever it goes:
``x<img src=x onerror=alert(1)>`` shows as those characters and never becomes an element.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable
from typing import Any

__all__ = [
    "Markup", "case_line", "check_url", "document", "el", "escape", "frag", "isolate", "isolated_list", "json_script",
    "raw_text_element", "replace_surrogates", "script_file",
]


class Markup(str):
    """A string of HTML that is safe to put in a page as it is.

    ``Markup + str`` escapes the ``str`` (either side), and :meth:`join` escapes the parts that are not ``Markup``;
    every other ``str`` method returns a plain ``str``, which the builders escape again.
    """

    __slots__ = ()

    def __html__(self) -> Markup:
        return self

    def __add__(self, other: object) -> Markup:
        return Markup(str.__add__(self, escape(other)))

    def __radd__(self, other: object) -> Markup:
        return Markup(str.__add__(escape(other), self))

    def join(self, parts: Iterable[object]) -> Markup:  # type: ignore[override]
        """The parts joined by this separator, each escaped unless it is :class:`Markup`.

        Args:
            parts: the parts (any values; not :class:`Markup` ones are escaped as text).

        Returns:
            The joined :class:`Markup`.

        Example:
            >>> Markup("<br>").join(["a<b", Markup("<i>c</i>")])
            'a&lt;b<br><i>c</i>'
        """
        return Markup(str.join(self, (escape(p) for p in parts)))


_SURROGATE = re.compile("[\ud800-\udfff]")
#: the explicit bidirectional formatting characters: embeddings, overrides and isolates (LRE, RLE, PDF, LRO, RLO, LRI,
#: RLI, FSI, PDI), which reorder the text after them up to the end of its paragraph
_BIDI_CONTROL = re.compile("[\u202a-\u202e\u2066-\u2069]")


def _show_bidi_controls(text: str) -> str:
    """``text`` with every explicit bidi formatting character written visibly as ``[U+202E]``."""
    return _BIDI_CONTROL.sub(lambda m: f"[U+{ord(m.group()):04X}]", text) if _BIDI_CONTROL.search(text) else text


def replace_surrogates(text: str) -> str:
    r"""``text`` with every lone surrogate replaced by U+FFFD.

    Python reads bytes that are not UTF-8 (in a command line argument or a file name, e.g. a Latin-1 ``é``) as lone
    surrogates, which UTF-8 cannot hold and fonts cannot draw; U+FFFD is the replacement character a browser shows
    for such bytes.

    Args:
        text: any string.

    Returns:
        The string, ``text`` itself when it holds no surrogate.

    Example:
        >>> replace_surrogates("Caf\udce9") == "Caf\ufffd"
        True
    """
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def escape(value: Any) -> Markup:
    r"""``value`` as HTML text.

    :class:`Markup` is returned unchanged, anything else as ``str(value)`` escaped with :func:`html.escape`
    (``&``, ``<``, ``>``, ``"`` and ``'``). A lone surrogate (how Python reads bytes that are not UTF-8 in a command
    line argument or a file name, e.g. a Latin-1 ``é``) becomes U+FFFD, the replacement character a browser shows
    for such bytes: a page is UTF-8, which cannot hold it. An explicit bidi embedding, override or isolate character
    (U+202A .. U+202E, U+2066 .. U+2069) is written visibly, ``[U+202E]``: invisible, it reordered the text after it
    (in earlier versions a case id ending in U+202E showed the ids listed after it reversed, ``21`` for
    ``12``, and the caption after it backwards).

    Args:
        value: any value.

    Returns:
        The escaped text as :class:`Markup`.

    Example:
        >>> escape('x<img src=x onerror="alert(1)">')
        'x&lt;img src=x onerror=&quot;alert(1)&quot;&gt;'
        >>> escape("Caf\udce9") == "Caf\ufffd"
        True
        >>> escape("x\u202eab")
        'x[U+202E]ab'
    """
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(_show_bidi_controls(replace_surrogates(str(value))), quote=True))


def frag(*parts: Any) -> Markup:
    """The parts concatenated, each escaped unless it is :class:`Markup` (``None`` parts are left out).

    Args:
        *parts: the parts.

    Returns:
        The concatenation as :class:`Markup`.

    Example:
        >>> frag(Markup("<b>"), "1 < 2", None, Markup("</b>"))
        '<b>1 &lt; 2</b>'
    """
    return Markup("".join(escape(p) for p in parts if p is not None))


_TAG = re.compile(r"[a-z][a-z0-9]*\Z")
_ATTRIBUTE = re.compile(r"[a-z][a-z0-9-]*\Z")
_VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
                   "wbr"})
_RAW_TEXT = frozenset({"script", "style"})
#: SVG animation elements: they set another attribute of their parent (an ``href`` included) to any value, unchecked
_ANIMATION = frozenset({"animate", "set"})
#: attributes whose value the browser reads as a document: escaped text becomes markup again (``iframe srcdoc``)
_DOCUMENT_ATTRIBUTES = frozenset({"srcdoc"})
#: attributes of several URLs (a candidate list, which a comma inside a data: URL makes ambiguous): refused
_URL_LIST_ATTRIBUTES = frozenset({"srcset", "imagesrcset"})
#: the attributes whose value is a URL the browser loads or follows (found by hostile testing: ``<object data>`` and
#: ``<table background>`` loaded from the network, unchecked)
_URL_ATTRIBUTES = frozenset({"href", "src", "action", "formaction", "poster", "data", "background", "ping", "codebase",
                             "manifest", "icon", "longdesc", "cite", "archive", "classid", "lowsrc", "dynsrc"})
_DATA_URL = re.compile(r"data:(?:image/(?:png|jpeg|gif|webp)|text/csv);base64,[A-Za-z0-9+/]*={0,2}\Z")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_URL_IGNORED = re.compile(r"[\x00-\x20\x7f]")  # what browsers strip or skip when they read a URL's scheme


def isolate(value: Any) -> Markup:
    """``value`` as text in a ``<bdi>`` element: a case id (a name from the data) shown inline, its direction isolated.

    A right-to-left id (a Hebrew or Arabic file name) beside numbers and left-to-right text was reordered with them by
    the browser's bidi algorithm (in earlier versions ``מטופל_12: triage rank 1 of 5`` read with the number and the
    text moved around the id); inside ``<bdi>`` it is laid out on its own and the text around it keeps its order.

    Args:
        value: the id (escaped as text by :func:`el`).

    Returns:
        The ``<bdi>`` element.

    Example:
        >>> str(isolate("a<b"))
        '<bdi>a&lt;b</bdi>'
    """
    return el("bdi", value)


def isolated_list(values: Iterable[Any], sep: str = ", ") -> Markup:
    """The values joined by ``sep``, each in its :func:`isolate` element (a list of case ids in a sentence).

    Args:
        values: the ids.
        sep: the separator (text).

    Returns:
        The joined :class:`Markup`.

    Example:
        >>> str(isolated_list(["a", "b"]))
        '<bdi>a</bdi>, <bdi>b</bdi>'
    """
    return escape(sep).join(isolate(v) for v in values)


def case_line(line: str, case_ids: Iterable[str]) -> Markup:
    """A line that begins with a case id and ``": "`` (a case's warning or note) with that id :func:`isolate`-d.

    Args:
        line: the line (text).
        case_ids: the ids it may begin with; the longest that matches is isolated, none matching leaves the line as
            text.

    Returns:
        The escaped line as :class:`Markup`.

    Example:
        >>> str(case_line("c1: no boundary", ["c1", "c10"])), str(case_line("cohort: x", ["c1"]))
        ('<bdi>c1</bdi>: no boundary', 'cohort: x')
    """
    text = str(line)
    found = [c for c in {str(c) for c in case_ids} if c and text.startswith(c + ": ")]
    if not found:
        return escape(text)
    cid = max(found, key=len)
    return frag(isolate(cid), text[len(cid):])


def check_url(url: str, name: str = "url") -> str:
    """``url`` if a page may link or embed it, else an error.

    Allowed: a relative file path (no scheme, no host) or a base64 ``data:`` URL of a PNG / JPEG / GIF / WebP
    image or a CSV file.

    Args:
        url: the ``href`` or ``src`` value.
        name: the attribute, for the error message.

    Returns:
        ``url`` unchanged.

    Raises:
        TypeError: when ``url`` is not a string.
        ValueError: for any other scheme (``javascript:``, ``http:``, ``file:``, ...), a host (``//host``), an absolute
            path or another ``data:`` type.

    Example:
        >>> check_url("figures/case_1.png")
        'figures/case_1.png'
        >>> check_url("javascript:alert(1)", "href")
        Traceback (most recent call last):
            ...
        ValueError: href must be a relative file path or a data: URL, got 'javascript:alert(1)'
    """
    if not isinstance(url, str):
        raise TypeError(f"{name} must be a string, got {type(url).__name__}")
    if url.startswith("data:"):
        if _DATA_URL.match(url):
            return url
        raise ValueError(f"{name}: only base64 data: URLs of images or CSV files are allowed, got {url[:40]!r}")
    squeezed = _URL_IGNORED.sub("", url)
    if _SCHEME.match(squeezed) or squeezed.startswith(("/", "\\")):
        raise ValueError(f"{name} must be a relative file path or a data: URL, got {url[:80]!r}")
    return url


def _attribute(key: str, value: Any) -> str:
    name = "class" if key == "class_" else key.rstrip("_").replace("_", "-")
    if not _ATTRIBUTE.match(name):
        raise ValueError(f"invalid attribute name {key!r}")
    if name.startswith("on"):
        raise ValueError(f"event handler attributes are not allowed in a page, got {name!r}")
    if name in _DOCUMENT_ATTRIBUTES:  # found by hostile testing: the browser parses the unescaped value as HTML
        raise ValueError(f"{name!r} holds a document, which the browser parses as HTML: not allowed in a page")
    if name in _URL_LIST_ATTRIBUTES:  # found by hostile testing: "a.png 1x, http://host/b.png 2x" passed as one URL
        raise ValueError(f"{name!r} lists URLs, which check_url cannot read as one: not allowed in a page")
    if value is True:
        return f" {name}"
    text = str(value)
    if name in _URL_ATTRIBUTES:  # a URL as it is (a file name's characters), escaped
        check_url(text, name)
        return f' {name}="{html.escape(replace_surrogates(text), quote=True)}"'
    return f' {name}="{escape(text)}"'


def el(tag: str, *children: Any, **attributes: Any) -> Markup:
    """One HTML element.

    Args:
        tag: the element name (lower case letters and digits; not ``script`` or ``style``: see
            :func:`raw_text_element`; not the SVG animations ``animate`` or ``set``).
        children: its content; every child that is not :class:`Markup` is escaped as text; ``None`` children are
            left out. A void element (``img``, ``meta``, ...) takes none.
        attributes: its attributes in order: ``class_`` is ``class`` and ``_`` becomes ``-`` (``data_case`` is
            ``data-case``); values are escaped, ``None`` or ``False`` leaves the attribute out and ``True`` writes it
            without a value. ``on*``, ``srcdoc`` and ``srcset`` attributes are refused, ``href``, ``src`` and the
            other URL attributes (``data``, ``background``, ``action``, ``ping``, ...) checked with :func:`check_url`.

    Returns:
        The element as :class:`Markup`.

    Raises:
        ValueError: for an invalid or refused tag or attribute name, an event attribute, a refused URL, or children of
            a void element.

    Example:
        >>> from monai_unc.report.markup import el
        >>> str(el("td", "x<img src=x onerror=alert(1)>", class_="l", data_case="a&b"))
        '<td class="l" data-case="a&amp;b">x&lt;img src=x onerror=alert(1)&gt;</td>'
    """
    if not _TAG.match(tag) or tag in _RAW_TEXT:
        raise ValueError(f"invalid element {tag!r}" + (": use raw_text_element" if tag in _RAW_TEXT else ""))
    if tag in _ANIMATION:  # found by hostile testing: <animate attributename="href" values="javascript:...">
        raise ValueError(f"<{tag}> sets another attribute (an href included) to any value: not allowed in a page")
    attrs = "".join(_attribute(k, v) for k, v in attributes.items() if v is not None and v is not False)
    if tag in _VOID:
        if any(c is not None for c in children):
            raise ValueError(f"<{tag}> is a void element: it takes no children")
        return Markup(f"<{tag}{attrs}>")
    return Markup(f"<{tag}{attrs}>{frag(*children)}</{tag}>")


def raw_text_element(tag: str, text: str) -> Markup:
    r"""A ``<style>`` or ``<script>`` element around ``text``, which must not be able to end it early.

    Args:
        tag: ``style`` or ``script``.
        text: the CSS or script; JSON data must be written with ``<`` escaped (``\u003c``).

    Returns:
        The element as :class:`Markup`.

    Raises:
        ValueError: for another tag, or a text holding ``</`` or ``<!--``.

    Example:
        >>> raw_text_element("style", "h1{color:red}")
        '<style>h1{color:red}</style>'
    """
    if tag not in _RAW_TEXT:
        raise ValueError(f"raw_text_element makes <script> or <style> elements, got {tag!r}")
    if "</" in text or "<!--" in text:
        raise ValueError(f"the text of a <{tag}> element must not hold '</' or '<!--'")
    return Markup(f"<{tag}>{text}</{tag}>")


_JSON_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_ID = re.compile(r"[A-Za-z][A-Za-z0-9_-]*\Z")


def json_script(data: Any, id: str) -> Markup:  # noqa: A002 (the HTML attribute's name)
    r"""``data`` as JSON in a ``<script type="application/json">`` element, for a page script to read.

    A page script reads it with ``JSON.parse(document.getElementById(id).textContent)``; the browser does not run
    it. ``<``, ``>`` and ``&`` (and the line separators U+2028/2029) are written as ``\u`` escapes, which JSON reads
    back as the same characters, so no string in ``data`` can end the element or start a comment or a tag.

    Args:
        data: JSON-serialisable data (NaN and infinities are refused).
        id: the element's id (a letter, then letters, digits, ``_`` or ``-``).

    Returns:
        The element as :class:`Markup`.

    Raises:
        ValueError: for an invalid id or data that is not strict JSON.

    Example:
        >>> from monai_unc.report.markup import json_script
        >>> print(json_script({"case": "</script><b>"}, "d"))
        <script type="application/json" id="d">{"case": "\u003c/script\u003e\u003cb\u003e"}</script>
    """
    if not isinstance(id, str) or not _ID.match(id):
        raise ValueError(f"id must be a letter followed by letters, digits, '_' or '-', got {id!r}")
    text = json.dumps(data, allow_nan=False)
    for ch, esc in _JSON_UNSAFE.items():
        text = text.replace(ch, esc)
    return Markup(f'<script type="application/json" id="{id}">{text}</script>')


def script_file(src: str) -> Markup:
    """A ``<script src=...>`` element loading a script file beside the page.

    ``src`` must be a relative file path (:func:`check_url`; a ``data:`` URL is refused too), so a page never
    loads code from the network.

    Args:
        src: the script's path relative to the page.

    Returns:
        The element as :class:`Markup`.

    Raises:
        ValueError: for anything but a relative path.

    Example:
        >>> script_file("assets/viewer.js")
        '<script src="assets/viewer.js"></script>'
    """
    check_url(src, "src")
    if src.startswith("data:"):
        raise ValueError("src: a script must be a file beside the page, not a data: URL")
    return Markup(f'<script src="{escape(src)}"></script>')


def document(title: str, css: str, *body: Any, script: str | None = None) -> str:
    """A whole page, as text.

    ``<!doctype html>``, a head with the UTF-8 charset, the viewport, ``title`` and ``css``, and a body of
    ``body`` (escaped unless :class:`Markup`), then ``script`` when given.

    Args:
        title: the page title (text).
        css: the page's style sheet (see :func:`raw_text_element`).
        body: the body's children.
        script: a script run by the page (see :func:`raw_text_element`), or None.

    Returns:
        The page, ending with a newline.

    Example:
        >>> page = document("QC <report>", "body{margin:0}", el("h1", "Cases"))
        >>> page.startswith("<!doctype html>"), "<title>QC &lt;report&gt;</title>" in page
        (True, True)
    """
    head = el("head", el("meta", charset="utf-8"), el("meta", name="viewport", content="width=device-width"),
              el("title", title), raw_text_element("style", css))
    tail = raw_text_element("script", script) if script is not None else None
    return str(frag(Markup("<!doctype html>"), el("html", head, el("body", *body, tail), lang="en"), "\n"))
