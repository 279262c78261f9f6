"""The tables the listing verbs print (cli/text.py's print_table)."""

from __future__ import annotations

import pytest

from jupyter_sandbox.cli.text import print_table


def test_a_table_pads_each_column_as_its_spec_says(capsys: pytest.CaptureFixture[str]) -> None:
    columns = [("ID", "4"), ("BYTES", ">6"), ("NOTE", "")]
    print_table(columns, iter([("a", 12, "first"), ("bcdef", "?", "")]))
    assert capsys.readouterr().out == ("ID     BYTES  NOTE\na         12  first\nbcdef       ?  \n")


def test_a_row_of_another_width_than_the_titles_is_refused() -> None:
    with pytest.raises(ValueError, match=r"shorter|longer"):
        print_table([("ID", "4"), ("NOTE", "")], [("a",)])
