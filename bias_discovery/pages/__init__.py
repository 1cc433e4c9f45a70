"""The kit every HTML page of ours is drawn with (the run report, an audit's page, the bias
matrix's page): one Jinja2 environment (autoescaped, strict about undefined names, with the
number filters of `bias_discovery.formatting` printing the page's en dash for a missing value)
and the shared stylesheet ``page.css``, which each template includes. Jinja2 loads on first use.
"""

from __future__ import annotations

from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from ..formatting import ci_pp, count, excluded_above, excluded_clause, p_value, percent, plural, pp

__all__ = ["MISSING", "page_environment", "page_template"]

MISSING = "–"
"""What a page prints for a missing value."""


@lru_cache(maxsize=1)
def page_environment() -> Any:  # a jinja2 Environment (jinja2 is imported on first use)
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    # The loader serves the templates' shared stylesheet (`{% include "page.css" %}`): our own
    # file, included as template source; model text still only ever arrives as values.
    env = Environment(
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        loader=FileSystemLoader(Path(__file__).parent),
    )
    env.filters.update(
        pct=partial(percent, missing=MISSING),
        pp=partial(pp, missing=MISSING),
        pval=partial(p_value, missing=MISSING),
        thousands=partial(count, missing=MISSING),
        plural=partial(plural, missing=MISSING),
        excluded=partial(excluded_above, missing=MISSING),
    )
    env.globals.update(ci=ci_pp, excluded_clause=partial(excluded_clause, missing=MISSING))
    return env


def page_template(path: Path) -> Any:
    """The page template in the file `path` (a jinja2 Template of `page_environment`)."""
    return page_environment().from_string(path.read_text(encoding="utf-8"))
