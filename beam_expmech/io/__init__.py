"""Files in and out, on record batches and Beam's ``FileSystems`` (local paths, globs, ``gs://``).

readers        finding files, their formats, schema checks before any budget is spent, streamed batches
csv_reader     CSV read so that a line is at most one record, whatever its neighbours hold
validation     each needed column in its canonical type; bad rows, with a reason, to the dead letter
writers        outputs written atomically
avro_tables    Arrow tables as Avro files, a block at a time, encoded column by column
release_files  where, and in which format, a release's files go: the format follows the name
errors         InputError, and what a message may say of any error
"""
