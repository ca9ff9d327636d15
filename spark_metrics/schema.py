"""Spark schemas derived from :mod:`linkwatch.records` (never written twice).

Each record dataclass maps to a ``StructType``: the envelope (``v``, ``kind``, ``key``) and
its fields, typed from their hints. Fields that carry a :class:`linkwatch.sketch.LatencySketch`
dict (``dict[str, Any]`` in the record) get the sketch struct, whose shape is defined once
here from ``LatencySketch.to_dict``.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Union, get_args, get_origin

from pyspark.sql import types as T

from linkwatch import records as R

SKETCH = T.StructType(
    [
        T.StructField("zero", T.LongType()),
        T.StructField("buckets", T.MapType(T.StringType(), T.LongType())),
        T.StructField("count", T.LongType()),
        T.StructField("sum", T.DoubleType()),
        T.StructField("min", T.DoubleType()),
        T.StructField("max", T.DoubleType()),
    ]
)
# Fields holding LatencySketch.to_dict() values (their hint is the generic dict[str, Any]).
SKETCH_FIELDS: dict[type[R.Record], tuple[str, ...]] = {
    R.StageSketch: ("sketch",),
    R.ClientFetch: ("wait_fetch", "fetch_latency", "end_to_end"),
    R.ProbeSample: ("produce", "end_to_end", "commit_latency"),
}

_SCALARS: dict[Any, T.DataType] = {
    int: T.LongType(),
    float: T.DoubleType(),
    str: T.StringType(),
    bool: T.BooleanType(),
    Any: T.StringType(),
}


def spark_type(hint: Any) -> tuple[T.DataType, bool]:
    """``(Spark type, nullable)`` for one field hint."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(hint) if a is not type(None)]
        assert len(args) == 1, f"unsupported union {hint}"
        return spark_type(args[0])[0], True
    if origin is dict:
        _, value = get_args(hint)
        return T.MapType(T.StringType(), spark_type(value)[0]), False
    if origin is list:
        (item,) = get_args(hint)
        return T.ArrayType(spark_type(item)[0]), False
    if hint in _SCALARS:
        return _SCALARS[hint], False
    raise TypeError(f"no Spark type for {hint!r}")


def record_schema(cls: type[R.Record]) -> T.StructType:
    hints = R.field_types(cls)
    sketch_fields = SKETCH_FIELDS.get(cls, ())
    fields = [
        T.StructField("v", T.LongType(), False),
        T.StructField("kind", T.StringType(), False),
        T.StructField("key", T.StringType(), False),
    ]
    for f in dataclasses.fields(cls):
        dtype, nullable = (SKETCH, False) if f.name in sketch_fields else spark_type(hints[f.name])
        fields.append(T.StructField(f.name, dtype, nullable))
    return T.StructType(fields)


def required_fields(cls: type[R.Record]) -> list[str]:
    """Fields without a default: a record missing one is dropped."""
    return [
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
