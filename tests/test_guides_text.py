"""What the guides say matches what the tool does (issue 47): the audit guide lists audit.csv's
columns as the file has them, and no guide points a user's data at this project's own
checkout (`../shared/data`)."""

from __future__ import annotations

import re

from bias_discovery.auditing.records import CSV_COLUMNS

from helpers import REPO


def test_the_audit_guide_lists_exactly_audit_csvs_columns() -> None:
    text = " ".join((REPO / "docs/guides/audit.md").read_text(encoding="utf-8").split())
    line = re.search(r"`audit\.csv`: long format, .*? with the columns (.*?);", text)
    assert line is not None, "the audit guide no longer says audit.csv's columns"
    listed = re.findall(r"`(\w+)`", line.group(1))
    assert tuple(listed) == CSV_COLUMNS


def test_no_guide_reads_a_users_data_from_the_projects_own_shared_folder() -> None:
    guides = sorted((REPO / "docs/guides").glob("*.md"))
    assert guides
    offenders = [g.name for g in guides if "../shared/data" in g.read_text(encoding="utf-8")]
    assert not offenders, offenders
