"""The partition log: segments of record batches with sparse offset and time indexes.

Plain Python (no Django, no asyncio server code). See :mod:`data_plane.log.partition` for
the directory layout, the crash invariants and recovery; :mod:`data_plane.log.segment` and
:mod:`data_plane.log.index` for the file formats.
"""
