"""``controller.api.submit``: flags and script directives -> manifest, table-driven, no I/O.

Every manifest built here is also put through the real admission (``check_documents``), so a test
cannot pass on a manifest gflowd would reject.
"""

from __future__ import annotations

import pytest

from controller.api.submit import (
    SubmitError,
    build,
    default_stem,
    merge,
    parse_flags,
    parse_time,
    pinned_script,
    read_directives,
    render,
)
from controller.client.review import check_documents
from controller.util.yamlio import load_one


def manifest_of(argv: list[str], **kwargs):
    options, rest, dashes = parse_flags(argv)
    kwargs.setdefault("cwd", "/home/ada/proj")
    kwargs.setdefault("suffix", "abc12")
    submission = build(options, command=rest if dashes else None, **kwargs)
    text = render(submission.manifest)
    answer = check_documents("run", text)
    assert answer["errors"] == [], answer["errors"]
    assert load_one(text) == submission.manifest  # the text says what the dict says
    return submission


@pytest.mark.parametrize(
    "argv, expected_spec",
    [
        (["--", "python3", "train.py"], {"command": ["python3", "train.py"], "workingDir": "/home/ada/proj"}),
        (["--gpus", "2", "--gpu-type", "H100", "--", "x"], {"resources": {"gpus": 2, "gpuType": "H100"}}),
        (["-G2", "--", "x"], {"resources": {"gpus": 2}}),
        (
            ["--shared", "--gpus=1", "--gpu-memory", "20Gi", "--", "x"],
            {"sharing": "Shared", "resources": {"gpus": 1, "gpuMemory": "20Gi"}},
        ),
        (["--memory", "16Gi", "--", "x"], {"resources": {"memory": "16Gi"}}),
        (["--mem", "4096", "--", "x"], {"resources": {"memory": "4096Mi"}}),
        (["--time", "4h", "--", "x"], {"timeLimit": "4h"}),
        (["--time", "1:30:00", "--", "x"], {"timeLimit": "1h30m"}),
        (["--priority", "-3", "--", "x"], {"priority": -3}),
        (["--retries", "2", "--", "x"], {"backoffLimit": 2}),
        (["--env", "A=1", "-e", "B=x=y", "--", "x"], {"env": {"A": "1", "B": "x=y"}}),
        (["--conda-env", "torch", "--", "x"], {"condaEnv": "torch"}),
        (["--start-after", "+2h", "--", "x"], {"startAfter": "+2h"}),
        (["--workdir", "sub/dir", "--", "x"], {"workingDir": "/home/ada/proj/sub/dir"}),
        (["--workdir", "~/data", "--", "x"], {"workingDir": "~/data"}),
        (["--workdir", "/abs", "--", "x"], {"workingDir": "/abs"}),
        (
            ["--after", "prep", "--after", "other:failed", "--", "x"],
            {"dependsOn": [{"job": "prep"}, {"job": "other", "condition": "Failed"}]},
        ),
        (["--after", "@:Finished", "--", "x"], {"dependsOn": [{"job": "last-one", "condition": "Finished"}]}),
    ],
)
def test_flags_become_manifest_fields(argv, expected_spec):
    spec = manifest_of(argv, last_job="last-one").manifest["spec"]
    for key, value in expected_spec.items():
        assert spec[key] == value, key


def test_labels_and_names():
    sub = manifest_of(["--name", "exact", "-l", "team=vision,stage=dev", "--", "x"])
    assert sub.manifest["metadata"] == {"name": "exact", "labels": {"team": "vision", "stage": "dev"}}
    assert sub.exact_name
    generated = manifest_of(["--", "python3", "-u", "Train_Model.py"])
    assert generated.name == "train-model-abc12" and not generated.exact_name


@pytest.mark.parametrize(
    "command, stem",
    [
        (["python3", "train.py"], "train"),
        (["python3.11", "-u", "src/Fine_Tune.py", "--lr", "1"], "fine-tune"),
        (["python", "-m", "pkg.evaluate"], "evaluate"),
        (["torchrun", "--nproc_per_node=2", "ddp.py"], "ddp"),
        (["uv", "run", "bench.py"], "bench"),
        (["/usr/bin/nvidia-smi"], "nvidia-smi"),
        (["sleep", "30"], "sleep"),
        (["python3"], "python3"),
        (["sh", "-c", "echo lr={lr}"], "echo"),
        (["bash", "-c", "python3 train.py --lr 1 && echo done"], "train"),
        (["python3", "-c", "print(1)"], "python3"),
    ],
)
def test_generated_names_say_what_runs(command, stem):
    assert default_stem(command, None) == stem


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--gpu", "1", "--", "x"], "unknown flag --gpu"),
        (["--gpus"], "--gpus needs a value"),
        (["--gpus", "two", "--", "x"], "--gpus 'two' is not a whole number"),
        (["--time", "4x", "--", "x"], "--time '4x' does not parse"),
        (["--param", "lr=", "--", "x"], "--param lr: give at least one value"),
        (["--param", "lr", "--", "x"], "use KEY=V1,V2"),
        (["--env", "NOEQUALS", "--", "x"], "--env 'NOEQUALS': use KEY=VALUE"),
        (["--after", "@", "--", "x"], "--after @: you have not submitted"),
        (["--after", "a:sometimes", "--", "x"], "Succeeded, Failed or Finished"),
        (["--name", "Bad_Name", "--", "x"], "not a valid name"),
        (["--array", "9-0", "--", "x"], "runs backwards"),
        (["--array", "0-9", "--param", "a=1", "--", "x"], "not both"),
        (["--shared", "--"], "nothing to run"),
        (["--memory", "lots", "--", "x"], "--memory"),
        (["--max-concurrent", "2", "--", "x"], "--max-concurrent is for sweeps"),
        (["--shared", "--gpus", "1", "--", "x"], "--shared needs --gpu-memory"),
        (["--shared", "--gpu-memory", "2Gi", "--", "x"], "--shared needs --gpus 1 or more"),
    ],
)
def test_bad_input_gets_one_line_naming_the_fix(argv, message):
    with pytest.raises(SubmitError) as raised:
        manifest_of(argv)
    assert message in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("30", 1800),
        ("5:30", 330),
        ("1:00:00", 3600),
        ("2-12", 216000),
        ("1-02:30", 95400),
        ("1-00:00:05", 86405),
        ("4h30m", 16200),
        ("90s", 90),
        ("1.5h", 5400),
    ],
)
def test_time_in_slurm_and_go_formats(text, seconds):
    assert parse_time(text) == seconds


def test_sweeps_from_params_and_arrays():
    sweep = manifest_of(
        ["--param", "lr=0.1,0.01", "--param", "bs=32,64", "--gpus", "1", "--", "python3", "t.py", "--lr", "{lr}"]
    )
    assert sweep.kind == "sweep" and sweep.manifest["kind"] == "Sweep"
    assert sweep.manifest["spec"]["matrix"] == {"lr": ["0.1", "0.01"], "bs": ["32", "64"]}
    assert sweep.manifest["spec"]["template"]["command"][-1] == "{lr}"
    assert sweep.manifest["spec"]["template"]["resources"] == {"gpus": 1}
    array = manifest_of(["--array", "0-9%2", "--", "x"])
    assert array.manifest["spec"]["indices"] == "0-9" and array.manifest["spec"]["parallelism"] == 2
    assert array.manifest["spec"]["template"]["env"] == {
        "SLURM_ARRAY_TASK_ID": "{index}",
        "GFLOW_ARRAY_TASK_ID": "{index}",
    }
    limited = manifest_of(["--param", "a=1,2,3", "--max-concurrent", "1", "--", "x"])
    assert limited.manifest["spec"]["parallelism"] == 1


SBATCH = """\
#!/bin/bash
#SBATCH --job-name=My_Train
#SBATCH --gres=gpu:a100:2
#SBATCH -t 2-00:30:00
#SBATCH --mem=16G
#SBATCH --partition=gpu
#SBATCH --frobnicate=3
#SBATCH --dependency=afterok:prep:clean,afterany:eval
#SBATCH --array=0-3%2

# GFLOW --priority 5
#SBATCH --gpus=1
python3 train.py
#SBATCH --time=1
# GFLOW --gpus 7
"""


def test_sbatch_directives_of_the_leading_block_only():
    directives = read_directives(SBATCH, "train.sh")
    assert directives.options == {
        "name": "My_Train",
        "gpu_type": "a100",
        "gpus": "1",
        "time": "2-00:30:00",
        "memory": "16G",
        "after": ["prep:Succeeded", "clean:Succeeded", "eval:Finished"],
        "array": "0-3%2",
        "priority": "5",
        "sbatch_script": True,
    }
    assert directives.warnings == [
        "train.sh line 6: #SBATCH --partition is ignored on one machine",
        "train.sh line 7: #SBATCH --frobnicate is not supported; ignored",
    ]
    assert directives.name_from_sbatch
    options = merge(directives.options, parse_flags(["--gpus", "3", "--array", "0-1"])[0])
    sub = build(options, script_text=SBATCH, script_path="/p/train.sh", cwd="/p", suffix="zz9", name_from_sbatch=True)
    assert sub.name == "my-train-zz9"
    spec = sub.manifest["spec"]
    assert spec["indices"] == "0-1" and "parallelism" not in spec  # the flag's array replaced the directive's
    template = spec["template"]
    assert template["resources"] == {"gpus": 3, "gpuType": "a100", "memory": "16Gi"}
    assert template["timeLimit"] == "2d30m" and template["priority"] == 5


def test_gflow_directives_are_gflow_flags_and_typos_stop():
    assert read_directives("#!/bin/sh\n# GFLOW --gpus 1 --env A=1 # comment\n", "s").options == {
        "gpus": "1",
        "env": ["A=1"],
    }
    with pytest.raises(SubmitError, match="s line 2: unknown flag --gpu"):
        read_directives("#!/bin/sh\n# GFLOW --gpu 1\n", "s")
    with pytest.raises(SubmitError, match="--wait is not allowed in a # GFLOW directive"):
        read_directives("# GFLOW --wait\n", "s")


@pytest.mark.parametrize(
    "script",
    [
        "#!/bin/bash\necho a\n",
        "echo no shebang, no final newline",
        "  indented first\n\n\n",
        "#!/usr/bin/env python3\nprint('x')\nGFLOW_PINNED_SCRIPT\n",
        "\ttab\n",
    ],
)
def test_a_pinned_script_survives_the_yaml_round_trip(script):
    sub = manifest_of(["x", "--lr", "it's"], script_text=script, script_path="/p/x", script_args=["--lr", "it's"])
    pinned = pinned_script(script, "/p/x", ["--lr", "it's"])
    assert sub.manifest["spec"]["script"] == pinned
    assert script in pinned and "'it'\"'\"'s'" in pinned


def test_a_generated_name_whose_manifest_exists_draws_another_suffix(tmp_path, monkeypatch):
    """``run`` without --name: the name's own manifest file is looked up (not the whole spec dir
    listed), and a taken one is drawn again; every drawn suffix is five of a-z0-9."""
    import controller.client.write.submit as submit
    from controller.paths import Home

    home = Home.locate(str(tmp_path / "home"), None)
    home.spec_dir.mkdir(parents=True)
    (home.spec_dir / "sleep-aaaaa.yaml").write_text("metadata: {name: sleep-aaaaa}\n")
    (home.spec_dir / "sleep-bbbbb.yml").write_text("metadata: {name: sleep-bbbbb}\n")
    drawn = iter(["aaaaa", "bbbbb", "ccccc"])
    monkeypatch.setattr(submit, "_random_suffix", lambda: next(drawn))
    submission = submit.build_submission(home, {}, command=["sleep", "1"], cwd=str(tmp_path))
    assert submission.name == "sleep-ccccc"

    monkeypatch.undo()
    suffixes = {submit._random_suffix() for _ in range(200)}
    assert all(len(s) == 5 and set(s) <= set("abcdefghijklmnopqrstuvwxyz0123456789") for s in suffixes)
    assert len(suffixes) > 190  # drawn, not fixed
