"""Results as tables: a pandas DataFrame or a `datasets.Dataset` with stable columns.

A result that reads as a table (`Tabular`) names a pydantic *row model*: the columns are that
model's fields, in order, and each column's type comes from the field's annotation. So the
columns do not depend on the data: an empty result has them all, and a column that is None
on every row (no placebo in this run, say) keeps its type, so tables of two runs concatenate.
pyarrow, pandas and datasets are imported only when a conversion is asked for.
"""

from __future__ import annotations

import types
import typing
from collections import abc
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Union

from pydantic import BaseModel

if TYPE_CHECKING:  # imported when a table is built: importing the package stays light
    import datasets
    import pandas
    import pyarrow

__all__ = ["Tabular", "arrow_schema", "columns_of", "rows_to_arrow"]


def _arrow_type(annotation: Any, where: str) -> pyarrow.DataType:
    """The Arrow type of a field annotation: optional types are nullable columns of their type."""
    import pyarrow as pa

    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _arrow_type(typing.get_args(annotation)[0], where)
    if origin in (Union, types.UnionType):
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        found = {str(_arrow_type(a, where)): _arrow_type(a, where) for a in kinds}
        if len(found) != 1:
            raise TypeError(f"{where}: a column needs one type, not {annotation}")
        return next(iter(found.values()))
    if origin is Literal:
        values = {type(v) for v in typing.get_args(annotation)}
        if len(values) != 1:
            raise TypeError(f"{where}: a Literal column needs values of one type, not {annotation}")
        return _arrow_type(values.pop(), where)
    if origin in (list, tuple, abc.Sequence) and typing.get_args(annotation):
        return pa.list_(_arrow_type(typing.get_args(annotation)[0], where))
    simple = {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}
    if annotation in simple:
        return simple[annotation]
    raise TypeError(f"{where}: no table column type for {annotation!r}")


def columns_of(row_model: type[BaseModel], exclude: Sequence[str] = ()) -> tuple[str, ...]:
    """The column names of a table of `row_model` rows, in field order."""
    return tuple(name for name in row_model.model_fields if name not in exclude)


def arrow_schema(row_model: type[BaseModel], exclude: Sequence[str] = ()) -> pyarrow.Schema:
    """The Arrow schema of a table of `row_model` rows (`exclude`: fields that are not columns)."""
    import pyarrow as pa

    fields = row_model.model_fields
    return pa.schema(
        [
            (name, _arrow_type(fields[name].annotation, f"{row_model.__name__}.{name}"))
            for name in columns_of(row_model, exclude)
        ]
    )


def rows_to_arrow(rows: Sequence[Mapping[str, Any]], schema: pyarrow.Schema) -> pyarrow.Table:
    """`rows` as an Arrow table of `schema`; keys outside the schema are left out."""
    import pyarrow as pa

    return pa.Table.from_pylist([{name: row.get(name) for name in schema.names} for row in rows], schema=schema)


class Tabular:
    """A result that reads as a table: `table_rows()` are its rows, `row_model` (minus
    `row_exclude`) its columns. Mixed into result models and `api.Run`."""

    row_model: ClassVar[type[BaseModel]]
    row_exclude: ClassVar[tuple[str, ...]] = ()

    def table_rows(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    @classmethod
    def columns(cls) -> tuple[str, ...]:
        """The stable column names of `to_pandas()` and `to_dataset()`."""
        return columns_of(cls.row_model, cls.row_exclude)

    def to_arrow(self) -> pyarrow.Table:
        return rows_to_arrow(self.table_rows(), arrow_schema(self.row_model, self.row_exclude))

    def to_pandas(self) -> pandas.DataFrame:
        """One row per `table_rows()` entry. Integer and boolean columns are pandas' nullable
        dtypes (Int64, boolean), so a missing n stays an integer column, not floats."""
        import pandas as pd
        import pyarrow as pa

        nullable = {pa.int64(): pd.Int64Dtype(), pa.bool_(): pd.BooleanDtype()}
        return self.to_arrow().to_pandas(types_mapper=nullable.get)

    def to_dataset(self) -> datasets.Dataset:
        """The same rows as a `datasets.Dataset`, its features from the row model."""
        import datasets

        table = self.to_arrow()
        return datasets.Dataset.from_dict(table.to_pydict(), features=datasets.Features.from_arrow_schema(table.schema))
