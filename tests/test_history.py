import dataclasses
import gzip
import math

import pandas as pd

import pytest

from pbx.curves import read_curves
from pbx.errors import UsageError
from pbx.history import BASE_COLUMNS, History, HistoryLog, Row, read_csv, skipped
from pbx.standings import best_rows, member_row
from pbx.space import Categorical, Continuous, Integer, Space

SPACE = Space({"h0": Continuous(0.0, 1.0), "lr": Continuous(0.0, 1.0), "aug": Categorical(("crop", "flip"))})


def _row(member: int, round_: int, score: float, h: float) -> Row:
    return Row(member=member, round=round_, steps=4 * (round_ + 1), wall_s=0.1 * round_, score=score,
               test_score=math.nan, parent=member, explored=False, config={"h0": h, "lr": 1 / 3, "aug": "crop"})


def test_append_writes_whole_rounds_that_read_back_bit_for_bit(tmp_path) -> None:
    path = tmp_path / "history.csv"
    log = HistoryLog(path, SPACE, 2)
    log.append([_row(0, 0, 0.1 + 0.2, 0.7), _row(1, 0, -1e-300, 0.123456789012345678)])
    log.append([_row(0, 1, math.nan, 0.7), _row(1, 1, 2.5, 0.2)])
    frame = pd.read_csv(path)
    assert list(frame.columns) == BASE_COLUMNS + ["h0", "lr", "aug"]
    reopened = HistoryLog(path, SPACE, 2).history
    assert reopened.frame["score"].iloc[0] == 0.1 + 0.2  # exact, not approximately
    assert reopened.frame["lr"].iloc[0] == 1 / 3
    assert math.isnan(reopened.frame["score"].iloc[2])
    pd.testing.assert_frame_equal(reopened.frame, log.history.frame)
    assert reopened.last_round == 1
    assert list(reopened.latest()["member"]) == [0, 1]


def test_a_torn_last_round_is_dropped_on_reopen(tmp_path) -> None:
    path = tmp_path / "history.csv"
    log = HistoryLog(path, SPACE, 2)
    log.append([_row(0, 0, 1.0, 0.5), _row(1, 0, 2.0, 0.5)])
    with open(path, "a") as f:  # a kill while round 1 was being written
        f.write("0,1,8,0.1,1.5,nan,nan,nan,0,False,pop1,False,False,0.5,0.33,crop\n1,1,8,0.")
    reopened = HistoryLog(path, SPACE, 2)
    assert reopened.history.last_round == 0
    reopened.append([_row(0, 1, 3.0, 0.5), _row(1, 1, 4.0, 0.5)])
    assert HistoryLog(path, SPACE, 2).history.frame["score"].tolist() == [1.0, 2.0, 3.0, 4.0]


def test_curves_keep_to_the_rounds_of_the_history(tmp_path) -> None:
    """A round's points reach curves.csv before its rows reach history.csv: points of a round the history does not
    hold (a kill between the two writes, or inside the first) are dropped on reopen, and the round rerun writes
    them once."""
    path = tmp_path / "history.csv"
    log = HistoryLog(path, SPACE, 2)
    curve = ((1, 0.1 + 0.2), (3, -1e-300))
    rows = [dataclasses.replace(_row(m, 0, 1.0, 0.5), curve=curve) for m in (0, 1)]
    log.append(rows)
    with open(tmp_path / "curves.csv", "a") as f:  # round 1's points written, then a kill inside a line
        f.write("0,1,5,0.5\n1,1,7,0.")
    reopened = HistoryLog(path, SPACE, 2).history
    assert reopened.curves.values.tolist() == [[0, 0, 1, 0.1 + 0.2], [0, 0, 3, -1e-300],
                                               [1, 0, 1, 0.1 + 0.2], [1, 0, 3, -1e-300]]  # exact
    pd.testing.assert_frame_equal(reopened.curves, log.history.curves)
    again = HistoryLog(path, SPACE, 2)
    again.append([dataclasses.replace(_row(m, 1, 2.0, 0.5), curve=((5, 0.5),)) for m in (0, 1)])
    assert read_curves(tmp_path / "curves.csv")["round"].tolist() == [0, 0, 0, 0, 1, 1]
    (tmp_path / "curves.csv").write_text("member,round,steps,score\n0,0,1,x\n")
    with pytest.raises(UsageError, match="curves.csv: a row does not parse"):
        HistoryLog(path, SPACE, 2)


def test_with_rows_leaves_the_original_unchanged() -> None:
    empty = History(["h0", "lr", "aug"])
    one = empty.with_rows([_row(0, 0, 1.0, 0.5)])
    assert len(empty) == 0 and len(one) == 1 and empty.last_round == -1
    assert one.config_of(one.frame.iloc[0]) == {"h0": 0.5, "lr": 1 / 3, "aug": "crop"}


@pytest.mark.parametrize("later", [{"n": 3, "aug": None}, {"n": 3.5, "aug": "flip"}, {"n": 4, "aug": "flip"}])
def test_a_history_grown_round_by_round_is_typed_as_the_whole(later: dict[str, object]) -> None:
    """Each round's rows are typed alone when their columns' types are the history's, and the whole is retyped
    when a round changes one (an integer column meeting a float, a choice meeting None): either way the frame
    is the one that typing all rows at once gives."""
    def row(r: int, config: dict[str, object]) -> Row:
        return dataclasses.replace(_row(0, r, float(r), 0.5), config={"h0": 0.5, "lr": 0.1, **config})

    rows = [row(0, {"n": 2, "aug": "crop"}), row(1, {"n": 5, "aug": "crop"}), row(2, later)]
    grown = History(["h0", "lr", "n", "aug"])
    for one in rows:
        grown = grown.with_rows([one])
    pd.testing.assert_frame_equal(grown.frame, History(["h0", "lr", "n", "aug"]).with_rows(rows).frame)


def test_a_round_without_every_member_of_the_population_is_dropped(tmp_path) -> None:
    path = tmp_path / "history.csv"
    log = HistoryLog(path, SPACE, 4)
    log.append([_row(m, 0, 1.0, 0.5) for m in range(4)])
    log.append([_row(m, 1, 2.0, 0.5) for m in range(2)])  # a kill after 2 of 4 rows reached the disk
    assert HistoryLog(path, SPACE, 4).history.last_round == 0
    fresh = tmp_path / "fresh.csv"
    HistoryLog(fresh, SPACE, 4).append([_row(m, 0, 1.0, 0.5) for m in range(2)])
    assert HistoryLog(fresh, SPACE, 4).history.last_round == -1  # round 0 had 2 of 4 members: not finished


def test_a_tear_inside_the_last_field_drops_the_line(tmp_path) -> None:
    path = tmp_path / "history.csv"
    log = HistoryLog(path, SPACE, 2)
    log.append([_row(0, 0, 1.0, 0.5), _row(1, 0, 2.0, 0.5)])
    with open(path, "a") as f:  # round 1 cut inside the last field: "crop" -> "cro" and no newline
        f.write("0,1,8,0.1,1.5,nan,nan,nan,0,False,pop1,False,False,0.5,0.3333333333333333,crop\n1,1,8,0.1,1.5,nan,nan,nan,1,False,pop1,False,False,0.5,0.123456,cro")
    assert HistoryLog(path, SPACE, 2).history.last_round == 0


def test_a_hole_in_an_earlier_round_is_a_damaged_file(tmp_path) -> None:
    path = tmp_path / "history.csv"
    log = HistoryLog(path, SPACE, 2)
    for r in range(3):
        log.append([_row(0, r, 1.0, 0.5), _row(1, r, 2.0, 0.5)])
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2] + lines[3:]))  # member 1's row of round 0 is gone
    with pytest.raises(UsageError, match="history.csv: rounds \\[0\\]"):
        HistoryLog(path, SPACE, 2)


@pytest.mark.parametrize("choices", [(None, "crop"), ("NA", "null", "nan", "None"), ("", " ", "N/A"), (1, "crop"),
                                     (0.5, 2, True)])
def test_categorical_choices_round_trip_with_their_types(tmp_path, choices) -> None:
    space = Space({"h0": Continuous(0.0, 1.0), "aug": Categorical(choices)})
    path = tmp_path / "history.csv"
    log = HistoryLog(path, space, len(choices))
    log.append([Row(member=m, round=0, steps=4, wall_s=0.0, score=1.0, test_score=math.nan, parent=m,
                    explored=False, config={"h0": 0.1 + 0.2, "aug": c}) for m, c in enumerate(choices)])
    back = HistoryLog(path, space, len(choices)).history
    values = [back.config_of(row)["aug"] for _, row in back.latest().iterrows()]
    assert values == list(choices) and [type(v) for v in values] == [type(c) for c in choices]
    assert back.frame["h0"].iloc[0] == 0.1 + 0.2


def test_read_csv_with_the_space_gives_back_the_choices_the_run_logged(tmp_path) -> None:
    space = Space({"h0": Continuous(0.0, 1.0), "aug": Categorical((None, "NA", 1))})
    path = tmp_path / "history.csv"
    HistoryLog(path, space, 3).append([Row(member=m, round=0, steps=4, wall_s=0.0, score=1.0, test_score=math.nan,
                                           parent=m, explored=False, config={"h0": 1 / 3, "aug": c})
                                       for m, c in enumerate(space.params["aug"].choices)])
    frame = read_csv(path, space)  # what a report reads
    assert list(frame["aug"]) == [None, "NA", 1] and type(frame["aug"].iloc[2]) is int
    assert frame["h0"].iloc[0] == 1 / 3


def test_read_csv_of_a_live_run_leaves_out_the_line_being_written(tmp_path) -> None:
    path = tmp_path / "history.csv"
    HistoryLog(path, SPACE, 2).append([_row(0, 0, 1.0, 0.5), _row(1, 0, 2.0, 0.5)])
    with open(path, "a") as f:
        f.write("0,1,8,0.")
    assert read_csv(path, SPACE)["round"].tolist() == [0, 0]


def test_read_csv_of_a_gzipped_history_reads_as_the_plain_file(tmp_path) -> None:
    """docs/results/ keeps some runs' histories compressed (``history.csv.gz``): they read back bit for bit."""
    path = tmp_path / "history.csv"
    HistoryLog(path, SPACE, 2).append([_row(0, 0, 1.0, 0.5), _row(1, 0, 2.0, 0.5)])
    packed = tmp_path / "history.csv.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    pd.testing.assert_frame_equal(read_csv(packed, SPACE), read_csv(path, SPACE))
    packed.write_bytes(path.read_bytes())  # not gzip: refused as unreadable, not parsed
    with pytest.raises(UsageError, match="history.csv.gz: not a readable pbx history file"):
        read_csv(packed, SPACE)


@pytest.mark.parametrize("damage, message", [
    (lambda line: line.rsplit(",", 1)[0], "row 1 has 15 fields, not 16"),
    (lambda line: line + ",extra", "row 1 has 17 fields, not 16"),
    (lambda line: line.replace(",False,", ",Fals,", 1), "explored, carried and restart take True or False, not 'Fals'"),
    (lambda line: line.replace(",crop", ",cro"), "aug takes ['cro'], not among its choices"),
])
def test_a_damaged_row_before_the_last_is_an_error_not_skipped(tmp_path, damage, message) -> None:
    path = tmp_path / "history.csv"
    HistoryLog(path, SPACE, 2).append([_row(0, 0, 1.0, 0.5), _row(1, 0, 2.0, 0.5)])
    header, first, second = path.read_text().splitlines()
    path.write_text(f"{header}\n{damage(first)}\n{second}\n")
    with pytest.raises(UsageError, match="history.csv: .*" + message.replace("[", "\\[").replace("]", "\\]")):
        HistoryLog(path, SPACE, 2)


def test_an_integer_parameter_reads_back_as_ints_and_stays_int_after_a_resume(tmp_path) -> None:
    space = Space({"h0": Continuous(0.0, 1.0), "n_steps": Integer(250, 15_000)})
    path = tmp_path / "history.csv"

    def rows(round_: int) -> list[Row]:
        return [Row(member=m, round=round_, steps=4, wall_s=0.0, score=1.0, test_score=math.nan, parent=m,
                    explored=False, config={"h0": 1.0, "n_steps": 512 + m}) for m in range(2)]

    HistoryLog(path, space, 2).append(rows(0))
    assert "pop1,False,False,1.0,512\n" in path.read_text()
    resumed = HistoryLog(path, space, 2)
    config = resumed.history.config_of(resumed.history.latest().iloc[1])
    assert config == {"h0": 1.0, "n_steps": 513} and type(config["n_steps"]) is int
    after = resumed.append(rows(1))  # rows read back meet rows appended in memory
    assert after.frame["n_steps"].dtype == "int64" and after.frame["h0"].dtype == "float64"
    assert read_csv(path, space)["n_steps"].tolist() == [512, 513, 512, 513]


def test_a_fractional_value_of_an_integer_parameter_is_a_damaged_file(tmp_path) -> None:
    space = Space({"n_steps": Integer(250, 15_000)})
    path = tmp_path / "history.csv"
    path.write_text(",".join(BASE_COLUMNS + ["n_steps"]) + "\n0,0,4,0.0,1.0,nan,nan,nan,0,False,pop1,False,False,512.5\n")
    with pytest.raises(UsageError, match="n_steps is an integer parameter, but takes 512.5"):
        read_csv(path, space)


def test_a_history_written_before_a_column_was_added_reads_with_its_value_then(tmp_path) -> None:
    """Files from before the role, carried, score100 and start_score columns read as those runs were: every
    member a result, no score carried, no running mean kept, no state scored before its round."""
    path = tmp_path / "history.csv"
    old = ["member", "round", "steps", "wall_s", "score", "test_score", "parent", "explored"]
    path.write_text(",".join(old + SPACE.names) + "\n0,0,8,0.1,1.5,2.5,0,False,0.5,0.25,crop\n")
    frame = read_csv(path, SPACE)
    assert list(frame.columns) == BASE_COLUMNS + SPACE.names
    row = frame.iloc[0]
    assert (row["role"], row["carried"], row["test_score"]) == ("pop1", False, 2.5) and math.isnan(row["score100"])
    assert math.isnan(row["start_score"])


def test_a_skipped_member_that_ties_its_donor_is_not_named_best() -> None:
    """Member 0 copied member 3 after round 0 and was explored to lr 0.003, then skipped round 1 (its rollout
    outlasts t_ready): its row carries member 3's score with a config that never earned it. The best member is
    the one whose own round earned the score; the skipped row stays a donor's equal for selection."""
    rows = [Row(m, 0, 512, 0.0, s, math.nan, m, False, {"lr": 0.002}) for m, s in enumerate([1.0, 2.0, 3.0, 5.0])]
    rows += [Row(0, 1, 512, 1.0, 5.0, math.nan, 3, True, {"lr": 0.003}, carried=True),
             *(Row(m, 1, 1024, 1.0, s, math.nan, m, False, {"lr": 0.002}) for m, s in [(1, 2.5), (2, 3.5), (3, 5.0)])]
    frame = History(["lr"]).with_rows(rows).frame
    assert skipped(frame).tolist() == [False] * 4 + [True, False, False, False]
    assert best_rows(frame)["member"].tolist() == [3, 3]
    assert member_row(frame, "best")["member"] == 3


@pytest.mark.parametrize("member", ["²", "٣", "+1", " 1"])
def test_a_member_that_is_not_ascii_digits_is_refused(member: str) -> None:
    """``int()`` takes ``٣`` as 3 and fails on ``²``, which ``str.isdigit`` both passes: neither is a member id."""
    rows = [Row(m, 0, 10, 0.0, float(m), math.nan, m, False, {"lr": 0.002}) for m in range(4)]
    with pytest.raises(UsageError, match="--member must be best, kept or a member of the run"):
        member_row(History(["lr"]).with_rows(rows).frame, member)
