"""Spark tests: a local Spark session (the machine's Java 17) next to a real broker."""

from __future__ import annotations

import logging
import os
import sys

import pytest

from tests.broker.conftest import kafka  # noqa: F401 - the module-scoped broker fixture


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    from data_plane.spark import MillraceDataSource

    # Spark's Python workers run this interpreter (the project's virtualenv).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("millrace-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its goodbyes outlive pytest's streams
    session.dataSource.register(MillraceDataSource)
    yield session
    session.stop()
