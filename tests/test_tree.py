"""``gflowctl get jobs --tree`` (gqueue -t): a pipeline drawn as it waits, against a real gflowd."""

from __future__ import annotations

from helpers import ctl, wait_for, wait_phase, write_manifest

PIPELINE = {
    "prep.yaml": "metadata: {name: prep}\nspec:\n  command: ['true']\n",
    "grid.yaml": (
        "kind: Sweep\nmetadata: {name: grid}\nspec:\n  template:\n    command: [sh, -c, 'echo {lr}']\n"
        "    dependsOn: [{job: prep}]\n  matrix:\n    lr: ['0.1', '0.01']\n"
    ),
    "evaluate.yaml": "metadata: {name: evaluate}\nspec:\n  command: ['true']\n  dependsOn: [{job: grid}]\n",
    "report.yaml": "metadata: {name: report}\nspec:\n  command: ['true']\n  dependsOn: [{job: evaluate}, {job: prep}]\n",
    "lone.yaml": "metadata: {name: lone}\nspec:\n  command: ['true']\n",
}


def test_get_jobs_tree_draws_dependencies_and_sweeps(home, gflowd):
    for name, text in PIPELINE.items():
        write_manifest(home / "jobs", name, text)
    daemon = gflowd()
    wait_phase(home, "report", "Succeeded", timeout=60, daemon=daemon)
    wait_for(
        lambda: "dependsOn" in (ctl(home, "get", "jobs", "report", "-o", "json").stdout),
        message="dependsOn in the status",
    )

    result = ctl(home, "get", "jobs", "--tree")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    width = lines[0].index("USER")
    names = [line[:width].rstrip() for line in lines[1:]]
    blocks: list[list[str]] = []  # one per root, in whatever order the roots were created
    for name in names:
        if name[0] in "│├└ ":
            blocks[-1].append(name)
        else:
            blocks.append([name])
    assert sorted(blocks) == [
        ["lone"],
        [
            "prep",
            "└─ sweep/grid",
            "   ├─ grid-0",
            "   ├─ grid-1",
            "   └─ evaluate",
            "      └─ report (also after prep)",
        ],
    ], result.stdout
    assert "2 children: 2 Succeeded" in result.stdout

    wrong = ctl(home, "get", "jobs", "--tree", "-o", "json")
    assert (
        wrong.returncode == 1
        and wrong.stderr.strip() == "error: --tree draws the table; use it without -o json (or with -o wide)"
    )
