"""The Batch tab's results table without a browser: one line per row, the clicked row found by its cells, the tint."""

from __future__ import annotations

from webui.batch.run.results import ResultRow
from webui.ui.batch_views import RESULT_COLUMNS, clicked_row, result_table, row_key


def _row(index: int, setting: str, output: str = "Paris") -> ResultRow:
    return ResultRow(index, str(index + 1), f"Prompt {index + 1}", setting, {}, 0, 7, output, "length", 5, 2)


ROWS = [_row(0, "a"), _row(1, "a", "two\nlines"), _row(0, "b"), _row(1, "b")]


def test_a_clicked_row_is_found_by_its_cells_whatever_the_sort_or_filter():
    table = result_table(ROWS, "b")  # filtered: the run's 3rd and 4th rows
    assert list(table["#"]) == [3, 4] and list(table.columns) == RESULT_COLUMNS
    shown = list(table.iloc[1])  # the row a browser sends, however it sorted the table
    assert clicked_row(ROWS, shown) == (4, ROWS[3])
    assert clicked_row(ROWS[1:], shown) == (3, ROWS[3])  # rows moved since the table was drawn: found by its cells
    assert clicked_row(ROWS[:3], shown) is None and clicked_row(ROWS, []) is None
    assert result_table(ROWS)["output"][1] == "two lines"  # one line per table row


def test_the_selected_row_is_tinted_by_its_key_not_its_place():
    styled = result_table(ROWS, "b", selected=row_key(ROWS[3]))
    styles = styled._compute().ctx  # (row, column) -> css of each tinted cell
    assert {r for r, _ in styles} == {1}
    assert result_table(ROWS, "Prompt 1", selected=row_key(ROWS[3])).equals(result_table(ROWS, "Prompt 1"))
