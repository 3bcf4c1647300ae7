"""promptfoo's is-xml and contains-xml: the output (or an element inside it) is well-formed XML, and has the
required elements, each a dotted path from the root (``analysis.summary``)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Sequence

_OPEN_TAG = re.compile(r"<([A-Za-z_][\w.-]*)[^>]*>")
_DECLARATION = re.compile(r"^<\?xml[^>]*\?>")
_WRAPPER = "workbench-xml-fragment"


def xml_problem(text: str, required: Sequence[str] | None, fragment: bool = False) -> str:
    """Why ``text`` is not XML with the required elements ("": it is). ``fragment``: several elements (and text
    between them) may stand side by side, as promptfoo's parser reads XML."""
    text = text.strip()
    if not text.startswith("<"):
        return "output is not XML (it does not start with a tag)"
    wrapped = f"<{_WRAPPER}>{_DECLARATION.sub('', text, count=1)}</{_WRAPPER}>" if fragment else text
    try:
        root = ET.fromstring(wrapped)
    except ET.ParseError as exc:
        return f"output is not well-formed XML ({exc})"
    tops = list(root) if fragment else [root]
    missing = [path for path in required or () if not any(_has_path(top, path) for top in tops)]
    return f"XML lacks the element(s) {', '.join(missing)}" if missing else ""


def _has_path(root: ET.Element, path: str) -> bool:
    first, *rest = path.split(".")
    if root.tag != first:
        return False
    nodes = [root]
    for name in rest:
        nodes = [child for node in nodes for child in node if child.tag == name]
        if not nodes:
            return False
    return True


def xml_inside(text: str) -> list[str]:
    """Each stretch from an opening tag to the last closing tag of the same name: the XML candidates in a text."""
    found = []
    for match in _OPEN_TAG.finditer(text):
        end = text.rfind(f"</{match.group(1)}>")
        if end > match.start():
            found.append(text[match.start():end + len(match.group(1)) + 3])
    return found
