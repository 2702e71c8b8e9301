"""Spark pipelines on Millrace: the `millrace` PySpark data source (docs/spark.md).

Needs the ``spark`` extra (``pip install millrace[spark]``: pyspark 4.2+ and pyarrow).
"""

from data_plane.spark.source import MillraceDataSource, MillraceError

__all__ = ["MillraceDataSource", "MillraceError"]
