"""What a new user tried with the training step, dtypes, sweeps and decode, and got wrong:
each mistake must end in one line that says how to fix it, never a silent green.

All in-process and fast: every refusal here happens before a model is traced.
"""

from __future__ import annotations

import pytest

from pytest_graphbudget import cli


def _check(tmp_path, monkeypatch, capsys, toml: str) -> tuple[int, str]:
    """``graph-budget check`` on one budget file in a fresh project; (exit code, stdout)."""
    (tmp_path / "pyproject.toml").write_text("[tool.graph_budget]\n")
    (tmp_path / "budgets").mkdir()
    (tmp_path / "budgets" / "user.toml").write_text(toml)
    monkeypatch.chdir(tmp_path)
    code = cli.main(["check", "--no-cache", "budgets"])
    return code, capsys.readouterr().out


def test_seq_len_on_an_image_model_is_an_error_in_a_table(tmp_path, monkeypatch, capsys):
    """``seq_len = [64, 128]`` on an image model profiled the same 224x224 image at both "points"
    and passed both: the CLI notes the ignored option, a budget table must refuse it."""
    code, out = _check(
        tmp_path,
        monkeypatch,
        capsys,
        '[models.r]\nmodel = "squeezenet1_1"\nmeta = true\nseq_len = [64, 128]\n'
        'flops_max = "10G"\n',
    )
    assert code == 1
    assert "2 models could not be checked" in out
    for point in ("r[seq_len=64]", "r[seq_len=128]"):
        assert f"error: {point}: seq_len ignored: squeezenet1_1 takes images" in out
    assert "remove seq_len from the table" in out


def _mlp():
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    return net, (torch.randn(1, 4),)


@pytest.fixture(scope="module")
def adam_step():
    """One training step of the tiny MLP with Adam (traced once for the module's tests)."""
    from pytest_graphbudget.api import profile_model

    return profile_model(*_mlp(), mode="train", optimizer="adam")


def test_profile_table_of_a_training_step_says_so(adam_step):
    """``profile --mode train`` printed a step's FLOPs (3x a forward) under the eval summary:
    no mode, no split, no optimizer state, and a peak "weights + inputs + activation peak"
    that did not add up. Adam's state by hand: 2 fp32 moments x 23 parameters = 184 B."""
    from pytest_graphbudget.api import profile_model
    from pytest_graphbudget.cli.sections import summary

    rows = dict(summary(adam_step))
    assert rows["mode"] == "train: forward + backward + optimizer step"
    assert rows["optimizer state"] == "184B"
    assert rows["FLOPs by phase"].startswith("forward ")
    assert "backward " in rows["FLOPs by phase"] and "optimizer " in rows["FLOPs by phase"]
    assert "(weights + optimizer state + inputs + activation peak)" in rows["peak memory"]
    plain = dict(summary(profile_model(*_mlp(), mode="train")))
    assert plain["mode"] == "train: forward + backward" and "optimizer state" not in plain
    assert "mode" not in dict(summary(profile_model(*_mlp())))


def test_a_sweep_says_its_mode_and_dtype():
    """``profile --seq-len 64,128,256 --dtype bfloat16`` printed the bf16 figures under a
    header and a JSON that said nothing of bf16: a reader took them for the fp32 model's."""
    import torch

    from pytest_graphbudget.cli.sweep_view import render
    from pytest_graphbudget.modes.sweep import profile_sweep

    net = torch.nn.Linear(8, 8)
    sweep = profile_sweep(
        net, batch=[1, 2], inputs=lambda batch: torch.randn(batch, 8), dtype="bfloat16"
    )
    body = sweep.to_dict()["sweep"]
    assert (body["mode"], body["dtype"]) == ("eval", "bfloat16")
    assert body["points"][0]["totals"]["weights_bytes"] == 2 * (64 + 8)  # bf16: 2 bytes
    assert ", eval, bfloat16, hardware generic" in render(sweep, "table").splitlines()[0]
    assert "(eval, bfloat16)" in render(sweep, "markdown").splitlines()[0]


def test_compare_says_when_one_side_is_a_training_step(adam_step, tmp_path, capsys):
    """``compare eval.json train.json`` showed +190% FLOPs between two profiles labelled
    alike: a reviewer read a grown model. Each side says its mode, and a mixed pair says so."""
    import json

    from pytest_graphbudget.api import profile_model

    a, b = tmp_path / "eval.json", tmp_path / "train.json"
    a.write_text(json.dumps(profile_model(*_mlp()).to_dict()))
    b.write_text(json.dumps(adam_step.to_dict()))
    assert cli.main(["compare", str(a), str(b)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[0].startswith("A: ") and "training step" not in lines[0]
    assert lines[1].startswith("B: ") and lines[1].endswith(", training step)")
    assert "A is eval mode, B is train mode" in err and len(err.strip().splitlines()) == 1


def test_a_shipped_turing_card_says_why_it_has_no_bfloat16_peak(capsys):
    """User trial: ``--hardware t4 --dtype bfloat16`` said "give it bfloat16 in peak_tflops"
    of a shipped profile; the T4 runs bfloat16 without tensor cores, at its float32 peak."""
    argv = ["profile", "squeezenet1_1", "--meta", "--hardware", "t4", "-q", "--format", "json"]
    assert cli.main([*argv, "--dtype", "bfloat16"]) == 0
    assert (
        "hardware t4 has no bfloat16 peak: latency and bottleneck are judged on its float32 "
        "peak (turing has no bfloat16 tensor cores: the card runs it at that peak)"
    ) in capsys.readouterr().err


def test_a_dtype_the_hardware_has_no_peak_for_is_noted(tmp_path, capsys):
    """``hardware --calibrate`` measures float32 only; ``profile --dtype bfloat16`` on that
    profile priced bf16 at the fp32 peak and said nothing."""
    hw = tmp_path / "hw.toml"
    hw.write_text("[hardware.calibrated]\npeak_tflops = {float32 = 0.16}\nbandwidth_gbs = 12\n")
    argv = ["profile", "squeezenet1_1", "--meta", "--hardware-file", str(hw)]
    argv += ["--hardware", "calibrated", "-q", "--format", "json"]
    assert cli.main([*argv, "--dtype", "bfloat16"]) == 0
    err = capsys.readouterr().err
    assert (
        "hardware calibrated has no bfloat16 peak: latency and bottleneck are judged on its "
        "float32 peak (give it bfloat16 in peak_tflops)" in err
    )
    assert cli.main(argv) == 0
    assert "peak" not in capsys.readouterr().err
    # A sweep's points share the hardware: the note is said once, not once per point.
    assert cli.main([*argv, "--dtype", "bfloat16", "--batch", "1,2"]) == 0
    assert capsys.readouterr().err.count("has no bfloat16 peak") == 1
    # A calibration measures bfloat16 kernels but writes a float32 peak only: those rates,
    # not the float32 peak, price its latency, and the note said otherwise.
    rates = "{flops_per_s = 5e10, bytes_per_s = 1e10, overhead_s = 1e-6}"
    hw.write_text(f"{hw.read_text()}[hardware.calibrated.kernels_bfloat16]\nconv_dense = {rates}\n")
    assert cli.main([*argv, "--dtype", "bfloat16"]) == 0
    err = capsys.readouterr().err
    assert "bottleneck is judged on its float32 peak, latency on its calibrated bfloat16" in err
    assert "latency and bottleneck" not in err


def test_measure_runs_without_a_latency_limit_is_an_error(tmp_path, monkeypatch, capsys):
    """``measure_runs = 5`` with no ``latency_measured_max`` timed nothing and passed: the
    user meant a measured check. A table or marker that sets it alone is refused."""
    code, out = _check(
        tmp_path,
        monkeypatch,
        capsys,
        '[models.r]\nmodel = "squeezenet1_1"\nmeta = true\nmeasure_runs = 5\nflops_max = "1G"\n',
    )
    assert code == 1
    assert "measure_runs in " in out and "has no effect without latency_measured_max" in out


def test_measure_runs_marker_without_a_latency_limit_is_a_usage_error(pytester):
    pytester.makepyfile(
        """
        import pytest, torch
        from pytest_graphbudget import ModelCase

        @pytest.fixture
        def net():
            return ModelCase(torch.nn.Linear(2, 2), (torch.randn(1, 2),))

        @pytest.mark.flops_max("1G")
        @pytest.mark.graph_budget(measure_runs=5)
        def test_a(net): ...
        """
    )
    run = pytester.runpytest("-p", "no:cacheprovider", "--graph-budget")
    run.assert_outcomes(errors=1)
    run.stdout.fnmatch_lines(["*measure_runs in @pytest.mark.graph_budget on *has no effect*"])


def test_an_optimizer_without_train_mode_is_refused_where_written(tmp_path, monkeypatch, capsys):
    """``optimizer = "adam"`` without ``mode = "train"`` failed only after the model was built,
    in Python's spelling (``pass mode='train'``); now the table says it in TOML's."""
    code, out = _check(
        tmp_path,
        monkeypatch,
        capsys,
        '[models.r]\nmodel = "squeezenet1_1"\nmeta = true\noptimizer = "adam"\nflops_max = "1G"\n',
    )
    assert code == 1
    needs = 'error: r: optimizer in budgets/user.toml::r needs mode = "train": an eval forward'
    assert needs in out


@pytest.mark.parametrize("command", ["profile", "init", "compare"])
def test_cli_optimizer_without_train_mode_is_refused_in_cli_words(command, capsys):
    """``--optimizer adam`` alone built the model, then said ``pass mode='train' too``."""
    argv = [command, "no-such-model-is-built", "--optimizer", "adam", "-q"]
    if command == "compare":
        argv.insert(2, "another-one")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "graph-budget: error: --optimizer needs --mode train: an eval forward has no optimizer"
    ]


def test_a_budget_judged_on_a_peak_the_hardware_lacks_says_so(pytester):
    """A project profile with a float32 peak only (as ``hardware --calibrate`` writes it) and
    ``graph_budget(dtype="bfloat16")`` judged latency_max on the fp32 peak without a word."""
    (pytester.path / "pyproject.toml").write_text(
        "[tool.graph_budget]\nhardware = 'calib'\n\n"
        "[tool.graph_budget.hardware_profiles.calib]\n"
        "peak_tflops = {float32 = 0.16}\nbandwidth_gbs = 12\n"
    )
    pytester.makepyfile(
        """
        import pytest, torch
        from pytest_graphbudget import ModelCase

        @pytest.fixture
        def net():
            return ModelCase(torch.nn.Linear(2, 2), (torch.randn(1, 2),), name="net")

        @pytest.mark.latency_max("1s")
        @pytest.mark.graph_budget(dtype="bfloat16")
        def test_bf16(net): ...

        @pytest.mark.latency_max("1s")
        def test_fp32(net): ...
        """
    )
    run = pytester.runpytest("-p", "no:cacheprovider", "--graph-budget")
    run.assert_outcomes(passed=2)
    notes = [line for line in run.outlines if "has no bfloat16 peak" in line]
    assert notes == [
        "notice: net@bfloat16: hardware calib has no bfloat16 peak: latency and bottleneck are "
        "judged on its float32 peak (give it bfloat16 in peak_tflops)"
    ]


def test_a_latency_priced_on_calibrated_kernels_of_its_dtype_is_not_called_peak_bound(pytester):
    """With ``[kernels_bfloat16]`` (a calibration's own rates) the latency does not rest on
    the missing bfloat16 peak; a bottleneck limit still does, and says so."""
    rates = "{flops_per_s = 5e10, bytes_per_s = 1e10, overhead_s = 1e-6}"
    (pytester.path / "pyproject.toml").write_text(
        "[tool.graph_budget]\nhardware = 'calib'\n\n"
        "[tool.graph_budget.hardware_profiles.calib]\n"
        "peak_tflops = {float32 = 0.16}\nbandwidth_gbs = 12\n"
        f"kernels_bfloat16 = {{matmul = {rates}}}\n"
    )
    pytester.makepyfile(
        """
        import pytest, torch
        from pytest_graphbudget import ModelCase

        @pytest.fixture
        def net():
            return ModelCase(torch.nn.Linear(2, 2), (torch.randn(1, 2),), name="net")

        @pytest.mark.latency_max("1s")
        @pytest.mark.graph_budget(dtype="bfloat16")
        def test_latency(net): ...

        @pytest.mark.bottleneck(memory_bound_max="100%")
        @pytest.mark.graph_budget(dtype="bfloat16")
        def test_bottleneck(net): ...
        """
    )
    run = pytester.runpytest("-p", "no:cacheprovider", "--graph-budget")
    run.assert_outcomes(passed=2)
    notes = [line for line in run.outlines if "has no bfloat16 peak" in line]
    assert notes == [
        "notice: test_bottleneck::net@bfloat16: hardware calib has no bfloat16 peak: bottleneck "
        "is judged on its float32 peak, latency on its calibrated bfloat16 kernels (give it "
        "bfloat16 in peak_tflops)"
    ]


@pytest.mark.parametrize("peak", ["", ", bfloat16 = 0.3"], ids=["no-peak", "with-peak"])
def test_a_calibration_without_kernels_of_the_dtype_says_its_latency_uses_float32s(pytester, peak):
    """User trial: a calibration of float32 kernels alone, used in bfloat16, was said to judge
    the latency on its float32 peak, and a bfloat16 peak silenced that while the latency
    still came from the float32 kernel rates."""
    rates = "{flops_per_s = 5e10, bytes_per_s = 1e10, overhead_s = 1e-6}"
    (pytester.path / "pyproject.toml").write_text(
        "[tool.graph_budget]\nhardware = 'calib'\n\n"
        "[tool.graph_budget.hardware_profiles.calib]\n"
        f"peak_tflops = {{float32 = 0.16{peak}}}\nbandwidth_gbs = 12\n"
        f"kernels = {{matmul = {rates}}}\n"
    )
    pytester.makepyfile(
        """
        import pytest, torch
        from pytest_graphbudget import ModelCase

        @pytest.fixture
        def net():
            return ModelCase(torch.nn.Linear(2, 2), (torch.randn(1, 2),), name="net")

        @pytest.mark.latency_max("1s")
        @pytest.mark.graph_budget(dtype="bfloat16")
        def test_latency(net): ...
        """
    )
    run = pytester.runpytest("-p", "no:cacheprovider", "--graph-budget")
    run.assert_outcomes(passed=1)
    notes = [line for line in run.outlines if line.startswith("notice: net@bfloat16")]
    assert notes == [
        "notice: net@bfloat16: hardware calib has no kernels_bfloat16 table: latency is priced "
        "with its float32 kernel rates (calibrate in bfloat16, or give that table)"
    ]


def test_html_summary_of_a_training_step_splits_its_phases(adam_step):
    """The HTML page of a ``--mode train --html`` profile said "train" and nothing of where
    the step's FLOPs go; the optimizer's state (184 B by hand, as above) is shown too."""
    import re

    from pytest_graphbudget.reports.html import profile_page

    text = profile_page(adam_step)
    facts = dict(re.findall(r"<tr><th>([^<]+)</th><td>([^<]*)</td></tr>", text))
    assert (
        facts["FLOPs by phase"].startswith("forward ") and "optimizer " in facts["FLOPs by phase"]
    )
    assert facts["optimizer state"] == "184B"


def test_batch_or_seq_len_beside_an_input_shape_that_disagrees_is_an_error_row(
    tmp_path, monkeypatch, capsys
):
    """``input_shape = [1, 3, 64, 64]`` with ``batch = [1, 2, 4]`` profiled 1x3x64x64 at every
    point and passed all three at the batch-1 figure; ``seq_len = [32, 64]`` beside a text
    shape of ``[1, 16]`` reported every point at 16 tokens. Only the point that agrees runs."""
    code, out = _check(
        tmp_path,
        monkeypatch,
        capsys,
        '[models.r]\nmodel = "resnet18"\ninput_shape = [1, 3, 64, 64]\nbatch = [1, 2, 4]\n'
        'flops_max = "400M"\n\n'
        '[models.t]\nmodel = "bert-base-uncased"\nmeta = true\ninput_shape = [1, 16]\n'
        'seq_len = [32, 64]\nflops_max = "400G"\n',
    )
    assert code == 1
    assert "5 models: 4 could not be checked, 1 within budget" in out
    ok = [line.split() for line in out.splitlines() if line.startswith("r[batch=1] ")]
    assert ok and ok[0][-1] == "ok"
    for batch in (2, 4):
        assert (
            f"error: r[batch={batch}]: batch {batch} disagrees with input_shape 1,3,64,64, whose "
            f"first dimension is the batch: give one or the other (input_shape "
            f"{batch},3,64,64 alone, or batch without input_shape)"
        ) in out
    for seq in (32, 64):
        assert (
            f"error: t[seq_len={seq}]: seq_len {seq} disagrees with input_shape 1,16, which is "
            f"(batch, seq_len)"
        ) in out


def test_meta_that_is_not_true_or_false_is_an_error_row(tmp_path, monkeypatch, capsys):
    """``meta = "false"`` built on the meta device; ``meta = 0`` left it to the zoo."""
    code, out = _check(
        tmp_path,
        monkeypatch,
        capsys,
        '[models.s]\nmodel = "resnet18"\nmeta = "false"\nflops_max = "10G"\n\n'
        '[models.z]\nmodel = "resnet18"\nmeta = 0\nflops_max = "10G"\n',
    )
    assert code == 1
    assert "2 models could not be checked" in out
    assert (
        "error: s: meta must be true or false (or left out: the zoo decides by size), got 'false'"
    ) in out
    assert (
        "error: z: meta must be true or false (or left out: the zoo decides by size), got 0" in out
    )


def test_cli_and_python_refuse_a_batch_that_input_shape_contradicts(capsys):
    """``--batch 4 --input-shape 1,3,64,64`` profiled 1x3x64x64 without a word."""
    from pytest_graphbudget import profile_model
    from pytest_graphbudget.errors import GraphBudgetError

    assert cli.main(["profile", "resnet18", "--batch", "4", "--input-shape", "1,3,64,64"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert line == (
        "graph-budget: error: batch 4 disagrees with input_shape 1,3,64,64, whose first "
        "dimension is the batch: give one or the other (input_shape 4,3,64,64 alone, or batch "
        "without input_shape)"
    )
    with pytest.raises(GraphBudgetError, match="batch 4 disagrees with input_shape 1,3,64,64"):
        profile_model("resnet18", batch=4, input_shape=(1, 3, 64, 64))
    with pytest.raises(GraphBudgetError, match="meta must be true or false"):
        profile_model("yolov8n", meta="false")
    agreed = profile_model("resnet18", batch=2, input_shape=(2, 3, 64, 64))
    assert [list(i.shape) for i in agreed.inputs] == [[2, 3, 64, 64]]
