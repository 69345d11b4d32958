// Post the graph-budget report on the pull request, or update the comment posted before.
//
// Called from actions/github-script (by the composite action beside this file and by
// .github/workflows/graph-budget.yml):
//
//   await require(".../comment.js")({ github, context, core }, "graph-budget/report.md",
//                                   { htmlUrl: "<the artifact holding report.html>" });
//
// The report starts with the hidden marker below; the one comment that starts with it is
// edited in place, so a pull request carries one graph-budget comment however often it runs.
// A pull request from a fork gets a read-only token: then the report stays in the job summary
// and this says why, without failing the job.
const fs = require("fs");

const MARKER = "<!-- graph-budget -->";

module.exports = async function postComment({ github, context, core }, path, links = {}) {
  const pull = context.payload.pull_request;
  if (!pull) {
    core.info("Not a pull request: no comment to post.");
    return;
  }
  // No report (a usage error, a crash before the reports): the comment of an earlier push,
  // perhaps a green one, must not stand beside this run's red check.
  const missing = !path || !fs.existsSync(path);
  if (missing) {
    core.warning(`No graph-budget report at ${path}: the comment says this run checked nothing.`);
  }
  let body = missing
    ? `${MARKER}\n### ❌ Graph budget: this run wrote no report\n\nThe graph-budget step ` +
      "stopped before its reports (a usage error or a crash: see the job's log), so this " +
      "commit's budgets were not checked.\n"
    : fs.readFileSync(path, "utf8");
  if (!missing && links.htmlUrl) {
    body +=
      `\n[📊 Interactive HTML report](${links.htmlUrl}): roofline, module icicle, ` +
      "per-layer table and graph (download, unzip, open report.html)\n";
  }
  const { owner, repo } = context.repo;
  const issue_number = pull.number;
  try {
    const comments = await github.paginate(github.rest.issues.listComments, {
      owner,
      repo,
      issue_number,
      per_page: 100,
    });
    const previous = comments.find((c) => (c.body || "").startsWith(MARKER));
    if (previous) {
      await github.rest.issues.updateComment({ owner, repo, comment_id: previous.id, body });
      core.info(`Updated the graph-budget comment: ${previous.html_url}`);
    } else if (missing) {
      core.info("No graph-budget comment to correct: none posted.");
    } else {
      const { data } = await github.rest.issues.createComment({ owner, repo, issue_number, body });
      core.info(`Posted the graph-budget comment: ${data.html_url}`);
    }
  } catch (error) {
    if (error.status === 403 || error.status === 404) {
      core.warning(
        "Cannot comment on this pull request (a fork's token is read-only, or the job lacks " +
          "'pull-requests: write'); the report is in the job summary."
      );
      return;
    }
    throw error;
  }
};
