"""Excerpts of the tool's files as the docs show them, so that the blocks are generated:

    python docs_excerpt.py history FILE ID    a --graph-budget-history line of model ID
    python docs_excerpt.py report FILE ID     a --graph-budget-json report with model ID alone
    python docs_excerpt.py xml FILE [XPATH]   an XML file indented (pytest's --junitxml is one
                                              line), or its elements that XPATH finds

The JSON is folded over a few lines as a reader takes it in, with the long tables cut to their
first entries: ``"...": 0`` where entries of an object are left out, ``"..."`` where items of
a list are, ``; ...`` where a message goes on.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET

ENVIRONMENT = ("python", "torch", "pytest-graphbudget")


def cut(table: dict, keep: int) -> dict:
    """The first ``keep`` entries of ``table``, and ``"...": 0`` when some are left out."""
    out = dict(list(table.items())[:keep])
    if len(table) > keep:
        out["..."] = 0
    return out


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False)


def history(path: str, model: str) -> str:
    lines = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    line = next(entry for entry in lines if entry["model"] == model)
    environment = {key: line["environment"][key] for key in ENVIRONMENT}
    layers = {"flops": cut(line["layers"]["flops"], 2), "params": cut(line["layers"]["params"], 0)}
    return "\n".join(
        [
            f'{{"schema": {dumps(line["schema"])}, "commit": "{line["commit"][:7]}...", '
            f'"time": {dumps(line["time"])},',
            f' "environment": {dumps(environment)},',
            f' "model": {dumps(line["model"])}, "tolerance": {dumps(line["tolerance"])},',
            f' "figures": {dumps(cut(line["figures"], 3))},',
            f' "layers": {dumps(layers)}}}',
        ]
    )


WIDTH = 96  # a folded line's length, where its items allow


def fold(head: str, value, indent: int) -> list[str]:
    """``head`` and ``value`` as JSON, its items packed onto lines of at most ``WIDTH``; the
    items of a one-object list are folded as the object's."""
    one = f"{head}{dumps(value)}"
    if len(one) + indent <= WIDTH or not isinstance(value, (dict, list)) or not value:
        return [one]
    opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        opening, closing, value = "[{", "}]", value[0]
    if isinstance(value, dict):
        items = [f"{dumps(key)}: {dumps(item)}" for key, item in value.items()]
    else:
        items = [dumps(item) for item in value]
    column = indent + len(head) + len(opening)
    lines = [head + opening]
    for index, item in enumerate(items):
        item += closing if index == len(items) - 1 else ","
        if lines[-1].endswith(opening) or indent + len(lines[-1]) + 1 + len(item) <= WIDTH:
            lines[-1] += ("" if lines[-1].endswith(opening) else " ") + item
        else:
            lines.append(" " * (column - indent) + item)
    return lines


def block(value: dict, indent: int) -> list[str]:
    """An object one key a line (each folded), at ``indent``."""
    pad = " " * indent
    out = []
    for index, (key, item) in enumerate(value.items()):
        comma = "," if index < len(value) - 1 else ""
        lines = fold(f"{dumps(key)}: ", item, indent)
        out.extend(pad + line for line in lines[:-1])
        out.append(pad + lines[-1] + comma)
    return out


def abridged_model(model: dict) -> dict:
    """A report's model with its profile's and baseline's tables cut, its messages to their
    first clause."""
    out = dict(model)
    if model.get("profile"):
        totals = cut(model["profile"]["totals"], 1)
        out["profile"] = {"schema": model["profile"]["schema"], "totals": totals, "...": 0}
    if model.get("baseline"):
        out["baseline"] = cut(model["baseline"], 2)
    findings = []
    for finding in model.get("findings") or []:
        first, _, rest = finding["message"].partition("; ")
        findings.append({**finding, "message": first + ("; ..." if rest else "")})
    out["findings"] = findings
    return out


def report(path: str, model: str) -> str:
    """The JSON report at ``path``, its models cut to ``model``'s entry."""
    data = json.load(open(path, encoding="utf-8"))
    (entry,) = [m for m in data["models"] if m["id"] == model]
    lines = []
    for index, (key, value) in enumerate(data.items()):
        comma = "," if index < len(data) - 1 else ""
        if key == "models":
            more = ['    "..."'] if len(value) > 1 else []
            lines += ['  "models": [', "    {", *block(abridged_model(entry), 6)]
            lines += ["    }" + ("," if more else ""), *more, "  ]" + comma]
        else:
            lines += block({key: value}, 2)
            lines[-1] += comma
    return "\n".join(["{", *lines, "}"])


def xml(path: str, xpath: str = "") -> str:
    """The XML file at ``path`` indented by two spaces (or the elements ``xpath`` finds)."""
    root = ET.parse(path).getroot()
    found = root.findall(xpath) if xpath else [root]
    for element in found:
        ET.indent(element)
        element.tail = None
    return "\n".join(ET.tostring(e, encoding="unicode", short_empty_elements=True) for e in found)


if __name__ == "__main__":
    kind, *args = sys.argv[1:]
    print({"history": history, "report": report, "xml": xml}[kind](*args))
