"""JUnit XML: one testsuite per file, one failing testcase per diagnostic, one passing case for a clean file."""

from __future__ import annotations

import re
from collections.abc import Sequence
from xml.etree import ElementTree as ET

from packcfg.core.diagnostics import Diagnostic

# XML 1.0 cannot carry most control characters, even escaped; a message quoting a bad file may hold one.
_XML_INVALID = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _clean(text: str) -> str:
    return _XML_INVALID.sub("\ufffd", text)


def render(diagnostics: Sequence[Diagnostic], files: Sequence[str], *, color: bool = False) -> str:
    by_file: dict[str, list[Diagnostic]] = {f: [] for f in files}
    for d in diagnostics:
        by_file.setdefault(d.file, []).append(d)
    root = ET.Element("testsuites", name="packcfg lint")
    total = failures = 0
    for file, found in by_file.items():
        errors = [d for d in found if d.severity.value != "info"]
        suite = ET.SubElement(
            root,
            "testsuite",
            name=_clean(file),
            tests=str(max(len(found), 1)),
            failures=str(len(errors)),
            errors="0",
            skipped=str(len(found) - len(errors)),
        )
        total += max(len(found), 1)
        failures += len(errors)
        if not found:
            ET.SubElement(suite, "testcase", name="packcfg lint", classname=_clean(file))
        for d in found:
            case = ET.SubElement(
                suite,
                "testcase",
                name=_clean(f"{d.code} {d.title or ''}".strip()),
                classname=_clean(file),
                file=_clean(d.file),
                line=str(d.line),
            )
            text = f"{d.file}:{d.line}:{d.column}: {d.code} {d.message}"
            if d.fix is not None:
                text += f"\nfix: {d.fix.description}"
            elif d.hint:
                text += f"\nhint: {d.hint}"
            # info findings are advice, not failures: report them as skipped cases with the message
            tag = "skipped" if d.severity.value == "info" else "failure"
            el = ET.SubElement(case, tag, message=_clean(d.message), type=f"{d.code} ({d.severity.value})")
            el.text = _clean(text)
    root.set("tests", str(total))
    root.set("failures", str(failures))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
