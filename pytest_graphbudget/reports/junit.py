"""``--graph-budget-junit``: JUnit XML written with ``xml.etree``, valid against Jenkins' schema.

One ``<testsuite>`` per budget file or test module, one ``<testcase>`` per model, a
``<property>`` per figure of every model, and a ``<failure>`` (or ``<error>``) carrying the
whole verdict. The schema (``junit-10.xsd``, the one Jenkins' xUnit plugin uses) allows
properties on a suite, not on a test case, so each suite carries its models' figures as
``<model>.<figure>``; each test case repeats them, readable, in its ``<system-out>``.

``pytest_properties`` gives the same figures to pytest's own ``--junitxml``, as properties
of the test that profiled the model.

The document is built with ``xml.etree.ElementTree``, as pytest's own ``junitxml.py`` builds
its report, rather than with ``junit-xml``: that library writes attributes junit-10.xsd rejects
(``disabled``) and times it may print as ``1e-05``, so its output had to be parsed again and
cleaned. Building the elements ourselves writes only what the schema declares, once.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from pytest_graphbudget.gate.renames import KEYS as RENAME_KEYS
from pytest_graphbudget.reports import common

PROPERTY_PREFIX = "graph_budget"
ILLEGAL_XML = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
"""Characters XML 1.0 cannot hold (an exception's text may carry them): written as ``#x1B``,
as pytest's ``bin_xml_escape`` does, so the document still parses."""


def figures(result: Any) -> dict[str, float | int]:
    """Every total of the profile, in the profile JSON's order, plus the verdict's inputs."""
    return dict(common.totals(result))


def pytest_properties(results: list[Any]) -> list[tuple[str, object]]:
    """``("graph_budget.flops", 16512)``, ... for one test's models (pytest's ``--junitxml``).

    A test that profiled one model gets ``graph_budget.<figure>``; one that profiled several
    gets ``graph_budget.<label>.<figure>`` for each. ``graph_budget.verdict`` (or
    ``graph_budget.<label>.verdict``) is ``pass``, ``warn``, ``fail`` or ``error``.
    """
    properties: list[tuple[str, object]] = []
    for result in results:
        prefix = PROPERTY_PREFIX if len(results) == 1 else f"{PROPERTY_PREFIX}.{result.label}"
        properties.append((f"{prefix}.verdict", common.verdict(result)))
        properties += [(f"{prefix}.{key}", v) for key, v in figures(result).items()]
    return properties


def suite_name(result: Any) -> str:
    """The budget file or test module: the node id's file part."""
    return result.nodeid.split("::", 1)[0]


def case_name(result: Any) -> str:
    """The model within its file: ``resnet18`` (TOML) or ``test_fits::resnet18``."""
    rest = result.id.split("::", 1)
    return rest[1] if len(rest) == 2 else result.label


def classname(result: Any) -> str:
    """``budgets.vision`` for ``budgets/vision.toml``: dotted, as JUnit readers group them."""
    path = Path(suite_name(result))
    return ".".join((*path.parent.parts, path.stem)).lstrip(".") or path.name


def case_output(result: Any) -> str:
    """The test case's ``<system-out>``: figures, limits, baseline changes, every finding;
    first, what a rename left (``gate/renames.py``): a regression check it may have skipped."""
    renamed = [f for f in result.findings if f["key"] in RENAME_KEYS]
    lines = [f"{f['severity']}: {f['message']}" for f in renamed]
    if result.profile:
        for key, figure in common.FIGURES.items():
            if key not in result.profile["totals"]:
                continue
            line = f"{figure.heading}: {common.figure_with_limit(result, key, ' / limit ')}"
            if result.baseline and key in result.baseline:
                line += f" ({common.format_change(result, key)} vs baseline)"
            lines.append(line)
        lines += [f"limit: {part}" for part in common.extra_limits(result, common.FIGURES)]
        trace = result.profile.get("trace", {})
        lines.append(
            f"hardware: {result.budget.get('hardware')}; traced by {trace.get('method', '?')}"
        )
    for finding in result.findings:
        if finding not in renamed:
            lines.append(f"{finding['severity']}: {finding['message']}")
    if result.error:
        lines.append(f"error: {result.error}")
    return "\n".join(lines)


def xml_text(text: object) -> str:
    """Text for an attribute or an element: XML-illegal characters made visible."""
    return ILLEGAL_XML.sub(lambda m: f"#x{ord(m.group()):02X}", str(text))


def element(tag: str, text: str = "", **attributes: object) -> ET.Element:
    """An element with the attributes given (in order) and, if any, its text."""
    node = ET.Element(tag, {k: xml_text(v) for k, v in attributes.items()})
    if text:
        node.text = xml_text(text)
    return node


def seconds(result: Any) -> float:
    """How long the model took to trace, to the microsecond; 0 when unknown."""
    value = (result.profile or {}).get("trace", {}).get("seconds")
    return round(value, 6) if value else 0.0


def test_case(result: Any) -> ET.Element:
    """One model's ``<testcase>``: its ``<error>`` or ``<failure>`` (the whole verdict as the
    text, each failure's first clause as the message), then its ``<system-out>``."""
    attributes: dict[str, object] = {"name": case_name(result)}
    if seconds(result):
        attributes["time"] = f"{seconds(result):f}"
    case = element("testcase", **attributes, classname=classname(result))
    failures = common.findings(result, "fail")
    if common.verdict(result) == common.UNCHECKED:  # no limit, no baseline entry: not a pass
        case.append(element("skipped", message=common.unchecked_message(result)))
    elif result.error is not None:
        case.append(
            element("error", result.message(), type="graph-budget error", message=result.error)
        )
    elif failures:
        summary = "; ".join(f["message"].split("; ", 1)[0] for f in failures)
        case.append(element("failure", result.message(), type="graph-budget", message=summary))
    output = case_output(result)
    if output:
        case.append(element("system-out", output))
    return case


def test_suite(
    file: str, members: list[Any], environment: Mapping[str, str] | None = None
) -> ET.Element:
    """One file's ``<testsuite>``: counts, what the figures were measured in
    (``environment.torch``, ...) and its models' figures as properties, its cases."""
    cases = [test_case(result) for result in members]
    errors = sum(result.error is not None for result in members)
    failures = sum(
        result.error is None and bool(common.findings(result, "fail")) for result in members
    )
    skipped = sum(common.verdict(result) == common.UNCHECKED for result in members)
    suite = element(
        "testsuite",
        errors=errors,
        failures=failures,
        name=file,
        skipped=skipped,
        tests=len(members),
        time=f"{sum(seconds(r) for r in members):.3f}",  # Surefire's pattern: never "1e-05"
        file=file,
    )
    properties = ET.SubElement(suite, "properties")
    for name, version in (environment or {}).items():
        properties.append(element("property", name=f"environment.{name}", value=version))
    for result in members:
        name = case_name(result)
        values = {"verdict": common.verdict(result), **figures(result)}
        for key, value in values.items():
            properties.append(element("property", name=f"{name}.{key}", value=value))
    suite.extend(cases)
    return suite


def render(
    results: list[Any], stale: Collection[str] = (), environment: Mapping[str, str] | None = None
) -> str:
    """The XML document (without its declaration), one suite per file in file order."""
    by_file: dict[str, list[Any]] = defaultdict(list)
    for result in sorted(results, key=lambda r: r.id):
        by_file[suite_name(result)].append(result)
    suites = [test_suite(f, members, environment) for f, members in sorted(by_file.items())]
    root = element(
        "testsuites",
        errors=sum(int(s.get("errors", 0)) for s in suites),
        failures=sum(int(s.get("failures", 0)) for s in suites),
        tests=sum(int(s.get("tests", 0)) for s in suites),
        time=f"{sum(seconds(r) for r in results):.3f}",
        name=f"graph budget: {common.title(results, stale)}",  # the run's title, as every report
    )
    root.extend(suites)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=False) + "\n"


def write(
    path: Path,
    results: list[Any],
    stale: Collection[str] = (),
    environment: Mapping[str, str] | None = None,
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = render(results, stale, environment)
    path.write_text('<?xml version="1.0" encoding="utf-8"?>\n' + text, "utf-8")
