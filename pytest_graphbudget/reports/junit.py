"""``--graph-budget-junit``: JUnit XML written with ``junit-xml``, valid against Jenkins' schema.

One ``<testsuite>`` per budget file or test module, one ``<testcase>`` per model, a
``<property>`` per figure of every model, and a ``<failure>`` (or ``<error>``) carrying the
whole verdict. The schema (``junit-10.xsd``, the one Jenkins' xUnit plugin uses) allows
properties on a suite, not on a test case, so each suite carries its models' figures as
``<model>.<figure>``; each test case repeats them, readable, in its ``<system-out>``.

``pytest_properties`` gives the same figures to pytest's own ``--junitxml``, as properties
of the test that profiled the model.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from pytest_graphbudget.reports import common

PROPERTY_PREFIX = "graph_budget"
SCHEMA_ATTRIBUTES = {
    "testsuites": {"name", "time", "tests", "failures", "errors"},
    "testsuite": {
        "name",
        "tests",
        "failures",
        "errors",
        "group",
        "time",
        "skipped",
        "timestamp",
        "hostname",
        "id",
        "package",
        "file",
        "log",
        "url",
    },
    "testcase": {"name", "time", "classname", "group"},
}
"""The attributes junit-10.xsd declares: junit-xml also writes ``disabled`` (and, if asked,
``status``, ``file``, ``line`` on a test case), which that schema rejects."""


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
    """The test case's ``<system-out>``: figures, limits, baseline changes, every finding."""
    lines = []
    if result.profile:
        for key, figure in common.FIGURES.items():
            if key not in result.profile["totals"]:
                continue
            line = f"{figure.label}: {common.figure_with_limit(result, key, ' / limit ')}"
            if result.baseline and key in result.baseline:
                line += f" ({common.format_change(result, key)} vs baseline)"
            lines.append(line)
        lines += [f"limit: {part}" for part in common.extra_limits(result, common.FIGURES)]
        trace = result.profile.get("trace", {})
        lines.append(
            f"hardware: {result.budget.get('hardware')}; traced by {trace.get('method', '?')}"
        )
    for finding in result.findings:
        lines.append(f"{finding['severity']}: {finding['message']}")
    if result.error:
        lines.append(f"error: {result.error}")
    return "\n".join(lines)


def test_suites(results: list[Any]) -> list[Any]:
    """The ``junit_xml.TestSuite``s, one per file, in file order."""
    from junit_xml import TestCase, TestSuite

    by_file: dict[str, list[Any]] = defaultdict(list)
    for result in sorted(results, key=lambda r: r.id):
        by_file[suite_name(result)].append(result)
    suites = []
    for file, members in sorted(by_file.items()):
        cases, properties = [], {}
        for result in members:
            name = case_name(result)
            seconds = (result.profile or {}).get("trace", {}).get("seconds")
            case = TestCase(
                name,
                classname=classname(result),
                elapsed_sec=round(seconds, 6) if seconds else None,
                stdout=case_output(result),
            )
            properties[f"{name}.verdict"] = common.verdict(result)
            properties.update({f"{name}.{k}": str(v) for k, v in figures(result).items()})
            failures = common.findings(result, "fail")
            if result.error is not None:
                case.add_error_info(result.error, result.message(), "graph-budget error")
            elif failures:
                summary = "; ".join(f["message"].split("; ", 1)[0] for f in failures)
                case.add_failure_info(summary, result.message(), "graph-budget")
            cases.append(case)
        suites.append(TestSuite(file, cases, properties=properties, file=file))
    return suites


def render(results: list[Any]) -> str:
    """The XML document (UTF-8, declared), restricted to what junit-10.xsd declares."""
    from junit_xml import to_xml_report_string

    text = to_xml_report_string(test_suites(results), prettyprint=False)
    root = ET.fromstring(text)
    root.set("name", "graph budget")
    for element in root.iter():
        allowed = SCHEMA_ATTRIBUTES.get(element.tag)
        if allowed is None:
            continue
        for attribute in [a for a in element.attrib if a not in allowed]:
            del element.attrib[attribute]
        if element.tag != "testcase" and "time" in element.attrib:
            # Surefire's time pattern takes plain decimals only: never "1e-05".
            element.set("time", f"{float(element.get('time') or 0):.3f}")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=False) + "\n"


def write(path: Path, results: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('<?xml version="1.0" encoding="utf-8"?>\n' + render(results), "utf-8")
