import math

import pandas as pd

from pbx.history import BASE_COLUMNS, History, HistoryLog, Row


def _row(member: int, round_: int, score: float, h: float) -> Row:
    return Row(member=member, round=round_, steps=4 * (round_ + 1), wall_s=0.1 * round_, score=score,
               test_score=math.nan, parent=member, explored=False, config={"h0": h, "lr": 1 / 3, "aug": "crop"})


def test_append_writes_whole_rounds_that_read_back_bit_for_bit(tmp_path) -> None:
    path = tmp_path / "history.csv"
    log = HistoryLog(path, ["h0", "lr", "aug"])
    log.append([_row(0, 0, 0.1 + 0.2, 0.7), _row(1, 0, -1e-300, 0.123456789012345678)])
    log.append([_row(0, 1, math.nan, 0.7), _row(1, 1, 2.5, 0.2)])
    frame = pd.read_csv(path)
    assert list(frame.columns) == BASE_COLUMNS + ["h0", "lr", "aug"]
    reopened = HistoryLog(path, ["h0", "lr", "aug"]).history
    assert reopened.frame["score"].iloc[0] == 0.1 + 0.2  # exact, not approximately
    assert reopened.frame["lr"].iloc[0] == 1 / 3
    assert math.isnan(reopened.frame["score"].iloc[2])
    pd.testing.assert_frame_equal(reopened.frame, log.history.frame)
    assert reopened.last_round == 1
    assert list(reopened.latest()["member"]) == [0, 1]


def test_a_torn_last_round_is_dropped_on_reopen(tmp_path) -> None:
    path = tmp_path / "history.csv"
    log = HistoryLog(path, ["h0", "lr", "aug"])
    log.append([_row(0, 0, 1.0, 0.5), _row(1, 0, 2.0, 0.5)])
    with open(path, "a") as f:  # a kill while round 1 was being written
        f.write("0,1,8,0.1,1.5,nan,0,False,0.5,0.33,crop\n1,1,8,0.")
    reopened = HistoryLog(path, ["h0", "lr", "aug"])
    assert reopened.history.last_round == 0
    reopened.append([_row(0, 1, 3.0, 0.5), _row(1, 1, 4.0, 0.5)])
    assert HistoryLog(path, ["h0", "lr", "aug"]).history.frame["score"].tolist() == [1.0, 2.0, 3.0, 4.0]


def test_with_rows_leaves_the_original_unchanged() -> None:
    empty = History(["h0", "lr", "aug"])
    one = empty.with_rows([_row(0, 0, 1.0, 0.5)])
    assert len(empty) == 0 and len(one) == 1 and empty.last_round == -1
    assert one.config_of(one.frame.iloc[0]) == {"h0": 0.5, "lr": 1 / 3, "aug": "crop"}
