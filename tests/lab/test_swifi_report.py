# SPDX-License-Identifier: GPL-2.0
"""The campaign's bookkeeping without a VM: the report's counts and headline,
its plot, the commits it records, and --resume's reading of a results file (a
line a killed run cut short, trials the lab failed run again, --rerun)."""
import json

import pytest

from lab.errors import LabError
from lab.swifi.campaign import RESULTS, Settings, done_trials, drop_cut_line, trial_plan
from lab.swifi.report import load, markdown_report, summarize, text_report, write_plot


def trial(name: str, kernel: str, under: str) -> dict:
    t, seed = name.rsplit("-", 1)
    return {"trial": name, "type": t, "seed": int(seed),
            "fault": {"description": f"{name} site"},
            "kernel": {"outcome": kernel}, "understudy": {"outcome": under, "recoveries": []}}


def write(tmp_path, trials, tail: str = "") -> None:
    (tmp_path / RESULTS).write_text("".join(json.dumps(t) + "\n" for t in trials) + tail)


def test_the_headline_counts_only_in_kernel_crashes_and_hangs(tmp_path):
    write(tmp_path, [
        trial("hang-0", "guest hang", "recovered transparently"),
        trial("hang-1", "guest crash", "recovered, app-visible error"),
        trial("null-0", "guest crash", "no effect"),
        trial("nop-0", "no effect", "no effect"),
        trial("nop-1", "driver failure", "not recovered"),
        trial("text-0", "guest crash", "not injected"),    # never in the headline
    ])
    s = summarize(load(tmp_path))
    assert s["trials"] == 6
    assert s["kernel_crash_or_hang"] == 3 and s["understudy_unaffected_of_those"] == 2
    assert s["survival_pct"] == pytest.approx(66.7)
    assert s["kernel"]["rows"]["hang"]["guest hang"] == 1 and s["kernel"]["total"]["guest crash"] == 3
    assert s["understudy"]["rows"]["nop"]["not recovered"] == 1
    assert "not injected" in s["understudy"]["columns"]
    assert [m["trial"] for m in s["not_survived"]] == ["hang-1"]
    assert "understudy survived with the application unaffected in 2 (66.7%)" in text_report(s)
    assert "| **total** |" in markdown_report(s)
    write_plot(s, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_skips_finished_trials_and_cuts_off_a_cut_line(tmp_path):
    write(tmp_path, [trial("hang-0", "guest hang", "no effect")], tail='{"trial": "nop-0", "ty')
    assert done_trials(tmp_path / RESULTS) == {"hang-0"}
    assert len(load(tmp_path)["trials"]) == 1
    drop_cut_line(tmp_path / RESULTS)
    assert (tmp_path / RESULTS).read_text().endswith('"no effect", "recoveries": []}}\n')
    assert done_trials(tmp_path / RESULTS) == {"hang-0"}
    plan = trial_plan(Settings(types=["hang", "nop"], trials_per_type=2))
    assert plan == [("hang", 0), ("nop", 0), ("hang", 1), ("nop", 1)]


def test_resume_runs_again_a_trial_the_lab_failed_and_the_report_keeps_its_last_record(tmp_path):
    write(tmp_path, [trial("hang-0", "lab error", "no effect"),
                     trial("nop-0", "no effect", "no effect"),
                     trial("hang-0", "guest hang", "recovered transparently")])
    assert done_trials(tmp_path / RESULTS) == {"hang-0", "nop-0"}
    write(tmp_path, [trial("hang-0", "guest hang", "lab error")])
    assert done_trials(tmp_path / RESULTS) == set()
    write(tmp_path, [trial("hang-0", "lab error", "no effect"),
                     trial("nop-0", "no effect", "no effect"),
                     trial("hang-0", "guest hang", "recovered transparently")])
    s = summarize(load(tmp_path))
    assert s["trials"] == 2 and s["kernel_crash_or_hang"] == 1 and s["survival_pct"] == 100
    assert "lab error" not in s["kernel"]["columns"]
    assert s["lab_errors_rerun"] == 1 and "1 trial(s) the lab failed were run again" in text_report(s)


def test_rerun_runs_chosen_or_severe_trials_again_and_the_report_says_so(tmp_path):
    write(tmp_path, [trial("hang-0", "guest hang", "not recovered"),
                     trial("null-0", "guest crash", "recovered transparently"),
                     trial("nop-0", "no effect", "no effect")])
    path = tmp_path / RESULTS
    assert done_trials(path, ["nop-0"]) == {"hang-0", "null-0"}
    assert done_trials(path, ["severe"]) == {"nop-0"}
    with pytest.raises(LabError, match="no trial loop-7"):
        done_trials(path, ["loop-7"])
    with open(path, "a") as f:    # what the rerun appended
        f.write(json.dumps(trial("hang-0", "guest hang", "recovered transparently")) + "\n")
    s = summarize(load(tmp_path))
    assert s["survival_pct"] == 100 and s["lab_errors_rerun"] == 0 and s["chosen_rerun"] == 1
    assert "1 finished trial(s) were run again with --rerun" in text_report(s)


def test_a_results_file_with_a_bad_line_before_its_end_is_refused(tmp_path):
    write(tmp_path, [trial("hang-0", "guest hang", "no effect")], tail='not json\n{"trial": "nop-0"}\n')
    with pytest.raises(LabError, match="trials.jsonl:2 is not a trial record"):
        done_trials(tmp_path / RESULTS)


def test_the_report_says_which_commit_ran_which_trials(tmp_path):
    a, b = "a" * 40, "b" * 40 + "+dirty"
    write(tmp_path, [{**trial("hang-0", "guest hang", "no effect"), "commit": a},
                     {**trial("hang-1", "guest hang", "no effect"), "commit": b},
                     {**trial("nop-0", "no effect", "no effect"), "commit": b}])
    s = summarize(load(tmp_path))
    assert s["commits"] == {a: 1, b: 2}
    assert f"run at {a[:12]} (1 trial), {b[:12]} (2 trials)" in text_report(s)


def test_a_directory_without_results_is_refused(tmp_path):
    with pytest.raises(LabError, match="no trials.jsonl"):
        load(tmp_path)
