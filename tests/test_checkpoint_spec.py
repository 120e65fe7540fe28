"""spec.checkpoint as users write it: the manifest field, ``#SBATCH --signal``, ``# GFLOW --signal``
and ``run --signal`` (sbatch's ``[B:]SIG[@SECONDS]``), and bad values as one line naming the field."""

from __future__ import annotations

import pytest
from test_submit import manifest_of

from controller.api.submit import SubmitError, build, parse_flags, parse_signal, read_directives
from controller.client.review import check_documents


@pytest.mark.parametrize(
    "text, expected",
    [
        ("B:USR1@600", {"signal": "USR1", "before": "600s"}),
        ("USR2", {"signal": "USR2", "before": "60s", "scope": "All"}),  # sbatch's default time; every process
        ("SIGUSR1@5", {"signal": "USR1", "before": "5s", "scope": "All"}),
        ("B:10@30", {"signal": "USR1", "before": "30s"}),  # a number, as sbatch takes
    ],
)
def test_sbatch_signal_text(text, expected):
    assert parse_signal(text) == expected


def test_a_bad_signal_says_everything_wrong_in_one_line():
    with pytest.raises(SubmitError) as caught:
        parse_signal("X:KILL@soon")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("--signal=X:KILL@soon: ")
    assert "'X' before ':'" in message and "'KILL' is not a signal" in message and "'soon' after '@'" in message


def test_sbatch_and_gflow_directives_and_the_flag_become_spec_checkpoint():
    script = "#!/bin/bash\n#SBATCH --signal=B:USR1@600\n#SBATCH --time=1:00:00\npython train.py\n"
    directives = read_directives(script, "train.sh")
    assert directives.options["signal"] == "B:USR1@600" and directives.warnings == []
    sub = build(directives.options, script_text=script, script_path="/p/train.sh", cwd="/p", suffix="zz9")
    assert sub.manifest["spec"]["checkpoint"] == {"signal": "USR1", "before": "600s"}
    assert read_directives("#!/bin/sh\n# GFLOW --signal USR2@30\n", "s").options == {"signal": "USR2@30"}
    spec = manifest_of(["--signal", "B:USR1@90", "--time", "2h", "--", "python3", "train.py"]).manifest["spec"]
    assert spec["checkpoint"] == {"signal": "USR1", "before": "90s"} and spec["timeLimit"] == "2h"
    with pytest.raises(SubmitError, match="--signal=KILL"):
        build(parse_flags(["--signal", "KILL"])[0], command=["x"], cwd="/p", suffix="a")


@pytest.mark.parametrize(
    "checkpoint, words",
    [
        ("{signal: KILL}", ["spec.checkpoint.signal", "KILL"]),
        ("{before: -5}", ["spec.checkpoint.before"]),
        ("{grace: soon}", ["spec.checkpoint.grace"]),
        ("{scope: Some}", ["spec.checkpoint.scope"]),
        ("{requeue: true, sginal: USR1}", ["sginal"]),
    ],
)
def test_bad_checkpoint_fields_are_rejected_naming_the_field(checkpoint, words):
    text = f"metadata: {{name: a}}\nspec:\n  command: [x]\n  checkpoint: {checkpoint}\n"
    errors = check_documents("apply", text)["errors"]
    assert errors, text
    joined = " ".join(str(e) for e in errors)
    for word in words:
        assert word in joined, (word, errors)


def test_a_good_checkpoint_is_accepted():
    text = "metadata: {name: a}\nspec:\n  command: [x]\n  checkpoint: {signal: SIGUSR2, before: 10m, grace: 5m}\n"
    assert check_documents("apply", text)["errors"] == []
